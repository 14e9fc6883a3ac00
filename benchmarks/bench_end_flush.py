"""A call's end: a commit with its own disk flush, one the next write flushes, or none at all.

With ``store.checkpointer()`` the end of a lone durable call commits inside the task's own
write of its answer (the saver's ``put_writes``; ``store/_due.py``); any other end commits on
its own, and under ``durability="power"`` (and PostgreSQL's default, ``synchronous_commit=on``)
without waiting for the disk, because the task's write follows at once and its flush carries
it (see the README's "Durability"). This script measures both steps, in one process,
interleaved:

- **plain**: LangGraph's ``ToolNode`` on the bare saver (the baseline);
- **own flush**: ``store.checkpointer()`` + ``DurableToolNode`` (tool ``external``), the end
  committed on its own and waiting for its own flush (a benchmark-only patch);
- **flushed by the task's write**: the end committed on its own without waiting for the disk
  (what a call among several gets; a benchmark-only patch for the lone call here);
- **in the task's write**: the graph as shipped.

The 20-call loop and its figures are ``bench_loop.py``'s: added ms per tool call against plain,
per round, then the median and quartiles over the rounds.

    python benchmarks/bench_end_flush.py               # SQLite 'power' and PostgreSQL
    python benchmarks/bench_end_flush.py --no-pg --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from langgraph.prebuilt import ToolNode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import find, run_interleaved, write_report  # noqa: E402
from bench_loop import (  # noqa: E402
    DEFAULT_PG,
    HERE,
    LOOP,
    SETTINGS,
    TITLES,
    LoopCase,
    about,
    add_tool,
    added,
    loop_case,
    loop_graph,
    pg_database,
    pg_schema,
    postgres_saver,
    run_once,
    sqlite_saver,
)

from langgraph_recall import DurableToolNode, RecallStore  # noqa: E402
from langgraph_recall.tools import _steps  # noqa: E402

PLAIN = "ToolNode + bare saver"
OWN = "langgraph-recall, end with its own flush"
CARRIED = "langgraph-recall, end flushed by the task's write"
RIDES = "langgraph-recall, end in the task's write (as shipped)"


@contextmanager
def end_on_its_own(flush: bool) -> Iterator[None]:
    """While inside, every call's end is a commit of its own, waiting for its own flush or
    not (what a call among several gets)."""
    shipped_finish, shipped_task = _steps.finish, _steps.task_id_of

    def finish(store: Any, agent_id: str, action: Any, out: Any, flush_later: bool = False) -> None:
        shipped_finish(store, agent_id, action, out, flush_later and not flush)

    _steps.finish = finish  # type: ignore[assignment]
    _steps.task_id_of = lambda config: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _steps.finish = shipped_finish  # type: ignore[assignment]
        _steps.task_id_of = shipped_task  # type: ignore[assignment]


def group(
    bare: Any, store: RecallStore, setting: str, calls: int, per_round: int
) -> list[LoopCase]:
    plain = loop_graph(ToolNode([add_tool()]), bare, calls=calls)
    recall = loop_graph(
        DurableToolNode([add_tool()], classes={"add": "external"}),
        store.checkpointer(),
        calls=calls,
        store=store,
    )

    def own() -> str:
        with end_on_its_own(flush=True):
            return run_once(recall)

    def carried() -> str:
        with end_on_its_own(flush=False):
            return run_once(recall)

    def checked(fn: Callable[[], str]) -> Callable[[], str]:
        def run() -> str:
            thread = fn()
            done = [a for a in store.actions(thread) if a.status == "done"]
            if len(done) != calls:
                raise RuntimeError(f"{len(done)} actions done, not {calls}")
            return thread

        return run

    return [
        loop_case(PLAIN, setting, lambda: run_once(plain), per_round),
        loop_case(OWN, setting, checked(own), per_round),
        loop_case(CARRIED, setting, checked(carried), per_round),
        loop_case(RIDES, setting, checked(lambda: run_once(recall)), per_round),
    ]


def section(cases: list[LoopCase], calls: int) -> str:
    plain = find(cases, LOOP, PLAIN)
    own, carried, rides = (find(cases, LOOP, subject) for subject in (OWN, CARRIED, RIDES))
    lines = [
        "| subject | added ms per tool call, wall [quartiles] | CPU [quartiles] |",
        "|---|---|---|",
    ]
    for case in (own, carried, rides):
        a = added(case, plain, calls)
        lines.append(f"| {case.subject} | {a.wall.show()} | {a.cpu.show()} |")
    # Paired round by round: both subjects ran in the same round, so a loaded moment of the
    # machine lands on both.
    lines.append("")
    for label, more, less in (
        ("own flush - flushed by the task's write", own, carried),
        ("flushed by the task's write - in the task's write", carried, rides),
    ):
        saved = added(more, less, calls)
        lines.append(
            f"Saved per call ({label}, per round): "
            f"{saved.wall.show()} ms wall (95% interval of the median "
            f"{saved.wall.interval()}), {saved.cpu.median:.3f} ms CPU."
        )
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20, help="tool calls per loop")
    parser.add_argument("--per-round", type=int, default=3, help="loops per subject per round")
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "end_flush.md"))
    args = parser.parse_args(argv)

    sections: list[tuple[str, str]] = []
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        groups: list[tuple[str, list[LoopCase]]] = []
        store = RecallStore.open(os.path.join(tmp, "recall.db"), durability="power")
        stack.callback(store.close)
        bare = sqlite_saver(os.path.join(tmp, "bare.db"), "FULL")
        groups.append(("sqlite-power", group(bare, store, "WAL+FULL", args.calls, args.per_round)))
        if not args.no_pg:
            dsn = stack.enter_context(pg_database(args.pg, "endflush"))
            pg_store = RecallStore.open(pg_schema(dsn, "recall"))
            stack.callback(pg_store.close)
            pg_bare = postgres_saver(pg_schema(dsn, "bare"), stack)
            groups.append(
                ("postgres", group(pg_bare, pg_store, "PG sync commit", args.calls, args.per_round))
            )
        for name, cases in groups:
            run_interleaved(cases, args.rounds, progress=print)
            sections.append((TITLES[name], section(cases, args.calls) + "\n\n" + SETTINGS[name]))
    command = "python benchmarks/bench_end_flush.py " + shlex.join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    write_report(
        args.out,
        "A call's end: its own disk flush, the next write's, or inside the task's write",
        command.strip(),
        sections,
        intro="\n\n".join(__doc__.split("\n\n")[1:4]),
        about=about(),
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
