"""RecallStore against LangGraph's own stores and against the floor of the database itself.

Operations: claim + end of an action, the repeat lookup (a claim of an action already done),
recording messages in batches, put, get and search. Subjects: RecallStore on SQLite (both
durability settings) and PostgreSQL; LangGraph's SqliteStore and PostgresStore; and the floor,
a bare INSERT + COMMIT with the same engine and settings. Rounds are interleaved (see
``_harness``); results go to ``benchmarks/results/store.md``.

    python benchmarks/bench_store.py                # SQLite and PostgreSQL, 15 rounds
    python benchmarks/bench_store.py --no-pg --rounds 3

PostgreSQL: a throwaway database is created on the server named by ``--pg`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) and dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import sqlite3
import sys
import tempfile
import urllib.parse
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore, PutOp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (  # noqa: E402
    Case,
    find,
    machine,
    paired_ratio,
    run_interleaved,
    table,
    write_report,
)

from langgraph_recall.store import RecallStore  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", secrets.token_hex(32))

ITEMS = 1000  # items under the searched namespace
BATCH = 100  # messages per record() call
NS = ("bench", "items")
HERE = os.path.dirname(os.path.abspath(__file__))

# What each setting means, printed under the tables.
SETTINGS = {
    "WAL+NORMAL": "SQLite WAL, synchronous=NORMAL: a commit survives the process being killed; "
    "the last commits can be lost on power loss. RecallStore's default (durability='process').",
    "WAL+FULL": "SQLite WAL, synchronous=FULL: every commit is fsynced and survives power loss "
    "(RecallStore durability='power').",
    "PG sync commit": "PostgreSQL 127.0.0.1, synchronous_commit=on, fsync=on: every commit is "
    "flushed to the server's WAL before it returns.",
}


# --- subjects ------------------------------------------------------------------------------


def messages(start: int) -> list[BaseMessage]:
    """A batch of alternating human and AI messages with fresh ids."""
    out: list[BaseMessage] = []
    for j in range(BATCH):
        n = start * BATCH + j
        text = f"message {n}: please look at ticket {n % 97} and update the plan accordingly"
        out.append(HumanMessage(text, id=f"m{n}") if j % 2 else AIMessage(text, id=f"m{n}"))
    return out


def item(i: int) -> dict[str, Any]:
    kind = "even" if i % 2 == 0 else "odd"
    return {"text": f"note {i} about alpha and beta, tag{i}", "n": i, "kind": kind}


def fill(store: BaseStore) -> None:
    for start in range(0, ITEMS, 100):
        store.batch([PutOp(NS, f"k{i}", item(i)) for i in range(start, start + 100)])


def recall_cases(store: RecallStore, subject: str, setting: str, calls: int) -> list[Case]:
    fill(store)
    store.claim("bench", "done-1", tool="send_email", args={"to": "a@example.com"}, args_digest="d")
    store.end("done-1", 1, "done", result={"message_id": "abc"})

    def claim_end(i: int) -> None:
        c = store.claim(
            "bench",
            f"act-{i}",
            tool="send_email",
            args={"to": "a@example.com", "n": i},
            args_digest="d",
        )
        assert c.status == "claimed"
        store.end(c.action.action_id, 1, "done", result={"message_id": f"id-{i}"})

    def repeat(i: int) -> None:
        c = store.claim(
            "bench", "done-1", tool="send_email", args={"to": "a@example.com"}, args_digest="d"
        )
        assert c.status == "done"

    def record(i: int) -> None:
        assert store.record("bench", messages(i)) == BATCH

    return [
        Case("claim + end", subject, claim_end, calls=calls, setting=setting),
        Case("repeat lookup", subject, repeat, calls=calls * 5, setting=setting),
        Case(
            "record, per message",
            subject,
            record,
            calls=max(5, calls // 10),
            per=BATCH,
            setting=setting,
        ),
        Case(
            "put",
            subject,
            lambda i: store.put(("bench", "puts"), f"p{i}", item(i)),
            calls=calls,
            setting=setting,
        ),
        Case(
            "get",
            subject,
            lambda i: store.get(NS, f"k{i % ITEMS}"),
            calls=calls * 3,
            setting=setting,
        ),
        Case(
            "search filter, limit 10",
            subject,
            lambda i: store.search(NS, filter={"kind": "even", "n": {"$gte": i % 500}}, limit=10),
            calls=calls,
            setting=setting,
        ),
        Case(
            "search text query, limit 10 (all 1000 match)",
            subject,
            lambda i: store.search(NS, query=f"note {i % ITEMS} alpha", limit=10),
            calls=max(5, calls // 5),
            setting=setting,
        ),
        Case(
            "search text query, limit 10 (1 match)",
            subject,
            lambda i: store.search(NS, query=f"tag{i % ITEMS}", limit=10),
            calls=calls,
            setting=setting,
        ),
    ]


def stock_cases(store: BaseStore, subject: str, setting: str, calls: int) -> list[Case]:
    """LangGraph's own store doing the nearest equivalent of each operation."""
    fill(store)

    def intent_and_end(i: int) -> None:  # two writes, as an intent then a result would be
        store.put(("bench", "actions"), f"act-{i}", {"tool": "send_email", "args": {"n": i}})
        store.put(("bench", "actions"), f"act-{i}", {"tool": "send_email", "result": f"id-{i}"})

    def record(i: int) -> None:
        store.batch([PutOp(("bench", "turns"), str(m.id), m.model_dump()) for m in messages(i)])

    return [
        Case("claim + end", subject, intent_and_end, calls=calls, setting=setting + " (2 puts)"),
        Case(
            "repeat lookup",
            subject,
            lambda i: store.get(NS, "k1"),
            calls=calls * 5,
            setting=setting + " (a get)",
        ),
        Case(
            "record, per message",
            subject,
            record,
            calls=max(5, calls // 10),
            per=BATCH,
            setting=setting + " (batch of puts)",
        ),
        Case(
            "put",
            subject,
            lambda i: store.put(("bench", "puts"), f"p{i}", item(i)),
            calls=calls,
            setting=setting,
        ),
        Case(
            "get",
            subject,
            lambda i: store.get(NS, f"k{i % ITEMS}"),
            calls=calls * 3,
            setting=setting,
        ),
        Case(
            "search filter, limit 10",
            subject,
            lambda i: store.search(NS, filter={"kind": "even", "n": {"$gte": i % 500}}, limit=10),
            calls=calls,
            setting=setting,
        ),
    ]


def sqlite_floor(path: str, synchronous: str, subject: str, setting: str, calls: int) -> list[Case]:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    row = "x" * 100

    def commit(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor (v) VALUES (?)", (row,))
        conn.execute("COMMIT")

    def batch(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO floor (v) VALUES (?)", [(row,)] * BATCH)
        conn.execute("COMMIT")

    return [
        Case("INSERT + COMMIT", subject, commit, calls=calls * 2, setting=setting),
        Case(
            "record, per message",
            subject,
            batch,
            calls=max(5, calls // 10),
            per=BATCH,
            setting=setting + " (executemany)",
        ),
    ]


def pg_floor(dsn: str, subject: str, setting: str, calls: int, stack: ExitStack) -> list[Case]:
    import psycopg

    conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    conn.execute("CREATE TABLE IF NOT EXISTS floor (k BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
    row = "x" * 100

    def commit(i: int) -> None:
        conn.execute("INSERT INTO floor (v) VALUES (%s)", (row,))

    def batch(i: int) -> None:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany("INSERT INTO floor (v) VALUES (%s)", [(row,)] * BATCH)

    return [
        Case("INSERT + COMMIT", subject, commit, calls=calls * 2, setting=setting),
        Case(
            "record, per message",
            subject,
            batch,
            calls=max(5, calls // 10),
            per=BATCH,
            setting=setting + " (executemany)",
        ),
    ]


# --- setup ---------------------------------------------------------------------------------


@contextmanager
def pg_database(admin: str) -> Iterator[str]:
    import psycopg

    name = f"recall_bench_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(admin)
    try:
        yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_schema(dsn: str, schema: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{dsn}?options=" + urllib.parse.quote(f"-csearch_path={schema}")


def build(args: argparse.Namespace, tmp: str, stack: ExitStack) -> dict[str, list[Case]]:
    calls = args.calls
    groups: dict[str, list[Case]] = {}

    # SQLite, durability "process" (WAL + NORMAL): RecallStore, SqliteStore, the floor.
    from langgraph.store.sqlite import SqliteStore

    recall = stack.enter_context(RecallStore.open(os.path.join(tmp, "recall.db")))
    conn = sqlite3.connect(
        os.path.join(tmp, "stock.db"), isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    stock = SqliteStore(conn)
    stock.setup()
    groups["sqlite"] = [
        *recall_cases(recall, "RecallStore", "WAL+NORMAL", calls),
        *stock_cases(stock, "SqliteStore", "WAL+NORMAL", calls),
        *sqlite_floor(os.path.join(tmp, "floor.db"), "NORMAL", "floor", "WAL+NORMAL", calls),
    ]

    # SQLite, durability "power" (WAL + FULL): every commit fsynced. Writes only.
    power = stack.enter_context(RecallStore.open(os.path.join(tmp, "power.db"), durability="power"))
    slow = max(10, calls // 4)
    power_cases = [
        c
        for c in recall_cases(power, "RecallStore", "WAL+FULL", slow)
        if c.operation in ("claim + end", "record, per message", "put")
    ]
    groups["sqlite-power"] = [
        *power_cases,
        *sqlite_floor(os.path.join(tmp, "floor-full.db"), "FULL", "floor", "WAL+FULL", slow),
    ]

    if args.pg:
        from langgraph.store.postgres import PostgresStore

        dsn = stack.enter_context(pg_database(args.pg))
        recall_pg = stack.enter_context(RecallStore.open(with_schema(dsn, "recall")))
        stock_pg = stack.enter_context(PostgresStore.from_conn_string(with_schema(dsn, "stock")))
        stock_pg.setup()
        groups["postgres"] = [
            *recall_cases(recall_pg, "RecallStore", "PG sync commit", calls),
            *stock_cases(stock_pg, "PostgresStore", "PG sync commit", calls),
            *pg_floor(with_schema(dsn, "floor"), "floor", "PG sync commit", calls, stack),
        ]
        # Statistics as autovacuum would have gathered them on a live database; right after a
        # bulk load the planner has none and picks poor plans (e.g. for text search).
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("ANALYZE")
    return groups


# --- report --------------------------------------------------------------------------------

TARGETS = [
    ("claim + end on SQLite within 2x the floor of two commits", "claim + end", "sqlite"),
    ("the same, durability 'power'", "claim + end", "sqlite-power"),
    ("repeat lookup under 20 µs", "repeat lookup", "sqlite"),
    ("recording under 20 µs per message when batched", "record, per message", "sqlite"),
]


def targets(groups: dict[str, list[Case]]) -> str:
    """Each target as measured over all rounds, and in the quietest round (least loaded)."""
    lines = [
        "| target | measured, all rounds | quietest round | met |",
        "|---|---|---|---|",
    ]
    for label, operation, group in TARGETS:
        if group not in groups:
            continue
        case = find(groups[group], operation, "RecallStore")
        if operation == "claim + end":
            floor = find(groups[group], "INSERT + COMMIT", "floor")
            ratio = paired_ratio(case, floor, 2.0)
            # The quietest round is the one where the floor itself was fastest.
            quiet = floor.round_medians.index(min(floor.round_medians))
            best = case.round_medians[quiet] / (2 * floor.round_medians[quiet])
            met = "yes" if ratio <= 2 else ("in quiet rounds" if best <= 2 else "**no**")
            lines.append(
                f"| {label} | {ratio:.2f}x two commits ({case.median_us:.0f} µs) | "
                f"{best:.2f}x | {met} |"
            )
        else:
            best = min(case.round_medians) * 1e6
            met = "yes" if case.median_us <= 20 else ("in quiet rounds" if best <= 20 else "**no**")
            lines.append(f"| {label} | {case.median_us:.1f} µs | {best:.1f} µs | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=60, help="base calls per case per round")
    ap.add_argument(
        "--pg",
        default=os.environ.get("RECALL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--no-pg", dest="pg", action="store_const", const=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "store.md"))
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_store.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    before = machine()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        groups = build(args, tmp, stack)
        everything = [c for cases in groups.values() for c in cases]
        run_interleaved(everything, args.rounds, progress=lambda s: print(s, file=sys.stderr))
    pkgs = ["langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "psycopg"]
    sections = [("Targets (issue 2)", targets(groups))]
    titles = {
        "sqlite": "SQLite, durability 'process' (WAL + synchronous=NORMAL)",
        "sqlite-power": "SQLite, durability 'power' (WAL + synchronous=FULL)",
        "postgres": "PostgreSQL (local server)",
    }
    for name, cases in groups.items():
        floor = find(cases, "INSERT + COMMIT", "floor")
        order = sorted(cases, key=lambda c: (c.operation, c.subject))
        sections.append((titles[name], table(order, baseline=floor)))
    sections.append(("Settings", "\n".join(f"- **{k}**: {v}" for k, v in SETTINGS.items())))
    sections.append(
        (
            "How to read this",
            "Each figure is the median of every timed call over all rounds, in microseconds per "
            "operation (per message for recording); 'round medians' spans the quietest and the "
            "busiest round. `x baseline` is the median over rounds of this case divided by the "
            "floor (one INSERT + COMMIT on the same engine and settings) timed in the same round; "
            "claim + end is two transactions, so "
            "its own floor is 2x. LangGraph's stores have no claim: their 'claim + end' row is "
            "two puts (an intent and a result, without the atomic insert-if-absent), 'repeat "
            "lookup' is a get, and recording is a batch of puts of the messages' dicts. "
            "SqliteStore runs on a connection with the same WAL + NORMAL settings as RecallStore.",
        )
    )
    write_report(
        args.out,
        "RecallStore benchmarks",
        command,
        sections,
        about=f"{before} (at start); {machine(pkgs)} (at end)",
    )
    print(open(args.out).read())


if __name__ == "__main__":
    main()
