"""What a PostgreSQL round trip costs here, by where the client and the server's process run.

Every PostgreSQL figure of the other benchmarks is mostly round trips on loopback: a
``store.record`` is one statement, a repeat lookup a process has not seen finish is one read.
On this machine class (a small virtual machine, 2 vCPUs) a round trip's cost depends on
something no library controls: whether the client and the server backend serving it run on the
same vCPU. Across two, each message wakes a vCPU that was idle, and that wake-up, not the
server's work, is most of the round trip. This script measures the same operations under three
placements, in one process, interleaved round by round:

- **free**: nothing pinned, the kernel places both (what every other benchmark measures, and
  what an application gets);
- **one vCPU**: this process and the backends of its database pinned to vCPU 0;
- **two vCPUs**: this process on vCPU 0, the backends on vCPU 1.

Each placement has a database of its own (its backends are the ones pinned) and runs, on a raw
psycopg connection and through a ``RecallStore`` (``durability="process"``):
``SELECT 1``; an INSERT committing alone (``synchronous_commit=off``); ``store.record`` of 1
and of 42 new messages; the first repeat lookup in a process (``store.claim`` of a finished
call, read from the database). Pinning another user's process needs root (CAP_SYS_NICE); without
it only "free" runs, and the report says so.

    python benchmarks/bench_round_trip.py
    python benchmarks/bench_round_trip.py --rounds 5 --calls 100
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Case, find, run_interleaved, spread, write_report  # noqa: E402
from bench_loop import DEFAULT_PG, HERE, about, pg_database  # noqa: E402
from bench_plugin import turn_messages  # noqa: E402

from langgraph_recall import RecallStore  # noqa: E402

# The benchmark's own throwaway secret (a PostgreSQL store refuses to open without one).
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", "bench-round-trip-" + "0" * 32)

FREE, ONE, TWO = "free", "one vCPU", "two vCPUs"
# (client's vCPUs, backends' vCPUs); None: unpinned.
PLACEMENTS: dict[str, tuple[set[int] | None, set[int] | None]] = {
    FREE: (None, None),
    ONE: ({0}, {0}),
    TWO: ({0}, {1}),
}
OPERATIONS = (
    "SELECT 1 (raw connection)",
    "INSERT, committing alone (raw connection, synchronous_commit=off)",
    "store.record, 1 new message",
    "store.record, 42 new messages, per message",
    "repeat lookup, first in a new process (store.claim)",
)


@dataclass
class Placed(Case):
    """A case whose rounds run with this process, and its database's backends, pinned."""

    place: Callable[[], None] = lambda: None

    def run_round(self) -> None:
        self.place()
        try:
            super().run_round()
        finally:
            if ALL_CPUS:  # empty where the platform cannot pin (only "free" runs there)
                os.sched_setaffinity(0, ALL_CPUS)


ALL_CPUS = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()


def can_pin(admin: str) -> str | None:
    """None when this process may pin the server's backends; otherwise why it cannot."""
    import psycopg

    if not hasattr(os, "sched_setaffinity"):
        return "this platform has no sched_setaffinity"
    if len(ALL_CPUS) < 2:
        return f"this process may run on {len(ALL_CPUS)} vCPU only"
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        try:
            os.sched_setaffinity(int(row[0]), ALL_CPUS)
        except (PermissionError, ProcessLookupError) as exc:
            # ProcessLookupError: the server runs on another machine or in a container.
            return f"cannot pin the server's backend ({exc}); run as root on the server's host"
    return None


def pinner(admin: Any, database: str, client: set[int] | None, server: set[int] | None) -> Any:
    """A function that pins this process and every backend serving ``database`` as given."""

    def place() -> None:
        if server is not None:
            pids = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchall()
            for (pid,) in pids:
                try:
                    os.sched_setaffinity(pid, server)
                except ProcessLookupError:  # a backend that just ended
                    pass
        if client is not None:
            os.sched_setaffinity(0, client)

    return place


def placement_cases(
    admin_dsn: str, admin: Any, name: str, calls: int, stack: ExitStack
) -> list[Case]:
    """The operations under placement ``name``, on a database of their own (closed by
    ``stack``)."""
    import psycopg

    dsn = stack.enter_context(pg_database(admin_dsn, "rt"))
    database = dsn.rsplit("/", 1)[1].split("?")[0]
    raw = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    raw.execute("SET synchronous_commit = off")
    raw.execute("CREATE TABLE floor (id BIGINT PRIMARY KEY, data BYTEA NOT NULL)")
    cur = raw.cursor()
    store = stack.enter_context(RecallStore.open(dsn, durability="process"))
    args = {"a": 1, "b": 1}
    claim = store.claim("rt", "done-1", tool="add", args=args, args_digest="d1")
    store.end(claim.action.action_id, 1, "done", result="2")
    blob = b"x" * 300

    def select(i: int) -> None:
        cur.execute("SELECT 1").fetchone()

    def insert(i: int) -> None:
        cur.execute("INSERT INTO floor VALUES (%s, %s)", (i, blob))

    def recorder(n: int) -> Callable[[Any], object]:
        # An agent per batch size, so every batch is new messages (turn_messages numbers its
        # ids by batch and size: two sizes on one agent would repeat ids).
        return lambda batch: store.record(f"rt-{n}", batch)

    def cold_repeat(i: int) -> None:
        store._db.finished.clear()  # as a process that did not see the call finish
        assert store.claim("rt", "done-1", tool="add", args=args, args_digest="d1").status == "done"

    place = pinner(admin, database, *PLACEMENTS[name])
    fns: list[tuple[Callable[[Any], object], int, Callable[[int], object] | None]] = [
        (select, 1, None),
        (insert, 1, None),
        (recorder(1), 1, lambda i: turn_messages(i, 1)),
        (recorder(42), 42, lambda i: turn_messages(i, 42)),
        (cold_repeat, 1, None),
    ]
    return [
        Placed(op, name, fn, calls=calls, per=per, setup=setup, setting=name, place=place)
        for op, (fn, per, setup) in zip(OPERATIONS, fns, strict=True)
    ]


def report(cases: list[Case], names: list[str], why_not: str | None) -> list[tuple[str, str]]:
    ratio = FREE in names and ONE in names
    head = ["operation", *(f"{n}: median µs [quartiles] (interval)" for n in names)]
    head += ["free / one vCPU"] if ratio else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in OPERATIONS:
        cells = []
        medians = {}
        for name in names:
            s = spread([m * 1e6 for m in find(cases, op, name).round_medians])
            medians[name] = s.median
            cells.append(f"{s.show('.1f')} ({s.interval('.1f')})")
        row = f"| {op} | " + " | ".join(cells)
        if ratio:
            row += f" | {medians[FREE] / medians[ONE]:.1f}x"
        lines.append(row + " |")
    intro = (
        "Per-round medians over the rounds: the median, its quartiles, and the 95% interval of "
        "the median. Every operation is one round trip (a store's through its pool), so what "
        "moves between the columns is the wait for the other vCPU, not the work."
    )
    sections = [("By placement", intro + "\n\n" + "\n".join(lines))]
    if ratio:
        at = {
            op: {n: statistics.median(find(cases, op, n).round_medians) * 1e6 for n in names}
            for op in OPERATIONS
        }
        select, repeat, batch = OPERATIONS[0], OPERATIONS[4], OPERATIONS[3]
        sections.append(
            (
                "Reading",
                f"A bare round trip (`SELECT 1`) takes {at[select][FREE]:.0f} µs as the kernel "
                f"places it and {at[select][ONE]:.0f} µs with both ends on one vCPU: "
                f"{at[select][FREE] - at[select][ONE]:.0f} µs of it is waking the other vCPU. "
                f"The store's first repeat lookup, one read through its pool, moves by "
                f"{at[repeat][FREE] - at[repeat][ONE]:.0f} µs between the same two placements. "
                f"A batch of 42 messages is {at[batch][FREE]:.1f} µs a message free and "
                f"{at[batch][ONE]:.1f} on one vCPU: one round trip spread over 42 messages, "
                "the rest the work of both ends, which one vCPU runs one after the other. "
                "So on this machine class a PostgreSQL figure counted in single round trips "
                "(a repeat lookup in a new process, a short recording) is mostly the host's "
                "wake-up latency, which the store can only pay less often, not make shorter.",
            )
        )
    if why_not:
        sections.append(("Not measured", f"Only the free placement ran: {why_not}."))
    return sections


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg", default=DEFAULT_PG, help="an admin DSN (databases are made on it)")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "round_trip.md"))
    ap.add_argument("--no-pg", action="store_true", help="do nothing (PostgreSQL only)")
    args = ap.parse_args()
    if args.no_pg:  # run_all.py --no-pg passes it on: this script has nothing else to run
        print("bench_round_trip.py measures PostgreSQL only: skipped", file=sys.stderr)
        return
    import psycopg

    why_not = can_pin(args.pg)
    names = [FREE] if why_not else list(PLACEMENTS)
    if why_not:
        print(f"placements other than free skipped: {why_not}", file=sys.stderr)
    with ExitStack() as stack:
        admin = stack.enter_context(psycopg.connect(args.pg, autocommit=True))
        cases: list[Case] = []
        for name in names:
            cases += placement_cases(args.pg, admin, name, args.calls, stack)
        run_interleaved(cases, args.rounds, progress=lambda m: print(m, file=sys.stderr))
    command = shlex.join(["python", "benchmarks/bench_round_trip.py", *sys.argv[1:]])
    write_report(
        args.out,
        "PostgreSQL round trips by where the client and the server run",
        command,
        report(cases, names, why_not),
        about=about(),
        intro="\n\n".join((__doc__ or "").split("\n\n")[1:3]),
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
