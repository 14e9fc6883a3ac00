"""What recording a run's request at its start costs per run, paired in one process.

A chat turn (one node answering, ``durability="sync"``, the second turn of its thread and
onwards) on ``store.checkpointer()``, with the request recorded at the run's start (as
shipped) and without (the start's recording switched off, the request then recorded with the
run's last messages as before). Rounds alternate which runs first; the added cost per run is
the median of the per-round differences, with its 95% interval (``_harness.spread``), in wall
time and in the process's CPU time (less moved by other jobs on a shared machine). The tool loop of
``bench_loop.py`` pays the same once per run, divided among its tool calls.

    python benchmarks/bench_input_record.py            # SQLite and PostgreSQL
    python benchmarks/bench_input_record.py --no-pg --rounds 11
    python benchmarks/bench_input_record.py --instructions   # SQLite, callgrind counts

On a shared machine the wall and CPU time of a chat turn move by far more than this cost
(see the results' load average); ``--instructions`` counts the user-space instructions of a
turn instead (two children under callgrind, alike but for the start's recording, each
running the same turns; the difference of their counts per turn), which the load does not
move. Kernel time (the commit's write) is not in that count.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _harness import machine, pg_database, spread, write_report  # noqa: E402
from bench_instructions import CHILD_ENV, interpreter, stretch_time  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from langgraph_recall import RecallStore  # noqa: E402
from langgraph_recall.checkpoint import _runs  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", secrets.token_hex(32))
DEFAULT_PG = os.environ.get("RECALL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SHIPPED = "request recorded at the run's start"
WARMUP = 5
OFF = "start's recording off"


class Subject:
    """Chat turns on one thread of their own; per round, the median wall time of a turn and
    the CPU time of the whole process per turn (background threads included)."""

    def __init__(self, store: RecallStore, record_at_start: bool) -> None:
        cp = store.checkpointer(lease_ttl=600)
        g = StateGraph(MessagesState)
        g.add_node("answer", lambda s: {"messages": [AIMessage("ok")]})
        g.add_edge(START, "answer")
        self.app = g.compile(checkpointer=cp, store=store)
        self.cfg: dict[str, Any] = {"configurable": {"thread_id": f"a-{secrets.token_hex(3)}"}}
        self.record_at_start = record_at_start
        self.name = SHIPPED if record_at_start else OFF
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.turn = 0

    def round(self, turns: int) -> None:
        real = _runs.input_messages
        if not self.record_at_start:
            _runs.input_messages = lambda loop, key: []  # type: ignore[assignment]
        try:
            times = []
            cpu = time.process_time()
            for _ in range(turns):
                self.turn += 1
                given = {"messages": [HumanMessage(f"turn {self.turn}")]}
                start = time.perf_counter()
                self.app.invoke(given, self.cfg, durability="sync")
                times.append(time.perf_counter() - start)
            self.cpu.append((time.process_time() - cpu) / turns * 1e3)
            self.wall.append(statistics.median(times) * 1e3)
        finally:
            _runs.input_messages = real


def section(target: str, rounds: int, turns: int) -> str:
    store = RecallStore.open(target)
    try:
        subjects = [Subject(store, True), Subject(store, False)]
        for s in subjects:
            s.round(5)  # warm up: the thread's first turn, caches, connections
            s.wall.clear()
            s.cpu.clear()
        for r in range(rounds):
            for s in subjects if r % 2 else subjects[::-1]:
                gc.collect()
                s.round(turns)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        store.close()
    shipped, off = subjects
    lines = [
        "| subject | ms per turn, wall (median of round medians) | ms per turn, CPU |",
        "|---|---|---|",
    ]
    for s in subjects:
        lines.append(
            f"| {s.name} | {statistics.median(s.wall):.3f} | {statistics.median(s.cpu):.3f} |"
        )
    wall = spread([a - b for a, b in zip(shipped.wall, off.wall, strict=True)])
    cpu = spread([a - b for a, b in zip(shipped.cpu, off.cpu, strict=True)])
    return (
        f"Added per run, wall: {wall.show()} ms (median of the per-round differences "
        f"[quartiles]; 95% interval of that median {wall.interval()} ms). CPU: {cpu.show()} ms "
        f"({cpu.interval()} ms).\n\n" + "\n".join(lines)
    )


def count(record_at_start: bool, turns: int, scale: float) -> subprocess.Popen[str]:
    """A child under callgrind running ``WARMUP`` turns, then ``turns``; see ``collected``."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", interpreter()]
    cmd += [os.path.abspath(__file__), "--child", "on" if record_at_start else "off"]
    cmd += [str(turns), str(scale)]
    env = {**os.environ, **CHILD_ENV}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def collected(child: subprocess.Popen[str]) -> int:
    """The instructions callgrind counted in ``child``."""
    _, err = child.communicate()
    found = re.findall(r"Collected\s*:\s*(\d+)", err)
    if child.returncode != 0 or not found:
        raise RuntimeError(err[-3000:])
    return int(found[-1])


def child(mode: str, turns: int, scale: float) -> None:
    stretch_time(scale)
    with tempfile.TemporaryDirectory() as tmp:
        store = RecallStore.open(os.path.join(tmp, "r.db"))
        subject = Subject(store, mode == "on")
        subject.round(WARMUP + turns)
        store.close()


def instructions(turns: int, scale: float) -> str:
    # The two children do the same imports and set-up and the same number of turns, so the
    # difference of their counts is what the start's recording adds, over all their turns.
    on, off = (collected(c) for c in [count(True, turns, scale), count(False, turns, scale)])
    added = (on - off) / (WARMUP + turns)
    return (
        f"Added per run: {added / 1e3:.1f}k instructions (user space; the difference of two "
        f"children of {WARMUP + turns} chat turns each, clock constants stretched x{scale:g}).\n\n"
        "| subject | instructions, whole child |\n|---|---|\n"
        f"| {SHIPPED} | {on / 1e6:.1f}M |\n| {OFF} | {off / 1e6:.1f}M |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--turns", type=int, default=20, help="chat turns per subject per round")
    ap.add_argument("--pg", default=DEFAULT_PG)
    ap.add_argument("--no-pg", dest="pg", action="store_const", const=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "input_record.md"))
    ap.add_argument("--instructions", action="store_true", help="count with callgrind instead")
    ap.add_argument("--time-scale", type=float, default=50.0)
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return
    args = ap.parse_args()
    if args.instructions:
        write_report(
            args.out.replace(".md", "_instructions.md"),
            "A run's request recorded at its start: instructions per run",
            ("python benchmarks/bench_input_record.py " + shlex.join(sys.argv[1:])).strip(),
            [("SQLite (WAL + NORMAL), callgrind", instructions(args.turns, args.time_scale))],
            about=machine(["langgraph", "langgraph-checkpoint-sqlite"]),
        )
        return
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        sections.append(
            ("SQLite (WAL + NORMAL)", section(os.path.join(tmp, "r.db"), args.rounds, args.turns))
        )
    if args.pg:
        with pg_database(args.pg, "recall_inputrec") as dsn:
            sections.append(("PostgreSQL (local server)", section(dsn, args.rounds, args.turns)))
    write_report(
        args.out,
        "A run's request recorded at its start: the cost per run",
        ("python benchmarks/bench_input_record.py " + shlex.join(sys.argv[1:])).strip(),
        sections,
        about=machine(
            ["langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"]
        ),
    )


if __name__ == "__main__":
    main()
