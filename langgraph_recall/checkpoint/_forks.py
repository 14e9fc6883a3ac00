"""Finding what went wrong in a thread's checkpoint history: forks and unfinished runs.

LangGraph does not notice two writers on one thread: both succeed and the history forks (two
children of one checkpoint, or two roots on a new thread), and ``get_state`` silently follows
the newest branch. Nor does it mark a run that died after its tasks finished but before the
next checkpoint: the head then holds pending writes, ``get_state().next`` is empty, and the
run looks finished although ``invoke(None)`` would complete it. ``inspect_thread`` reports both;
``inspect_threads`` does it for every thread in a store's database (the CLI's ``doctor``).

A branch made on purpose (time travel from an old ``checkpoint_id``, ``update_state`` on a past
checkpoint) also has two children. Such children carry ``source`` "fork" or "update", or, when
RecallCheckpointer wrote them from a run started at an explicit ``checkpoint_id``,
``recall_branch``; they are reported as branches, not as forks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

try:  # pragma: no cover - private constants; values are stable
    from langgraph._internal._constants import ERROR, INTERRUPT, RESUME
except ImportError:  # pragma: no cover
    ERROR, INTERRUPT, RESUME = "__error__", "__interrupt__", "__resume__"

if TYPE_CHECKING:
    from ..store import RecallStore

_DELIBERATE = ("fork", "update")


@dataclass(frozen=True)
class ThreadReport:
    """The shape of one thread's history (one checkpoint namespace).

    ``status``: "ok", "forked" (two writers), "unfinished" (a run died after its tasks
    finished; resume with ``invoke(None, config)``), "started" (only the run's input was saved),
    "failed" (a task raised), "interrupted" (waiting for ``Command(resume=...)``) or "empty".
    """

    thread_id: str
    checkpoint_ns: str
    checkpoints: int
    head: str | None
    roots: tuple[str, ...]
    forks: tuple[tuple[str, tuple[str, ...]], ...]
    branches: tuple[tuple[str, tuple[str, ...]], ...] = ()
    head_writes: tuple[str, ...] = field(default=())
    head_source: str | None = None

    @property
    def status(self) -> str:
        if not self.checkpoints:
            return "empty"
        if self.forks or len(self.roots) > 1:
            return "forked"
        channels = set(self.head_writes)
        if ERROR in channels:
            return "failed"
        if INTERRUPT in channels:
            return "interrupted"
        if channels - {RESUME}:
            return "unfinished"
        if self.head_source == "input":
            return "started"
        return "ok"

    def findings(self) -> list[str]:
        """Problems worth a person's attention, one sentence each (empty when healthy)."""
        where = f"thread {self.thread_id!r}" + (
            f" ns {self.checkpoint_ns!r}" if self.checkpoint_ns else ""
        )
        out: list[str] = []
        if len(self.roots) > 1:
            out.append(
                f"{where}: {len(self.roots)} root checkpoints ({', '.join(self.roots)}): two "
                "writers started it at once; only the newest branch shows in get_state"
            )
        for parent, children in self.forks:
            out.append(
                f"{where}: checkpoint {parent} has {len(children)} children ({', '.join(children)}): "
                "two writers forked it; only the newest branch shows in get_state"
            )
        status = self.status
        if status == "unfinished":
            out.append(
                f"{where}: the last run stopped after its tasks finished but before the next "
                f"checkpoint (head {self.head}); resume it with invoke(None, config)"
            )
        elif status == "started":
            out.append(
                f"{where}: the last run saved its input (head {self.head}) and no step after "
                "it; resume it with invoke(None, config)"
            )
        elif status == "failed":
            out.append(f"{where}: the last run failed at head {self.head} (a task raised)")
        return out


def inspect_thread(
    saver: BaseCheckpointSaver, thread_id: str, checkpoint_ns: str = ""
) -> ThreadReport:
    """Forks, roots and the head's state of one thread, read through ``saver.list``."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}
    return _report(thread_id, checkpoint_ns, saver.list(config))  # type: ignore[arg-type]


def find_forks(
    saver: BaseCheckpointSaver, thread_id: str, checkpoint_ns: str = ""
) -> list[tuple[str, tuple[str, ...]]]:
    """(parent, children) for every checkpoint with two or more children from concurrent
    writers, plus ("<root>", roots) when the thread has several roots."""
    report = inspect_thread(saver, thread_id, checkpoint_ns)
    out = list(report.forks)
    if len(report.roots) > 1:
        out.insert(0, ("<root>", report.roots))
    return out


def unfinished_runs(
    saver: BaseCheckpointSaver, thread_ids: Iterable[str] | None = None
) -> list[ThreadReport]:
    """Threads whose last run did not finish: died after tasks finished, or after its input."""
    reports = (
        [inspect_thread(saver, t) for t in thread_ids]
        if thread_ids is not None
        else _all_reports(saver)
    )
    return [r for r in reports if r.status in ("unfinished", "started")]


def inspect_threads(target: RecallStore | BaseCheckpointSaver) -> list[ThreadReport]:
    """A report for every (thread, namespace) in a saver, or in a store's own database."""
    if isinstance(target, BaseCheckpointSaver):
        return _all_reports(target)
    from ._same_db import close_same_database_saver, same_database_saver

    saver = same_database_saver(target)
    try:
        return _all_reports(saver)
    finally:
        close_same_database_saver(saver)


def _all_reports(saver: BaseCheckpointSaver) -> list[ThreadReport]:
    groups: dict[tuple[str, str], list[CheckpointTuple]] = defaultdict(list)
    for tup in saver.list(None):
        conf = tup.config["configurable"]
        groups[(str(conf["thread_id"]), conf.get("checkpoint_ns", ""))].append(tup)
    return [_report(t, ns, tuples) for (t, ns), tuples in sorted(groups.items())]


def _report(thread_id: str, ns: str, tuples: Iterable[CheckpointTuple]) -> ThreadReport:
    children: dict[str | None, list[CheckpointTuple]] = defaultdict(list)
    head: CheckpointTuple | None = None
    count = 0
    for tup in tuples:
        count += 1
        parent = (
            tup.parent_config["configurable"].get("checkpoint_id") if tup.parent_config else None
        )
        children[parent].append(tup)
        if head is None or _cid(tup) > _cid(head):  # uuid6 ids sort by time
            head = tup
    forks: list[tuple[str, tuple[str, ...]]] = []
    branches: list[tuple[str, tuple[str, ...]]] = []
    for parent, kids in children.items():
        if parent is None or len(kids) < 2:
            continue
        ids = tuple(sorted(_cid(k) for k in kids))
        deliberate = sum(1 for k in kids if _deliberate(k))
        (branches if deliberate >= len(kids) - 1 else forks).append((parent, ids))
    head_writes: tuple[str, ...] = ()
    if head is not None and head.pending_writes:
        head_writes = tuple(sorted({w[1] for w in head.pending_writes}))
    return ThreadReport(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoints=count,
        head=_cid(head) if head is not None else None,
        roots=tuple(sorted(_cid(k) for k in children.get(None, []))),
        forks=tuple(sorted(forks)),
        branches=tuple(sorted(branches)),
        head_writes=head_writes,
        head_source=(head.metadata or {}).get("source") if head is not None else None,
    )


def _deliberate(tup: CheckpointTuple) -> bool:
    """Written by update_state, a __copy__, or a run started from an explicit checkpoint_id."""
    md = tup.metadata or {}
    return md.get("source") in _DELIBERATE or bool(md.get("recall_branch"))


def _cid(tup: Any) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])
