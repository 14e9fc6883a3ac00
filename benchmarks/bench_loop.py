"""The LangGraph tool loop, side by side: plain ToolNode, call4agents, langgraph-recall, the floor.

One process runs the same graph (a scripted model asking for ``--calls`` tool calls one after the
other, then answering; ``durability="sync"``) with these ways of running the tool:

- **plain**: LangGraph's ``ToolNode`` on the bare saver (``SqliteSaver`` / ``PostgresSaver``);
- **call4agents**: the same ``ToolNode`` and saver, the tool wrapped by call4agents 0.5.0's
  LangGraph adapter (``call4agents.adapters.langgraph.effect``), its ledger beside the saver;
- **langgraph-recall**: ``store.checkpointer()`` (the same saver class on the store's database,
  with lease, fencing and recording) and ``DurableToolNode`` with the tool classed ``external``
  (and, as a second subject, ``idempotent``);
- **dispatch alone**: ``ToolNode`` with DurableToolNode's dispatch (a lone call runs on the
  node's thread instead of a new thread pool; ``LoneCallInline``) on the bare saver, no records.
  DurableToolNode saves that dispatch cost against a stock ToolNode, so the results give the
  added cost both ways: against ToolNode as users have it (the issue's measure), and against
  this subject (what the durable records alone cost).

Each on SQLite (durability "process": WAL + synchronous=NORMAL, and "power": synchronous=FULL)
and on PostgreSQL (a throwaway database), with the floor measured in the same run: one
INSERT + COMMIT on the same engine and settings. Rounds are interleaved (``_harness``). The
added cost per durable tool call is (recall - plain) / calls, from the per-round medians.

    pip install call4agents==0.5.0            # benchmark-only dependency
    python benchmarks/bench_loop.py            # SQLite and PostgreSQL, 11 rounds
    python benchmarks/bench_loop.py --no-pg --rounds 3
    python benchmarks/bench_loop.py --profile    # where the added time goes (counts, timings)
    python benchmarks/bench_loop.py --focus --rounds 101 --per-round 3   # the targets alone

A target is met when the whole 95% interval of the median (``_harness.spread``) is under it.

PostgreSQL: a throwaway database is created on the server named by ``--pg`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, or ``$RECALL_BENCH_PG``) and dropped.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from typing_extensions import TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (  # noqa: E402
    Case,
    Spread,
    find,
    machine,
    run_interleaved,
    spread,
    verdict,
    write_report,
)

from langgraph_recall import DurableToolNode, RecallStore  # noqa: E402
from langgraph_recall.testing import ScriptedChatModel, call, reply  # noqa: E402
from langgraph_recall.tools._node import LoneCallInline  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", secrets.token_hex(32))

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PG = os.environ.get("RECALL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
LOOP = "tool loop"
FLOOR = "INSERT + COMMIT"

# Durability of each group's figures, printed with the results.
SETTINGS = {
    "sqlite": "SQLite WAL, synchronous=NORMAL: every commit survives the process being killed; "
    'the last commits can be lost on power loss. RecallStore\'s default, `durability="process"`. '
    "The bare SqliteSaver gets the same PRAGMA.",
    "sqlite-power": "SQLite WAL, synchronous=FULL: every commit is fsynced and survives power "
    'loss. `RecallStore.open(path, durability="power")`; the bare SqliteSaver gets the same PRAGMA.',
    "postgres": "PostgreSQL on 127.0.0.1 with the server's settings (synchronous_commit=on, "
    "fsync=on): every commit is flushed to the server's WAL before it returns. RecallStore's "
    "default on PostgreSQL.",
    "postgres-process": "PostgreSQL on 127.0.0.1, synchronous_commit=off on every connection "
    "of the group (the bare saver, call4agents' ledger, the floor, and langgraph-recall's "
    '`durability="process"`): a commit returns once the server has it in memory, so it '
    "survives any client process being killed; the server's last ~0.6 s of commits can be "
    "lost if the server itself crashes.",
}
C4A_NOTE = (
    "call4agents' SQLite ledger always runs synchronous=FULL (it has no setting), so in the "
    "'process' group the `call4agents (NORMAL)` subject patches that PRAGMA to NORMAL for a "
    "like-for-like figure; its ledger is a separate file beside the saver's, as its adapter "
    "works. On PostgreSQL its ledger is a schema of the same throwaway database."
)
TITLES = {
    "sqlite": "SQLite, durability 'process' (WAL + synchronous=NORMAL)",
    "sqlite-power": "SQLite, durability 'power' (WAL + synchronous=FULL)",
    "postgres": "PostgreSQL (local server, loopback)",
    "postgres-process": "PostgreSQL, durability 'process' (synchronous_commit=off)",
}
# Issue 7: the added cost per durable tool call must stay under these (milliseconds).
TARGET_MS = {"sqlite": 0.25, "sqlite-power": None, "postgres": 0.6, "postgres-process": 0.6}

PLAIN = "ToolNode + bare saver"
# The same loop timed as a second subject: what "added" reads when nothing is added.
PLAIN_AGAIN = "ToolNode + bare saver, again (A/A: the noise floor)"
INLINE = "ToolNode, lone call inline + bare saver"
C4A = "call4agents adapter + bare saver"
C4A_NORMAL = "call4agents (NORMAL) + bare saver"
RECALL = "langgraph-recall (external)"
RECALL_IDEM = "langgraph-recall (idempotent)"
# ``--focus``: the subjects the targets are judged on.
FOCUS = (PLAIN, PLAIN_AGAIN, RECALL)


# --- the graph ---------------------------------------------------------------------------------


class LoopState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def add_numbers(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(calls: int) -> list[dict[str, Any]]:
    """``calls`` replies each asking for one tool call (distinct arguments), then an answer."""
    return [reply(f"step {i}", call("add", a=i, b=1)) for i in range(calls)] + [
        reply("final answer")
    ]


def loop_graph(
    tool_node: Any,
    checkpointer: BaseCheckpointSaver,
    *,
    calls: int,
    store: Any = None,
    agent: Callable[..., Any] | None = None,
) -> Any:
    """agent -> tools -> agent ... until the scripted model stops asking: 2 supersteps a call."""
    model = ScriptedChatModel(script(calls))

    def call_model(state: LoopState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(LoopState)
    builder.add_node("agent", agent(model) if agent is not None else call_model)
    builder.add_node("tools", tool_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, store=store)


def add_tool() -> BaseTool:
    return tool("add")(add_numbers)


def run_once(graph: Any, durability: str = "sync", prefix: str = "t") -> str:
    """One full loop on a fresh thread; returns the thread id."""
    thread = f"{prefix}-{uuid.uuid4().hex[:12]}"
    out = graph.invoke(
        {"messages": [HumanMessage("add the numbers")]},
        {"configurable": {"thread_id": thread}},
        durability=durability,
    )
    if out["messages"][-1].content != "final answer":
        raise RuntimeError(f"the loop did not finish: {out['messages'][-1]!r}")
    return thread


# --- databases ---------------------------------------------------------------------------------


def sqlite_saver(path: str, synchronous: str) -> BaseCheckpointSaver:
    """LangGraph's SqliteSaver on its own file, WAL, with the given synchronous setting (as
    ``store.checkpointer()`` builds its inner saver, minus the fencing trigger)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return saver


def postgres_saver(dsn: str, stack: ExitStack) -> BaseCheckpointSaver:
    """LangGraph's PostgresSaver on a small pool, as ``store.checkpointer()`` builds it."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool: Any = ConnectionPool(
        dsn,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=True,
    )
    stack.callback(pool.close)
    saver = PostgresSaver(pool)
    saver.setup()
    return saver


@contextmanager
def pg_database(admin: str, tag: str) -> Iterator[str]:
    """A throwaway PostgreSQL database (dropped on the way out, even after an error)."""
    import psycopg

    name = f"recall_{tag}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urllib.parse.urlunsplit(urllib.parse.urlsplit(admin)._replace(path="/" + name))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_schema(dsn: str, schema: str, synchronous_commit: str | None = None) -> str:
    """Create ``schema`` and return the DSN whose ``search_path`` is it (and whose sessions
    use ``synchronous_commit``, if given)."""
    import psycopg

    schema = schema.lower()  # search_path folds case; the quoted CREATE would not
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    sep = "&" if "?" in dsn else "?"
    options = f"-csearch_path={schema}"
    if synchronous_commit is not None:
        options += f" -csynchronous_commit={synchronous_commit}"
    return f"{dsn}{sep}options=" + urllib.parse.quote(options)


def sqlite_floor(path: str, synchronous: str, setting: str, calls: int) -> Case:
    """One INSERT + COMMIT on its own WAL file: the least a durable write can cost here."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    row = "x" * 100

    def commit(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor (v) VALUES (?)", (row,))
        conn.execute("COMMIT")

    return Case(FLOOR, "floor", commit, calls=calls, setting=setting)


def pg_floor(dsn: str, setting: str, calls: int, stack: ExitStack) -> Case:
    """One autocommit INSERT on a loopback connection (the server's own commit settings)."""
    import psycopg

    conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    conn.execute("CREATE TABLE IF NOT EXISTS floor (k BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
    row = "x" * 100
    return Case(
        FLOOR,
        "floor",
        lambda i: conn.execute("INSERT INTO floor (v) VALUES (%s)", (row,)),
        calls=calls,
        setting=setting,
    )


# --- call4agents -------------------------------------------------------------------------------


def c4a_ledger(target: str, *, normal: bool = False) -> Any:
    """A call4agents ledger (SQLite file or PostgreSQL DSN); ``normal`` patches its SQLite
    ``synchronous=FULL`` to NORMAL for a like-for-like comparison with durability 'process'."""
    from call4agents.ledger import Ledger

    if target.startswith("postgresql://"):
        from call4agents.stores.postgres import PostgresLedger

        return PostgresLedger(target, secrets.token_bytes(32))
    if not normal:
        return Ledger(target, secrets.token_bytes(32))

    class NormalLedger(Ledger):
        def _conn(self) -> sqlite3.Connection:
            conn = super()._conn()
            if not getattr(self._local, "normal", False):
                conn.execute("PRAGMA synchronous=NORMAL")
                self._local.normal = True
            return conn

    return NormalLedger(target, secrets.token_bytes(32))


def c4a_tool() -> BaseTool:
    from call4agents.adapters import langgraph as c4a_lg

    return tool("add")(c4a_lg.effect(add_numbers))


def with_ledger(ledger: Any, fn: Callable[[], str]) -> str:
    # call4agents keeps one process-wide ledger (what c4a.init() sets); each group has its own.
    import call4agents

    call4agents._LEDGER = ledger
    return fn()


# --- the subjects ------------------------------------------------------------------------------


@dataclass
class Group:
    """One database and durability setting: its cases and what checks them afterwards."""

    name: str
    setting: str
    cases: list[Case]
    checks: list[Callable[[], None]]


@dataclass
class LoopCase(Case):
    """A ``Case`` that also keeps each round's median CPU time (all threads of the process).

    Wall time is what a user waits; on this shared 2-core machine it also carries other
    people's load, which CPU time mostly leaves out, so the figures give both.
    """

    cpu_round_medians: list[float] = field(default_factory=list)

    def run_round(self) -> None:
        cpu: list[float] = []
        timed = self.fn

        def fn(i: int) -> object:
            start = time.process_time()
            try:
                return timed(i)
            finally:
                cpu.append(time.process_time() - start)

        self.fn = fn
        try:
            super().run_round()
        finally:
            self.fn = timed
        self.cpu_round_medians.append(statistics.median(cpu[-self.calls :]))


def loop_case(subject: str, setting: str, fn: Callable[[], str], per_round: int) -> LoopCase:
    """A case timing ``per_round`` whole loops a round (one warm-up loop first)."""
    return LoopCase(LOOP, subject, lambda i: fn(), calls=per_round, setting=setting, warmup=1)


def build_group(
    name: str,
    setting: str,
    *,
    bare: BaseCheckpointSaver,
    store: RecallStore,
    ledger: Any,
    ledger_normal: Any | None,
    floor: Case,
    calls: int,
    per_round: int,
    focus: bool = False,
) -> Group:
    plain = loop_graph(ToolNode([add_tool()]), bare, calls=calls)
    # DurableToolNode's dispatch alone (a lone call on the node's thread, no records): tells
    # how much of recall's figure is dispatch and how much the durable records.
    inline = loop_graph(LoneCallInline([add_tool()]), bare, calls=calls)
    c4a = loop_graph(ToolNode([c4a_tool()]), bare, calls=calls)
    checkpointer = store.checkpointer()
    recall = loop_graph(
        DurableToolNode([add_tool()], classes={"add": "external"}),
        checkpointer,
        calls=calls,
        store=store,
    )
    idem = loop_graph(
        DurableToolNode([add_tool()], classes={"add": "idempotent"}),
        checkpointer,
        calls=calls,
        store=store,
    )
    last: dict[str, str] = {}

    def remember(subject: str, fn: Callable[[], str]) -> Callable[[], str]:
        def run() -> str:
            last[subject] = fn()
            return last[subject]

        return run

    cases = [
        loop_case(PLAIN, setting, remember(PLAIN, lambda: run_once(plain)), per_round),
        loop_case(PLAIN_AGAIN, setting, lambda: run_once(plain), per_round),
        loop_case(INLINE, setting, remember(INLINE, lambda: run_once(inline)), per_round),
        loop_case(
            C4A,
            setting + " (ledger FULL)" if name == "sqlite" else setting,
            remember(C4A, lambda: with_ledger(ledger, lambda: run_once(c4a))),
            per_round,
        ),
        loop_case(RECALL, setting, remember(RECALL, lambda: run_once(recall)), per_round),
        loop_case(RECALL_IDEM, setting, remember(RECALL_IDEM, lambda: run_once(idem)), per_round),
        floor,
    ]
    if focus:
        # Only what decides the targets: the two runs of the plain loop and recall. The rounds
        # then take a third of the time, so three times as many fit in a run.
        cases = [c for c in cases if c.subject in FOCUS or c is floor]
    elif ledger_normal is not None:
        cases.insert(
            2,
            loop_case(
                C4A_NORMAL,
                setting,
                remember(C4A_NORMAL, lambda: with_ledger(ledger_normal, lambda: run_once(c4a))),
                per_round,
            ),
        )

    def check() -> None:
        # Each subject really did its durable work: recall recorded every call done, every
        # message as a turn; call4agents has an intent and a result per call.
        for subject in (RECALL, RECALL_IDEM):
            if subject not in last:
                continue  # not a subject of this run (--focus)
            thread = last[subject]
            done = [a for a in store.actions(thread) if a.status == "done"]
            assert len(done) == calls, f"{name}/{subject}: {len(done)} actions done, not {calls}"
            assert len(store.turns(thread)) == 2 * calls + 2, f"{name}/{subject}: turns missing"
        for subject, lg in ((C4A, ledger), (C4A_NORMAL, ledger_normal)):
            if lg is None or subject not in last:
                continue
            kinds = [e["kind"] for e in lg.entries(last[subject])]
            assert kinds.count("tool_done") == calls, (
                f"{name}/{subject}: {kinds.count('tool_done')}"
            )

    return Group(name, setting, cases, [check])


def build(args: argparse.Namespace, tmp: str, stack: ExitStack) -> list[Group]:
    groups = []
    floor_calls = 200
    durability: str | None
    for name, sync, durability in (
        ("sqlite", "NORMAL", "process"),
        ("sqlite-power", "FULL", "power"),
    ):
        if name not in args.groups:
            continue
        setting = "WAL+" + sync
        store = stack.enter_context(
            RecallStore.open(os.path.join(tmp, f"recall-{name}.db"), durability=durability)
        )
        bare = sqlite_saver(os.path.join(tmp, f"bare-{name}.db"), sync)
        stack.callback(bare.conn.close)  # type: ignore[attr-defined]
        groups.append(
            build_group(
                name,
                setting,
                bare=bare,
                store=store,
                ledger=c4a_ledger(os.path.join(tmp, f"c4a-{name}", "ledger.sqlite")),
                ledger_normal=(
                    c4a_ledger(
                        os.path.join(tmp, f"c4a-{name}-normal", "ledger.sqlite"), normal=True
                    )
                    if name == "sqlite"
                    else None
                ),
                floor=sqlite_floor(
                    os.path.join(tmp, f"floor-{name}.db"),
                    sync,
                    setting,
                    floor_calls if sync == "NORMAL" else floor_calls // 4,
                ),
                calls=args.calls,
                per_round=args.per_round,
                focus=args.focus,
            )
        )
    if args.pg and {"postgres", "postgres-process"} & set(args.groups):
        dsn = stack.enter_context(pg_database(args.pg, "loop"))
        pg_groups: tuple[tuple[str, str, str | None, str | None, str], ...] = (
            ("postgres", "PG sync commit", None, None, ""),
            ("postgres-process", "PG synchronous_commit=off", "process", "off", "_process"),
        )
        for name, setting, durability, commit, suffix in pg_groups:
            if name not in args.groups:
                continue
            store = stack.enter_context(
                RecallStore.open(pg_schema(dsn, "recall" + suffix), durability=durability)
            )
            groups.append(
                build_group(
                    name,
                    setting,
                    bare=postgres_saver(pg_schema(dsn, "bare" + suffix, commit), stack),
                    store=store,
                    ledger=c4a_ledger(pg_schema(dsn, "c4a" + suffix, commit)),
                    ledger_normal=None,
                    floor=pg_floor(
                        pg_schema(dsn, "floor" + suffix, commit), setting, floor_calls // 2, stack
                    ),
                    calls=args.calls,
                    per_round=args.per_round,
                    focus=args.focus,
                )
            )
    return groups


# --- figures -----------------------------------------------------------------------------------


@dataclass
class Added:
    """Added ms per tool call over the rounds, wall and CPU (median, quartiles, interval)."""

    wall: Spread
    cpu: Spread


def added(subject: Case, plain: Case, calls: int) -> Added:
    """(subject - plain) / calls in ms, paired round by round (both ran in the same round)."""
    wall = [
        (s - p) / calls * 1e3
        for s, p in zip(subject.round_medians, plain.round_medians, strict=True)
    ]
    cpu = [
        (s - p) / calls * 1e3
        for s, p in zip(
            getattr(subject, "cpu_round_medians", []),
            getattr(plain, "cpu_round_medians", []),
            strict=True,
        )
    ]
    return Added(spread(wall), spread(cpu or [0.0]))


def ms(c: Case) -> str:
    lo, hi = min(c.round_medians) * 1e3, max(c.round_medians) * 1e3
    return f"**{c.median_us / 1e3:.1f}** ({lo:.1f}-{hi:.1f})"


def _added_to(group: Group, subject: str, base: str, calls: int) -> Added | None:
    """``added`` of ``subject`` over ``base`` in ``group``; None when either was not run."""
    try:
        return added(find(group.cases, LOOP, subject), find(group.cases, LOOP, base), calls)
    except KeyError:
        return None


def _x_c4a(a: Added, c4a: Added | None) -> str:
    if c4a is None:
        return "- (not run)"
    return f"{a.wall.median / c4a.wall.median:.2f}, {a.cpu.median / c4a.cpu.median:.2f}"


def group_table(group: Group, calls: int) -> str:
    plain = find(group.cases, LOOP, PLAIN)
    floor = find(group.cases, FLOOR, "floor")
    c4a = _added_to(group, C4A, PLAIN, calls)
    lines = [
        "| subject | setting | ms per loop (round medians) | added ms per tool call, wall "
        "[quartiles] | added ms per tool call, CPU [quartiles] | x call4agents' added (wall, "
        "CPU) | floor commits' worth |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in group.cases:
        if case.operation != LOOP:
            continue
        if case is plain:
            lines.append(f"| {case.subject} | {case.setting} | {ms(case)} | - | - | - | - |")
            continue
        a = added(case, plain, calls)
        lines.append(
            f"| {case.subject} | {case.setting} | {ms(case)} | {a.wall.show()} | {a.cpu.show()} | "
            f"{_x_c4a(a, c4a)} | {a.wall.median * 1e3 / floor.median_us:.1f} |"
        )
    lines.append(
        f"| floor: one INSERT + COMMIT | {floor.setting} | {floor.median_us:.1f} µs "
        f"(p10-p90 {floor.percentile_us(0.1):.1f}-{floor.percentile_us(0.9):.1f}) | - | - | - "
        "| 1 |"
    )
    return "\n".join(lines)


def targets(groups: Sequence[Group], calls: int) -> str:
    lines = [
        "| database | added per durable tool call, wall [quartiles] | 95% interval of that "
        "median | CPU [quartiles] | target | x call4agents' added (wall, CPU) | met (wall) | the "
        "records alone: recall vs ToolNode with a lone call inline, wall [quartiles] | noise "
        "floor: ToolNode against itself, wall [quartiles]; 95% interval of its median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group in groups:
        a = _added_to(group, RECALL, PLAIN, calls)
        noise = _added_to(group, PLAIN_AGAIN, PLAIN, calls)
        assert a is not None and noise is not None
        records = _added_to(group, RECALL, INLINE, calls)
        limit = TARGET_MS.get(group.name)
        lines.append(
            f"| {TITLES[group.name]} | {a.wall.show()} ms | {a.wall.interval()} ms | "
            f"{a.cpu.show()} ms | {'-' if limit is None else f'< {limit} ms'} | "
            f"{_x_c4a(a, _added_to(group, C4A, PLAIN, calls))} (target: <= 0.17 on SQLite) | "
            f"{verdict(a.wall, limit)} | "
            f"{'- (not run)' if records is None else records.wall.show() + ' ms'} | "
            f"{noise.wall.show()} ms; {noise.wall.interval()} ms |"
        )
    return "\n".join(lines)


def versions() -> str:
    """SQLite and PostgreSQL versions, and the PostgreSQL settings that decide commit cost."""
    out = [f"SQLite {sqlite3.sqlite_version}"]
    try:
        import psycopg

        with psycopg.connect(DEFAULT_PG, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
                "current_setting('fsync'), current_setting('wal_sync_method')"
            ).fetchone()
        assert row is not None
        out.append(
            f"PostgreSQL {row[0]} (synchronous_commit={row[1]}, fsync={row[2]}, "
            f"wal_sync_method={row[3]})"
        )
    except Exception as exc:  # no server: the SQLite figures stand alone
        out.append(f"PostgreSQL unavailable ({type(exc).__name__})")
    return "; ".join(out)


def about() -> str:
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return (
        machine(
            [
                "langgraph",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
                "call4agents",
                "psycopg",
            ]
        )
        + f"; nproc {nproc}; {versions()}"
    )


# --- --profile: where the added time goes --------------------------------------------------------

# (module, attribute path, label): timed inclusive wherever they run. Missing ones are skipped,
# so the profile keeps working while the package's internals move.
PROFILED = [
    ("langgraph_recall.tools._durable", "DurableTools.wrap_tool_call", "durable call (with tool)"),
    ("langgraph.prebuilt.tool_node", "ToolNode._execute_tool_sync", "  the tool itself"),
    ("langgraph_recall.tools._steps", "begin", "  claim transaction (begin)"),
    ("langgraph_recall.tools._steps", "finish", "  end transaction (finish)"),
    ("langgraph_recall.tools._barrier", "wait_sync", "  barrier wait (AI message saved)"),
    ("langgraph_recall.checkpoint._saver", "RecallCheckpointer.get_tuple", "run start (lease)"),
    ("langgraph_recall.checkpoint._runs", "RunLifecycle.end", "run end (flush, release)"),
    ("langgraph_recall.checkpoint._put_steps", "PutSteps._before_put", "put: epoch stamp"),
    ("langgraph_recall.checkpoint._put_steps", "PutSteps._after_put", "put: queue turns"),
    ("langgraph_recall.checkpoint._put_steps", "PutSteps._before_writes", "put_writes: check"),
    ("langgraph_recall.checkpoint._recording", "Recorder._write", "recorder write (background)"),
]
SAVER_METHODS = ("put", "put_writes", "get_tuple")
# RecallStore's methods, passed over to find who opened a transaction.
_FACADE_FILES = ("_store.py", "_records_api.py", "_actions_api.py", "contextlib.py")


def _role(name: str) -> str:
    if name == "MainThread":
        return "main"
    if name.startswith("ThreadPoolExecutor"):
        return "graph worker"
    if name.startswith("recall-recorder"):
        return "recorder"
    if name.startswith("recall-lease"):
        return "lease renewer"
    return name.split("-")[0]


class _Tally:
    """Counts and seconds per key, from any thread."""

    def __init__(self) -> None:
        self.n: dict[Any, int] = {}
        self.t: dict[Any, float] = {}
        self.lock = threading.Lock()

    def add(self, key: Any, seconds: float = 0.0) -> None:
        with self.lock:
            self.n[key] = self.n.get(key, 0) + 1
            self.t[key] = self.t.get(key, 0.0) + seconds

    def clear(self) -> None:
        with self.lock:
            self.n.clear()
            self.t.clear()


def _patch(
    owner: Any, name: str, make: Callable[[Any], Any], undo: list[Callable[[], None]]
) -> None:
    original = owner.__dict__[name]
    setattr(owner, name, make(original))
    undo.append(lambda: setattr(owner, name, original))


def _timed(tally: _Tally, label: str) -> Callable[[Any], Any]:
    def make(fn: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                tally.add(label, time.perf_counter() - start)

        return timed

    return make


def instrument(saver_types: Sequence[type]) -> tuple[dict[str, _Tally], Callable[[], None]]:
    """Count statements and transactions, time transactions, saver calls and the PROFILED
    functions. Returns the tallies and a function that undoes every patch."""
    import importlib

    from langgraph_recall.store import _db

    stmts, txs, waits, calls, saver = _Tally(), _Tally(), _Tally(), _Tally(), _Tally()
    undo: list[Callable[[], None]] = []

    def counting(fn: Any) -> Any:
        def run(self: Any, sql: str, *a: Any, **k: Any) -> Any:
            caller = sys._getframe(1).f_code.co_name
            stmts.add((_role(threading.current_thread().name), caller, " ".join(sql.split()[:3])))
            return fn(self, sql, *a, **k)

        return run

    for name in ("run", "one", "all", "many"):
        _patch(_db.Tx, name, counting, undo)

    class TimedTx:
        def __init__(self, inner: Any, key: tuple[str, str, bool]) -> None:
            self.inner, self.key = inner, key

        def __enter__(self) -> Any:
            start = time.perf_counter()
            tx = self.inner.__enter__()
            waits.add(self.key + ("begin",), time.perf_counter() - start)
            self.started = time.perf_counter()
            return tx

        def __exit__(self, *exc: Any) -> Any:
            start = time.perf_counter()
            try:
                return self.inner.__exit__(*exc)
            finally:
                done = time.perf_counter()
                waits.add(self.key + ("commit",), done - start)
                txs.add(self.key, done - self.started)

    def tx_make(fn: Any) -> Any:
        def tx(self: Any, write: bool = False, **options: Any) -> Any:
            cm = fn(self, write, **options)
            if getattr(self._local, "tx", None) is not None:
                return cm  # joins the thread's open transaction
            frame = sys._getframe(1)
            while frame.f_code.co_filename.endswith(_FACADE_FILES):
                frame = frame.f_back  # type: ignore[assignment]
            who = frame.f_code.co_name
            if who in ("<lambda>", "run"):
                who = sys._getframe(1).f_code.co_name
            return TimedTx(cm, (_role(threading.current_thread().name), who, write))

        return tx

    _patch(_db.Database, "tx", tx_make, undo)
    for module, path, label in PROFILED:
        try:
            owner: Any = importlib.import_module(module)
            *parents, name = path.split(".")
            for part in parents:
                owner = getattr(owner, part)
            if name in vars(owner):
                _patch(owner, name, _timed(calls, label), undo)
        except (ImportError, AttributeError):
            continue
    for cls in saver_types:
        for name in SAVER_METHODS:
            if name in vars(cls):
                _patch(cls, name, _timed(saver, f"{cls.__name__}.{name}"), undo)

    def restore() -> None:
        for fn in reversed(undo):
            fn()

    return {
        "statements": stmts,
        "transactions": txs,
        "waits": waits,
        "calls": calls,
        "saver": saver,
    }, restore


def profile_backend(
    label: str,
    plain: Any,
    recall: Any,
    saver_types: Sequence[type],
    *,
    calls: int,
    loops: int,
    durability: str = "sync",
) -> str:
    """Markdown: per durable tool call, what langgraph-recall's loop does and spends."""
    for graph in (plain, recall, plain, recall):
        run_once(graph, durability)
    tallies, restore = instrument(saver_types)
    per: dict[str, dict[str, tuple[dict[Any, int], dict[Any, float]]]] = {}
    wall: dict[str, list[float]] = {"plain": [], "recall": []}
    cpu: dict[str, list[float]] = {"plain": [], "recall": []}
    try:
        for which, graph in (("plain", plain), ("recall", recall)):
            for t in tallies.values():
                t.clear()
            for _ in range(loops):
                start, cpu0 = time.perf_counter(), time.process_time()
                run_once(graph, durability)
                wall[which].append(time.perf_counter() - start)
                cpu[which].append(time.process_time() - cpu0)
            per[which] = {k: (dict(t.n), dict(t.t)) for k, t in tallies.items()}
    finally:
        restore()
    n = loops * calls

    def us(seconds: float) -> str:
        return f"{seconds / n * 1e6:.1f}"

    out = [f"### {label}", ""]
    med = statistics.median
    out.append(
        f'`durability="{durability}"`, {loops} loops each, instrumented (timers add a little). Wall ms per loop: plain '
        f"{med(wall['plain']) * 1e3:.1f}, recall {med(wall['recall']) * 1e3:.1f}; CPU ms per "
        f"loop (all threads): plain {med(cpu['plain']) * 1e3:.1f}, recall "
        f"{med(cpu['recall']) * 1e3:.1f}. Figures below are per durable tool call "
        f"({calls} a loop)."
    )
    out += [
        "",
        "| step | calls per tool call | µs per tool call (wall, inclusive) |",
        "|---|---|---|",
    ]
    n_, t_ = per["recall"]["calls"]
    for _, _, lab in PROFILED:
        if lab in n_:
            out.append(f"| {lab} | {n_[lab] / n:.2f} | {us(t_[lab])} |")
    out += [
        "",
        "| saver call | plain: calls, µs per tool call | recall: calls, µs per tool call |",
        "|---|---|---|",
    ]
    pn, pt = per["plain"]["saver"]
    rn, rt = per["recall"]["saver"]
    for key in sorted(set(pn) | set(rn)):
        out.append(
            f"| {key} | {pn.get(key, 0) / n:.2f}, {us(pt.get(key, 0.0))} | "
            f"{rn.get(key, 0) / n:.2f}, {us(rt.get(key, 0.0))} |"
        )
    out += [
        "",
        "| store transaction (thread, opened by, write) | per tool call | µs each: waiting "
        "to begin | µs each: commit | µs each: whole |",
        "|---|---|---|---|---|",
    ]
    tn, tt = per["recall"]["transactions"]
    wn, wt = per["recall"]["waits"]
    for key in sorted(tn, key=lambda k: -tn[k]):
        b, c = key + ("begin",), key + ("commit",)
        out.append(
            f"| {key[0]}, {key[1]}, {'write' if key[2] else 'read'} | {tn[key] / n:.2f} | "
            f"{wt.get(b, 0.0) / max(1, wn.get(b, 1)) * 1e6:.1f} | "
            f"{wt.get(c, 0.0) / max(1, wn.get(c, 1)) * 1e6:.1f} | {tt[key] / tn[key] * 1e6:.1f} |"
        )
    out += ["", "| store statements (thread, function, SQL) | per tool call |", "|---|---|"]
    sn, _ = per["recall"]["statements"]
    for key in sorted(sn, key=lambda k: -sn[k]):
        out.append(f"| {key[0]}, {key[1]}, `{key[2]}` | {sn[key] / n:.2f} |")
    out.append(
        f"| **all statements** | **{sum(sn.values()) / n:.2f}** (transactions: "
        f"{sum(tn.values()) / n:.2f}) |"
    )
    return "\n".join(out)


def profile(args: argparse.Namespace) -> None:
    """Print the --profile tables (markdown) for SQLite and, unless --no-pg, PostgreSQL."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    parts = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        store = stack.enter_context(RecallStore.open(os.path.join(tmp, "recall.db")))
        bare = sqlite_saver(os.path.join(tmp, "bare.db"), "NORMAL")
        stack.callback(bare.conn.close)  # type: ignore[attr-defined]
        plain = loop_graph(ToolNode([add_tool()]), bare, calls=args.calls)
        recall = loop_graph(
            DurableToolNode([add_tool()], classes={"add": "external"}),
            store.checkpointer(),
            calls=args.calls,
            store=store,
        )
        parts.append(
            profile_backend(
                "SQLite, WAL + synchronous=NORMAL",
                plain,
                recall,
                [SqliteSaver],
                calls=args.calls,
                loops=args.loops,
                durability=args.durability,
            )
        )
        if args.pg:
            from langgraph.checkpoint.postgres import PostgresSaver

            dsn = stack.enter_context(pg_database(args.pg, "profile"))
            pg_store = stack.enter_context(RecallStore.open(pg_schema(dsn, "recall")))
            plain = loop_graph(
                ToolNode([add_tool()]),
                postgres_saver(pg_schema(dsn, "bare"), stack),
                calls=args.calls,
            )
            recall = loop_graph(
                DurableToolNode([add_tool()], classes={"add": "external"}),
                pg_store.checkpointer(),
                calls=args.calls,
                store=pg_store,
            )
            parts.append(
                profile_backend(
                    "PostgreSQL, loopback",
                    plain,
                    recall,
                    [PostgresSaver],
                    calls=args.calls,
                    loops=args.loops,
                    durability=args.durability,
                )
            )
    print("\n\n".join(parts))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--calls", type=int, default=20, help="tool calls per loop")
    ap.add_argument("--per-round", type=int, default=1, help="loops per subject per round")
    ap.add_argument("--pg", default=DEFAULT_PG)
    ap.add_argument("--no-pg", dest="pg", action="store_const", const=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "loop.md"))
    ap.add_argument(
        "--groups",
        type=lambda v: [g for g in v.split(",") if g],
        default=list(TITLES),
        help=f"comma-separated groups to run (default: all of {','.join(TITLES)})",
    )
    ap.add_argument(
        "--focus",
        action="store_true",
        help="time only the plain loop, its A/A twin and langgraph-recall (external): what "
        "decides the targets, in a third of the time per round, so more rounds fit",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="instead of the benchmark, print where langgraph-recall's added time goes",
    )
    ap.add_argument("--loops", type=int, default=20, help="loops per subject with --profile")
    ap.add_argument("--durability", default="sync", help="LangGraph durability with --profile")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.groups) - set(TITLES))
    if unknown:
        ap.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(TITLES)}")
    if args.profile:
        profile(args)
        return
    command = "python benchmarks/bench_loop.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    before = about()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        groups = build(args, tmp, stack)
        cases = [c for g in groups for c in g.cases]
        run_interleaved(cases, args.rounds, progress=lambda s: print(s, file=sys.stderr))
        for group in groups:
            for check in group.checks:
                check()
    after = machine()
    sections = [("Added cost per durable tool call (issue 7 targets)", targets(groups, args.calls))]
    for group in groups:
        sections.append((TITLES[group.name], group_table(group, args.calls)))
    settings = [f"- **{TITLES[k]}**: {v}" for k, v in SETTINGS.items()] + [f"- {C4A_NOTE}"]
    sections.append(("Settings", "\n".join(settings)))
    sections.append(
        (
            "How to read this",
            f"Each loop is one `graph.invoke` on a fresh thread: {args.calls} tool calls, "
            f'{2 * args.calls + 1} supersteps, `durability="sync"`, a scripted model (no '
            f"network). `ms per loop` is the median of all timed loops ({args.per_round} per "
            "subject per round), with the range of the per-round medians. `added ms per tool "
            "call` is (subject - plain ToolNode) / calls, computed per round from the round "
            "medians (the two ran in the same round), then the median and quartiles over the "
            "rounds: everything the subject adds to the loop, including the per-run lease and "
            "recording, spread over its tool calls. DurableToolNode runs a lone call on the node's "
            "thread, where ToolNode starts and joins a thread pool for it; that saving is in the "
            "headline figure (it is what a user switching sees), and the last column of the first "
            "table leaves it out: recall against `ToolNode, lone call inline` on the bare saver, "
            "the cost of the durable records alone. `ToolNode + bare saver, again` is the same "
            "graph timed as a second subject: its added cost is zero in truth, so its quartiles "
            "(the first table's last column) are what this machine's noise alone makes of one "
            "round's difference, and the interval of its median should hold zero. Wall time is "
            "what a user waits; CPU time (all threads of the process) leaves out most of the "
            "other jobs on this shared machine. A target counts as met only when the whole 95% "
            "interval of the median (distribution-free: order statistics of the per-round "
            "values) is under it, and as missed when the whole interval is over it. At 21 rounds "
            "that interval is the quartiles; more rounds narrow it, where the quartiles, one "
            "round's noise, stay as wide. `x call4agents' added` divides by call4agents' figure "
            "in the same "
            "group; `floor commits' worth` divides by the floor's single INSERT + COMMIT. After "
            "the rounds each subject's last loop is checked: langgraph-recall recorded every "
            "action done and every message as a turn, call4agents wrote a result per call.\n\n"
            f"Load before the run: {before.split('load average ')[1].split(';')[0]}; after: "
            f"{after.split('load average ')[1].split(';')[0]} (the machine is shared: compare "
            "figures within one run, not across runs).",
        )
    )
    write_report(
        args.out,
        (
            "Tool loop, the targets alone (--focus): plain ToolNode vs langgraph-recall"
            if args.focus
            else "Tool loop: plain ToolNode vs call4agents vs langgraph-recall"
        ),
        command,
        sections,
        about=before,
    )
    print(open(args.out).read())


if __name__ == "__main__":
    main()
