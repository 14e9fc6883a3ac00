"""Each message of the graph's messages channel recorded into the agent's turns exactly once.

Recording follows the checkpoints: a message is handed to ``store.record`` only after a
checkpoint containing it was written, so a fenced-out or crashed run records nothing it did not
also checkpoint. The one exception is a run's request, its input's messages, recorded at the
run's start (``_inputs``): LangGraph does not wait for the input checkpoint before the first
step, and a request lost with it is lost for good. Three pieces:

- ``MessageCursor`` (one per run and thread) finds the new messages of a checkpoint by position:
  ``add_messages`` appends, so the new ones are whatever follows the list already seen, when
  every position of that list still holds the same message (``_extends``). Only when the list
  was rewritten (``RemoveMessage``, a replacement) does it compare ids over the whole list,
  still without touching the database.
- ``TurnBuffer`` (one per run) keeps a reference to the latest checkpointed messages list
  instead of handing each checkpoint's new messages over at once: a fast loop's checkpoints
  are recorded together when the run ends (or pauses at an interrupt), when ``MAX_BATCH`` new
  messages are waiting, or at the first checkpoint ``RECORD_EVERY`` after the last hand-over
  (so an agent whose steps take seconds still has each step recorded as it goes). A put costs
  a length check, not a scan, a lock and a thread switch. A list rewritten in between
  (``RemoveMessage``) hands over what the old list held first, so nothing checkpointed is
  skipped.
- ``Recorder`` writes the hand-overs from one background thread, in order, so the checkpoint
  path pays a queue append, not a transaction. It coalesces what arrives while it writes, and
  lingers briefly (``LINGER``) after a first message unless flushed. A run's end (also when it
  pauses at an interrupt) flushes the recorder, then records what is left in the transaction
  that releases the lease (``_runs.FinalWrite``), so when ``invoke`` returns every message is
  recorded. After a failed write, an agent's later hand-overs are not written (``broken``):
  the turns never get a gap with later messages after it, and the run's end records its whole
  last list again, in order (recorded ids are skipped).
- ``catch_up`` runs at each run start, against the restored checkpoint and, when the agent
  changed threads, against the head of the thread it ran on before (``switch_thread``):
  messages a crash left unrecorded (checkpointed, then killed before the recorder wrote them)
  are recorded then, once, in order, and before the run's first node (``RunLifecycle.settle``),
  so a briefing built by that node already has them. It reads the agent's newest recorded turn
  and records only what follows it, once a read of ids (no turn decoded) shows every message
  before it recorded; a list rewritten there (a summary in place of the oldest messages) is
  recorded whole, the store skipping what it has. It is skipped when the run restores the checkpoint this
  process's last run of the agent ended at, with everything recorded, under the same lease
  epoch (``RunLifecycle.complete``).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from .._briefing import is_briefing_message
from ..store._transcript import own_ids, with_stable_ids
from ._same_db import close_same_database_saver, same_database_saver

if TYPE_CHECKING:
    from ..store import RecallStore


def messages_in(value: Any) -> list[BaseMessage] | None:
    """The channel value if it is a list ending in a message (None otherwise).

    Only the end is checked, so each checkpoint costs O(1) here, not O(history); whatever is
    recorded is type-checked among the new messages only (``MessageCursor``).
    """
    if isinstance(value, list) and (not value or isinstance(value[-1], BaseMessage)):
        return value
    return None


def only_messages(values: Sequence[Any]) -> list[BaseMessage]:
    # briefing_node keeps a briefing in the state; like the hooks, the recording leaves it out:
    # it is built from the records, not a turn of them.
    return [m for m in values if isinstance(m, BaseMessage) and not is_briefing_message(m)]


class MessageCursor:
    """What a run has already seen of one thread's messages channel."""

    __slots__ = ("_ids", "_seen", "_thread")

    def __init__(self, restored: Sequence[BaseMessage], thread_id: str | None = None) -> None:
        # An id-less message is known by the key made from its content, thread and place in
        # the channel (``with_stable_ids``), as the store names it: the same message each look.
        self._thread = thread_id
        ids = own_ids(restored)
        if ids is not None and all(ids):
            # The usual channel, every message with an id: the set is made in C (a run's start
            # with 10k restored messages). A briefing's id in it is harmless: never fresh.
            self._ids: set[str] = set(ids)
        else:
            restored_named = with_stable_ids(restored, thread_id)
            self._ids = {m.id for m in only_messages(restored_named) if m.id}
        # The list last looked at (a copy: the channel's list is not ours to hold).
        self._seen: list[BaseMessage] = list(restored)

    @property
    def seen(self) -> int:
        """Length of the list last looked at."""
        return len(self._seen)

    def recorded(self, messages: Sequence[BaseMessage]) -> None:
        """``messages`` (each with an id) are recorded already: never new when seen later."""
        self._ids.update(str(m.id) for m in messages)

    def new_messages(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages not seen before, in channel order; remembers them as seen."""
        n = len(self._seen)
        if n and _extends(messages, self._seen):
            candidates = with_stable_ids(messages[n:], self._thread, n)
        else:
            # First look, or a rewritten list: compare by id below.
            candidates = with_stable_ids(messages, self._thread)
        fresh = [m for m in only_messages(candidates) if not (m.id and m.id in self._ids)]
        self._ids.update(m.id for m in fresh if m.id)
        self._seen = list(messages)
        return fresh


def _same(a: Any, b: Any) -> bool:
    if b is None:
        return False
    a_id, b_id = getattr(a, "id", None), getattr(b, "id", None)
    if a_id or b_id:
        return a_id == b_id
    return a is b


class TurnBuffer:
    """A run's checkpointed messages not yet handed to the recorder (see the module doc).

    Only the latest checkpoint's list is kept: ``add_messages`` builds each one by appending to
    the previous, so it holds every message the earlier ones did, unless it was rewritten.
    """

    __slots__ = ("cursor", "whole", "thread_id", "_latest", "_handed_at")

    def __init__(self, restored: Sequence[BaseMessage], thread_id: str | None = None) -> None:
        self.cursor = MessageCursor(restored, thread_id)
        self.thread_id = thread_id
        # The latest checkpointed list, kept after hand-overs: what to record again, in order,
        # if a write failed (``Recorder.broken``).
        self.whole: Sequence[BaseMessage] = restored
        self._latest: Sequence[BaseMessage] | None = None
        self._handed_at = time.monotonic()

    def note(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """A checkpoint holding ``messages`` was written; returns what to record now."""
        out: list[BaseMessage] = []
        latest = self._latest
        if latest is not None and not _extends(messages, latest):
            # Rewritten since the last checkpoint: what that one held goes first, or a message
            # checkpointed and then removed would never be recorded.
            out = self.cursor.new_messages(latest)
        self._latest = self.whole = messages
        now = time.monotonic()
        if len(messages) - self.cursor.seen >= MAX_BATCH or now - self._handed_at >= RECORD_EVERY:
            out += self.cursor.new_messages(messages)
            self._latest = None
            self._handed_at = now
        return out

    def recorded(self, messages: Sequence[BaseMessage]) -> None:
        """The run's start recorded ``messages`` (its input): not handed over again."""
        self.cursor.recorded(messages)

    def whole_messages(self) -> list[BaseMessage]:
        """The whole latest list as recorded (briefings left out, id-less messages named)."""
        return only_messages(with_stable_ids(self.whole, self.thread_id))

    def drain(self) -> list[BaseMessage]:
        """Everything still waiting (the run ended or paused)."""
        latest, self._latest = self._latest, None
        self._handed_at = time.monotonic()
        return self.cursor.new_messages(latest) if latest is not None else []


def _extends(new: Sequence[Any], old: Sequence[Any]) -> bool:
    """Whether ``new`` is ``old`` with messages appended: the same message (by id) at every
    position of ``old``.

    Every position, not the last alone: a summarizing node that replaces the oldest messages
    with a summary keeps the list's tail, and a check of the last message took the rewritten
    list for an extended one, so the summary (and the messages it replaced) were never
    recorded. ``add_messages`` keeps the message objects of an appended-to list, so the usual
    case is settled by ``list.__eq__``, which tries identity first, in C (about 3 us at 1,000
    messages, against 19 us for a Python comparison per message); only a list whose objects
    differ is compared by id.
    """
    k = len(old)
    if len(new) < k:
        return False
    head = new[:k]
    if isinstance(head, list) and isinstance(old, list) and head == old:
        return True
    return all(map(_same, head, old))


def switch_thread(store: RecallStore, agent_id: str, thread_id: str) -> str | None:
    """Note that the agent now runs on ``thread_id``; returns the thread it ran on before, if
    different. Written at run start, before any node, so a run killed at any point after it is
    still known to the next run of the agent (which then records what that thread left)."""
    return store._switch_thread(agent_id, thread_id)


def catch_up(
    store: RecallStore, agent_id: str, thread_id: str | None, restored: Sequence[BaseMessage]
) -> int:
    """Record what a crash left unrecorded in ``restored``; returns how many were new."""
    restored = only_messages(with_stable_ids(restored, thread_id))
    if not restored:
        return 0
    newest = store.turns(agent_id, last=1)
    if newest:
        last_id = newest[-1].msg_id
        for i in range(len(restored) - 1, -1, -1):
            if restored[i].id == last_id:
                if not store._all_recorded(agent_id, [str(m.id) for m in restored[:i]]):
                    # Rewritten before the newest turn (a summary in place of the oldest
                    # messages): the whole list, the store skipping what it has.
                    return store.record(agent_id, list(restored), thread_id=thread_id)
                tail = list(restored[i + 1 :])
                return store.record(agent_id, tail, thread_id=thread_id) if tail else 0
    # Nothing recorded yet, or the newest turn came from another thread of this agent: the
    # store skips what it already has (by message id).
    return store.record(agent_id, list(restored), thread_id=thread_id)


def unrecorded_turns(
    store: RecallStore,
    thread_ids: Sequence[str] | None = None,
    messages_key: str = "messages",
) -> list[tuple[str, str, int]]:
    """``(agent, thread, how many)`` for each thread of the store's database (or of
    ``thread_ids``) whose head checkpoint holds messages the turns of the agent it was
    written for lack, while no run of that agent is going: a run whose end could not record
    them (the database was unreachable; it raised saying so) and that has not run since. The
    agent's next run, or the same turn submitted again, records them. ``doctor`` asks, with
    the threads it has listed already."""
    saver = same_database_saver(store)
    out: list[tuple[str, str, int]] = []
    now = time.time()
    try:
        if thread_ids is None:
            thread_ids = sorted(
                {str(t.config["configurable"]["thread_id"]) for t in saver.list(None)}
            )
        for thread in thread_ids:
            head = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            agent_id = (head.metadata or {}).get("recall_agent") if head is not None else None
            if head is None or agent_id is None:
                continue  # written outside any agent's run: nobody records it
            lease = store.lease(str(agent_id))
            if lease is not None and lease.expires_at > now:
                continue  # a run is going: its last messages are on their way
            messages = messages_in(head.checkpoint["channel_values"].get(messages_key))
            if not messages:
                continue
            ids = [str(m.id) for m in only_messages(with_stable_ids(messages, thread))]
            missing = store._unrecorded(str(agent_id), ids)
            if missing:
                out.append((str(agent_id), thread, len(missing)))
    finally:
        close_same_database_saver(saver)
    return out


LINGER = 0.05
"""Seconds the recorder waits after a first message for more before writing, unless flushed
or ``MAX_BATCH`` full. Nothing can be lost to it (nor to ``TurnBuffer``'s holding back): a crash
leaves the messages in the checkpoints already written, and the next run of the agent, on this
thread or another, records them before its first node runs (``RunLifecycle.settle``), so a
briefing built there already has them."""
RECORD_EVERY = 0.5
"""Seconds after which a run's next checkpoint hands its messages over even mid-run, so readers
in other processes (the CLI, a dashboard) see a long run's turns while it runs. A loop faster
than this is recorded in batches; an agent whose steps take longer, checkpoint by checkpoint."""
MAX_BATCH = 64
"""Messages that make a run hand its buffer over, and the recorder write without lingering."""


@dataclass
class _Job:
    agent_id: str
    thread_id: str | None
    messages: list[BaseMessage]
    catch_up: bool = False


class Recorder:
    """A background writer of turns, in submission order, batched per agent and thread."""

    def __init__(self, store: RecallStore) -> None:
        self.store = store
        self._jobs: deque[_Job] = deque()
        self._pending: dict[str, int] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._queued = 0  # messages in _jobs
        self._urgent = 0  # flushes waiting: write now, do not linger
        # Agents a write of whose turns failed. Their later messages are not written either
        # (they wait in the checkpoints), so the turns never get a hole that a later message
        # would sit after: the run's final write records its whole last list, or the next
        # run's catch-up records what follows the newest recorded turn, both in order.
        self.broken: set[str] = set()

    def submit(
        self,
        agent_id: str,
        thread_id: str | None,
        messages: list[BaseMessage],
        *,
        catch_up: bool = False,
    ) -> None:
        if not messages:
            return
        with self._cond:
            idle = not self._jobs
            self._jobs.append(_Job(agent_id, thread_id, messages, catch_up))
            self._queued += len(messages)
            self._pending[agent_id] = self._pending.get(agent_id, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="recall-recorder", daemon=True
                )
                self._thread.start()
            # Wake the writer only when it may be waiting for a first job or a full batch: a
            # lingering writer wakes on its own deadline, and waking it per checkpoint would
            # cost a thread switch each time for nothing.
            if idle or self._queued >= MAX_BATCH:
                self._cond.notify_all()

    def write_now(self, agent_id: str, thread_id: str | None, messages: list[BaseMessage]) -> None:
        """Write ``messages`` on the calling thread, as the background writer would (a failure
        warns; the checkpoints still hold them). The caller flushes the agent's earlier jobs
        first (``flush``), so the order is kept."""
        if messages:
            self._write(_Job(agent_id, thread_id, messages))

    def flush(self, agent_id: str | None = None, timeout: float | None = None) -> bool:
        """Wait until every job (of ``agent_id``) submitted so far is written; False on timeout."""

        def done() -> bool:
            if agent_id is not None:
                return not self._pending.get(agent_id)
            return not self._pending

        with self._cond:
            # A waiting flush cuts the writer's linger short: the run's end must not wait for it.
            self._urgent += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(done, timeout)
            finally:
                self._urgent -= 1

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout=timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    if not self._cond.wait(30.0) and not self._jobs:
                        self._thread = None  # idle: let the thread end; submit starts another
                        return
                if not self._jobs:
                    self._thread = None
                    return
                # Linger to coalesce the next checkpoints' messages into this write. A crash
                # while lingering loses nothing: the messages are in the checkpoints already
                # written, and the next run start's catch_up records them once, in order.
                deadline = time.monotonic() + LINGER
                while not self._closed and not self._urgent and self._queued < MAX_BATCH:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = list(self._jobs)
                self._jobs.clear()
                self._queued = 0
            for job in _merge(batch):
                self._write(job)
            with self._cond:
                for job in batch:
                    self._pending[job.agent_id] -= 1
                    if not self._pending[job.agent_id]:
                        del self._pending[job.agent_id]
                self._cond.notify_all()

    def failed(self, agent_id: str, exc: BaseException) -> None:
        """A write of the agent's turns failed: noted (``broken``), and said."""
        self.broken.add(agent_id)
        # The checkpoint still holds these messages: the run's end records them again, in
        # order, or raises saying it could not; else the agent's next run start does.
        warnings.warn(
            f"could not record turns of agent {agent_id!r} yet ({exc}); they are safe in its "
            "checkpoint, and the run's end (or the agent's next run) records them",
            RuntimeWarning,
            stacklevel=2,
        )

    def _write(self, job: _Job) -> None:
        try:
            if job.catch_up:
                catch_up(self.store, job.agent_id, job.thread_id, job.messages)
                self.broken.discard(job.agent_id)
            elif job.agent_id not in self.broken:
                self.store.record(job.agent_id, job.messages, thread_id=job.thread_id)
        except Exception as exc:
            self.failed(job.agent_id, exc)


def _merge(batch: list[_Job]) -> list[_Job]:
    """Adjacent plain jobs of the same agent and thread become one write (order kept)."""
    out: list[_Job] = []
    for job in batch:
        last = out[-1] if out else None
        if (
            last is not None
            and not job.catch_up
            and not last.catch_up
            and (last.agent_id, last.thread_id) == (job.agent_id, job.thread_id)
        ):
            last.messages = last.messages + job.messages
        else:
            out.append(_Job(job.agent_id, job.thread_id, list(job.messages), job.catch_up))
    return out
