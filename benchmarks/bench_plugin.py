"""The whole plugin against the bare saver on a 10-step loop; repeat lookups; recording.

- **loop**: the same agent/tools graph, 10 tool calls then an answer, run two ways:
  *bare*: LangGraph's ``ToolNode`` and the model called directly, on the bare inner saver
  (``SqliteSaver`` / ``PostgresSaver``); *plugin*: ``store.checkpointer()`` (lease, fencing,
  recording), ``DurableToolNode`` (tool classed ``external``) and a fresh briefing in front of
  every model call (``with_briefing``). Under LangGraph's default ``durability="async"`` and
  under ``"sync"``. Target (issue 7): plugin under 1.3x bare.
- **repeat lookup**: a call whose action already finished, as the durable tool path asks it
  (``begin``) and as a bare ``store.claim``. A process keeps the rows of the calls it saw
  finish (``store/_finished.py``), so these two are answered from memory; the third case
  clears what is kept before each call: the first repeat in a new process, read from the
  database. Target: under 20 µs.
- **recording**: ``store.record`` of 1, 2 (an AI message and its tool result: what one
  checkpoint of the loop adds), 10 and 42 new messages, per message. A run hands its messages
  to the recorder in one batch when it ends (or every 64 messages, or every 0.5 s of a slow
  run), so a 20-call loop records 42 messages at once: that row is the loop's own case.
  Each batch size records an agent of its own, every batch new messages; building the
  messages is not timed. Target: under 20 µs.
- **a run's end**: since a run records its last turns in the transaction that gives its lease
  up, what recording costs a run is that end with 1, 2, 10 or 42 new messages less the same
  end with none (the lease's release alone), per message. A chat turn's 2 messages are the
  common case. Target: under 20 µs. On SQLite the same statements are also sent bare, on
  the store's own connection (``floor: the same SQL``): SQLite's part of that figure.
- **chat turn**: the same graphs with a model that answers at once (no tool), as the second
  turn of a conversation (the first, on a new thread, untimed): what the plugin adds to a run
  that is mostly its start and its end. No target; shown beside the loop's.
- the floor: one INSERT + COMMIT on the same engine and settings, measured in the same run.

    python benchmarks/bench_plugin.py            # SQLite and PostgreSQL, 11 rounds
    python benchmarks/bench_plugin.py --no-pg --rounds 3

PostgreSQL: a throwaway database on ``--pg`` (default ``$RECALL_BENCH_PG`` or
``postgresql://postgres@127.0.0.1:5432/postgres``), dropped afterwards.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.prebuilt import ToolNode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (  # noqa: E402
    Case,
    Spread,
    find,
    machine,
    run_interleaved,
    spread,
    table,
    verdict,
    write_report,
)
from bench_loop import (  # noqa: E402
    DEFAULT_PG,
    HERE,
    SETTINGS,
    TITLES,
    LoopCase,
    about,
    add_tool,
    loop_graph,
    pg_database,
    pg_floor,
    pg_schema,
    postgres_saver,
    run_once,
    sqlite_floor,
    sqlite_saver,
)

from langgraph_recall import DurableToolNode, RecallStore, with_briefing  # noqa: E402
from langgraph_recall.tools._steps import begin  # noqa: E402

LOOP = "10-step loop"
FLOOR = "INSERT + COMMIT"
BARE = "bare saver + ToolNode"
PLUGIN = "whole plugin"
# The bare loop timed as a second subject: what a ratio reads when nothing differs.
BARE_AGAIN = "bare saver + ToolNode, again (A/A)"
RATIO_TARGET = 1.3
LOOKUP_TARGET_US = 20.0
RECORD_TARGET_US = 20.0
RECORD_SIZES = (1, 2, 10, 42)
RUN_END = "a run's end: lease given up, with the last turns recorded"
CHAT = "chat turn (the second on its thread)"
RUNS = (LOOP, CHAT)


def briefed_agent(model: Any) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    """The agent node of the plugin graph: a fresh briefing in front of every model call."""

    def call_model(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(with_briefing(state["messages"], config=config))]}

    return call_model


def loop_cases(
    setting: str,
    bare: BaseCheckpointSaver,
    store: RecallStore,
    *,
    steps: int,
    per_round: int,
) -> list[Case]:
    plain = loop_graph(ToolNode([add_tool()]), bare, calls=steps)
    plugin = loop_graph(
        DurableToolNode([add_tool()], classes={"add": "external"}),
        store.checkpointer(),
        calls=steps,
        store=store,
        agent=briefed_agent,
    )
    # An agent with one finished loop of records: what each model call's briefing reads.
    briefed = run_once(plugin, "sync", prefix="briefed")
    cases = [
        Case(
            "briefing of a finished 10-step agent",
            "RecallStore",
            lambda i: store.briefing(briefed),
            calls=20,
            setting=setting,
        )
    ]
    for durability in ("async", "sync"):
        for subject, graph in ((BARE, plain), (BARE_AGAIN, plain), (PLUGIN, plugin)):
            cases.append(
                LoopCase(
                    f"{LOOP}, durability={durability}",
                    subject,
                    _looper(graph, durability),
                    calls=per_round,
                    warmup=1,
                    setting=setting,
                )
            )
    # A chat turn: one model call, no tool (the same graphs with an empty script), as the
    # second turn of a conversation, so the run restores a checkpoint with messages in it.
    chat_plain = loop_graph(ToolNode([add_tool()]), bare, calls=0)
    chat_plugin = loop_graph(
        DurableToolNode([add_tool()], classes={"add": "external"}),
        store.checkpointer(),
        calls=0,
        store=store,
        agent=briefed_agent,
    )
    for subject, graph in ((BARE, chat_plain), (BARE_AGAIN, chat_plain), (PLUGIN, chat_plugin)):
        first, second = _chat(graph)
        cases.append(
            LoopCase(
                f"{CHAT}, durability=sync",
                subject,
                second,
                setup=first,
                calls=per_round * 10,
                warmup=2,
                setting=setting,
            )
        )
    return cases


def _chat(graph: Any) -> tuple[Callable[[int], Any], Callable[[Any], object]]:
    """The first turn of a new thread (untimed), then the second (timed)."""

    def first(i: int) -> RunnableConfig:
        cfg: RunnableConfig = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:12]}"}}
        graph.invoke({"messages": [HumanMessage("hello")]}, cfg, durability="sync")
        return cfg

    def second(cfg: RunnableConfig) -> None:
        out = graph.invoke({"messages": [HumanMessage("and then?")]}, cfg, durability="sync")
        if len(out["messages"]) != 4:
            raise RuntimeError(f"the chat turn did not finish: {out['messages']!r}")

    return first, second


def _looper(graph: Any, durability: str) -> Callable[[int], object]:
    return lambda i: run_once(graph, durability)


def _recorder(store: RecallStore, n: int) -> Callable[[list[BaseMessage]], object]:
    # An agent per batch size: every batch is new messages. (The cases once shared one agent
    # and overlapping ids, so most batches were partly recorded already.)
    return lambda batch: store.record(f"rec-{n}", batch)


def turn_messages(i: int, n: int) -> list[BaseMessage]:
    """``n`` new messages shaped like the loop's: an AI tool call, then its result."""
    out: list[BaseMessage] = []
    for j in range(n):
        k = i * n + j
        if j % 2 == 0:
            out.append(
                AIMessage(
                    f"step {k}",
                    id=f"ai-{k}",
                    tool_calls=[{"name": "add", "args": {"a": k, "b": 1}, "id": f"c{k}"}],
                )
            )
        else:
            out.append(ToolMessage(str(k), tool_call_id=f"c{k - 1}", name="add", id=f"tm-{k}"))
    return out


def _run_end(store: RecallStore, n: int) -> tuple[Callable[[int], Any], Callable[[Any], object]]:
    """A run's end with ``n`` new messages left to record (0: the lease's release alone): the
    lease is taken untimed, as a run start would; the timed call gives it up, with them."""
    agent = f"end-{n}"

    def take(i: int) -> tuple[int, list[BaseMessage]]:
        return store.acquire_lease(agent, "bench", 60.0).epoch, turn_messages(i, n)

    def end(given: tuple[int, list[BaseMessage]]) -> None:
        epoch, batch = given
        if n == 0:
            assert store.release_lease(agent, "bench", epoch)
        else:
            assert store._end_run(agent, "bench", epoch, batch, thread_id="t")

    return take, end


# SQLite's own cost of a run's end: its statements, run on the store's writers' connection.
END_FLOOR = "floor: the same SQL"
FLOOR_SIZES = (0, 1, 2)


def _run_end_floor(
    store: RecallStore, n: int
) -> tuple[Callable[[int], Any], Callable[[Any], object]]:
    """A run's end as bare SQL (SQLite): the lease's release and the batch's one INSERT, the
    statements ``store._end_run`` sends, on its writers' connection (warm, as the store's is)
    under its write lock. The messages are serialised untimed: this is what SQLite alone takes
    to write them, the floor under the store's figure."""
    from langgraph_recall.store._codec import dumps_typed
    from langgraph_recall.store._transcript import _sqlite_insert

    db = store._db
    agent = f"floor-end-{n}"
    release = (
        "UPDATE recall_leases SET expires_at = 0 WHERE agent_id = ? AND holder = ? AND epoch = ?"
    )
    insert = db.sql(_sqlite_insert(n)) if n else ""

    def take(i: int) -> tuple[int, list[Any]]:
        epoch = store.acquire_lease(agent, "bench", 60.0).epoch
        params: list[Any] = [agent, agent, "t"]
        for m in turn_messages(i, n):
            params += (m.id, m.type, *dumps_typed(m))
        return epoch, params

    def end(given: tuple[int, list[Any]]) -> None:
        epoch, params = given
        with db.write_lock:
            conn = db.writer()  # type: ignore[attr-defined]
            conn.execute("BEGIN IMMEDIATE")
            assert conn.execute(release, (agent, "bench", epoch)).rowcount == 1
            if n:
                conn.execute(insert, params)
            conn.execute("COMMIT")

    return take, end


def store_cases(store: RecallStore, setting: str, calls: int) -> list[Case]:
    args = {"a": 1, "b": 1}
    claim = store.claim("bench", "done-1", tool="add", args=args, args_digest="d1")
    store.end(claim.action.action_id, 1, "done", result=ToolMessage("2", tool_call_id="c"))

    def durable_repeat(i: int) -> None:
        found = begin(
            store,
            agent_id="bench",
            action_id="done-1",
            tool="add",
            klass="external",
            args=args,
            digest="d1",
            thread_id="t",
            epoch=None,
            gated=False,
        )
        assert getattr(found, "status", None) == "done"

    def claim_repeat(i: int) -> None:
        assert (
            store.claim("bench", "done-1", tool="add", args=args, args_digest="d1").status == "done"
        )

    def cold_repeat(i: int) -> None:
        # As the first repeat in a process that did not see the call finish: nothing kept.
        store._db.finished.clear()
        claim_repeat(i)

    cases = [
        Case(
            "repeat lookup (durable path: begin)",
            "RecallStore",
            durable_repeat,
            calls=calls,
            setting=setting,
        ),
        Case(
            "repeat lookup (store.claim)", "RecallStore", claim_repeat, calls=calls, setting=setting
        ),
        Case(
            "repeat lookup, first in a new process (store.claim, read from the database)",
            "RecallStore",
            cold_repeat,
            calls=calls,
            setting=setting,
        ),
    ]
    for n in RECORD_SIZES:
        cases.append(
            Case(
                f"record, {_new(n)}, per message",
                "RecallStore",
                _recorder(store, n),
                setup=functools.partial(turn_messages, n=n),  # untimed: building the messages
                calls=max(20, calls // n),
                per=n,
                setting=setting,
            )
        )
    for n in (0, *RECORD_SIZES):
        take, end = _run_end(store, n)
        cases.append(
            Case(
                f"{RUN_END}, {_new(n) if n else 'no message'}",
                "RecallStore",
                end,
                setup=take,
                calls=max(20, calls // max(n, 2)),
                setting=setting,
            )
        )
    if store.dialect == "sqlite":
        for n in FLOOR_SIZES:
            take, end = _run_end_floor(store, n)
            cases.append(
                Case(
                    f"{RUN_END}, {_new(n) if n else 'no message'}",
                    END_FLOOR,
                    end,
                    setup=take,
                    calls=max(20, calls // max(n, 2)),
                    setting=setting,
                )
            )
    return cases


def _new(n: int) -> str:
    return f"{n} new message{'s' if n > 1 else ''}"


def build(args: argparse.Namespace, tmp: str, stack: ExitStack) -> dict[str, list[Case]]:
    groups: dict[str, list[Case]] = {}
    for name, sync, durability in (
        ("sqlite", "NORMAL", "process"),
        ("sqlite-power", "FULL", "power"),
    ):
        setting = "WAL+" + sync
        store = stack.enter_context(
            RecallStore.open(os.path.join(tmp, f"recall-{name}.db"), durability=durability)
        )
        bare = sqlite_saver(os.path.join(tmp, f"bare-{name}.db"), sync)
        stack.callback(bare.conn.close)  # type: ignore[attr-defined]
        calls = args.calls if sync == "NORMAL" else max(20, args.calls // 4)
        groups[name] = [
            *loop_cases(setting, bare, store, steps=args.steps, per_round=args.per_round),
            *store_cases(store, setting, calls),
            sqlite_floor(os.path.join(tmp, f"floor-{name}.db"), sync, setting, calls),
        ]
    if args.pg:
        dsn = stack.enter_context(pg_database(args.pg, "plugin"))
        setting = "PG sync commit"
        store = stack.enter_context(RecallStore.open(pg_schema(dsn, "recall")))
        groups["postgres"] = [
            *loop_cases(
                setting,
                postgres_saver(pg_schema(dsn, "bare"), stack),
                store,
                steps=args.steps,
                per_round=args.per_round,
            ),
            *store_cases(store, setting, max(20, args.calls // 2)),
            pg_floor(pg_schema(dsn, "floor"), setting, max(20, args.calls // 2), stack),
        ]
    return groups


def _ratios(plugin: Case, bare: Case, attr: str) -> Spread:
    return spread(
        [p / b for p, b in zip(getattr(plugin, attr), getattr(bare, attr), strict=True) if b > 0]
    )


def loop_table(cases: Sequence[Case]) -> str:
    lines = [
        "| loop | bare ms (round medians) | plugin ms (round medians) | plugin / bare, wall "
        "[quartiles of per-round ratios] | 95% interval of that median | plugin / bare, CPU "
        "[quartiles] | noise floor: bare / bare again, wall [quartiles]; 95% interval |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        if not case.operation.startswith(RUNS) or case.subject != BARE:
            continue
        plugin = find(cases, case.operation, PLUGIN)
        wall = _ratios(plugin, case, "round_medians")
        cpu = _ratios(plugin, case, "cpu_round_medians")
        noise = _ratios(find(cases, case.operation, BARE_AGAIN), case, "round_medians")
        lines.append(
            f"| {case.operation} | {_ms(case)} | {_ms(plugin)} | {wall.show('.2f')} | "
            f"{wall.interval('.2f')} | {cpu.show('.2f')} | {noise.show('.2f')}; "
            f"{noise.interval('.2f')} |"
        )
    return "\n".join(lines)


def _ms(c: Case) -> str:
    lo, hi = min(c.round_medians) * 1e3, max(c.round_medians) * 1e3
    return f"**{c.median_us / 1e3:.1f}** ({lo:.1f}-{hi:.1f})"


def targets(groups: dict[str, list[Case]]) -> str:
    lines = [
        "| database | target | measured [quartiles] | 95% interval of the median | met |",
        "|---|---|---|---|---|",
    ]
    for name, cases in groups.items():
        for case in cases:
            if case.operation.startswith(RUNS) and case.subject == BARE:
                plugin = find(cases, case.operation, PLUGIN)
                wall = _ratios(plugin, case, "round_medians")
                cpu = _ratios(plugin, case, "cpu_round_medians")
                # The issue's target is the loop's; a chat turn is shown beside it, for reference.
                aim = (
                    f"plugin < {RATIO_TARGET}x bare"
                    if case.operation.startswith(LOOP)
                    else ("plugin / bare (no target: for reference)")
                )
                met = verdict(wall, RATIO_TARGET) if case.operation.startswith(LOOP) else "-"
                lines.append(
                    f"| {TITLES[name]} | {case.operation}: {aim} | "
                    f"wall {wall.show('.2f')}, CPU {cpu.show('.2f')} | wall "
                    f"{wall.interval('.2f')} | {met} |"
                )
        for case in cases:
            if case.operation.startswith("repeat lookup"):
                limit, what = LOOKUP_TARGET_US, case.operation
            elif case.operation.startswith("record, "):
                limit, what = RECORD_TARGET_US, case.operation
            else:
                continue
            # A store call's own time: the median of every call, with the quartiles of the
            # calls; the verdict takes the interval of the median of the round medians.
            per_round = spread([m * 1e6 for m in case.round_medians])
            lines.append(
                f"| {TITLES[name]} | {what} < {limit:.0f} µs | {case.median_us:.1f} µs "
                f"[{case.percentile_us(0.25):.1f}, {case.percentile_us(0.75):.1f}] | "
                f"{per_round.interval('.1f')} µs | {verdict(per_round, limit)} |"
            )
        lines += _run_end_rows(name, cases)
    return "\n".join(lines)


def _run_end_rows(name: str, cases: Sequence[Case]) -> list[str]:
    """What recording costs a run, per message: its end with them, less its end without."""
    alone = find(cases, f"{RUN_END}, no message", "RecallStore")
    rows = []
    for n in RECORD_SIZES:
        end = find(cases, f"{RUN_END}, {_new(n)}", "RecallStore")
        added = spread(
            [(e - a) * 1e6 / n for e, a in zip(end.round_medians, alone.round_medians, strict=True)]
        )
        rows.append(
            f"| {TITLES[name]} | recorded at a run's end, {_new(n)}, per message (the end "
            f"with them less the end without) < {RECORD_TARGET_US:.0f} µs | {added.show('.1f')} "
            f"µs | {added.interval('.1f')} µs | {verdict(added, RECORD_TARGET_US)} |"
        )
        floor = _floor_added(cases, n)
        if floor is not None:
            rows.append(
                f"| {TITLES[name]} | the same, {END_FLOOR} (the end's statements alone, on the "
                f"store's connection; no Python, messages serialised beforehand): the floor, "
                f"no target | {floor.show('.1f')} µs | {floor.interval('.1f')} µs | - |"
            )
    return rows


def _floor_added(cases: Sequence[Case], n: int) -> Spread | None:
    """Per message, SQLite's own part of recording ``n`` messages at a run's end, or None."""
    try:
        alone = find(cases, f"{RUN_END}, no message", END_FLOOR)
        end = find(cases, f"{RUN_END}, {_new(n)}", END_FLOOR)
    except KeyError:  # PostgreSQL: its end is one statement already; no floor case
        return None
    return spread(
        [(e - a) * 1e6 / n for e, a in zip(end.round_medians, alone.round_medians, strict=True)]
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--steps", type=int, default=10, help="tool calls per loop")
    ap.add_argument("--per-round", type=int, default=1, help="loops per subject per round")
    ap.add_argument("--calls", type=int, default=200, help="store calls per case per round")
    ap.add_argument("--pg", default=DEFAULT_PG)
    ap.add_argument("--no-pg", dest="pg", action="store_const", const=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "plugin.md"))
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_plugin.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    before = about()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        groups = build(args, tmp, stack)
        run_interleaved(
            [c for cases in groups.values() for c in cases],
            args.rounds,
            progress=lambda s: print(s, file=sys.stderr),
        )
    after = machine()
    sections = [("Targets (issue 7)", targets(groups))]
    for name, cases in groups.items():
        floor = find(cases, FLOOR, "floor")
        others = [c for c in cases if not c.operation.startswith(RUNS)]
        sections.append(
            (
                TITLES[name],
                loop_table(cases)
                + "\n\nStore operations, µs (x floor: divided by one INSERT + COMMIT):\n\n"
                + table(others, baseline=floor),
            )
        )
    sections.append(("Settings", "\n".join(f"- **{TITLES[k]}**: {v}" for k, v in SETTINGS.items())))
    sections.append(
        (
            "How to read this",
            f"A loop is one `graph.invoke` on a fresh thread: {args.steps} tool calls then an "
            "answer from a scripted model (no network). `plugin / bare` is taken per round (both "
            "ran in the same round), then the median and quartiles over the rounds, of wall "
            "time (what a user waits) and of CPU time (all threads; it leaves out most of the "
            "other jobs on this shared machine). A target counts as met only when the whole 95% "
            "interval of the median (distribution-free, from the order statistics of the "
            "per-round values; for a store call, of its round medians) is under it, and as missed "
            "when the whole interval is over it. `bare / bare again` times the bare loop as a "
            "second subject: its true ratio is 1, so its quartiles show how far this machine's "
            "noise alone moves one round's ratio, and its interval should hold 1. The plugin's agent node builds a fresh briefing (working state, "
            "pointers, open actions, recent turns not in the input) before every model call; "
            "its checkpointer takes the agent's lease at the start, stamps the lease epoch on "
            "every checkpoint and records every message as a turn before `invoke` returns. "
            "Store operations: median µs per call (per message for recording), p10-p90 and the "
            f"range of per-round medians. `{END_FLOOR}` (SQLite) sends a run's end's statements "
            "(the lease's release, the batch's one INSERT) straight to the store's writers' "
            "connection, messages serialised beforehand: what SQLite itself takes, so the "
            "distance from it is the store's own Python and serialisation. One message adds "
            "its row and an entry in each of the turns table's two indexes: three more pages in "
            "the commit's log, each written with two system calls.\n\n"
            f"Load before the run: {before.split('load average ')[1].split(';')[0]}; after: "
            f"{after.split('load average ')[1].split(';')[0]} (the machine is shared).",
        )
    )
    write_report(
        args.out,
        "The whole plugin vs the bare saver; repeat lookups; recording",
        command,
        sections,
        about=before,
    )
    print(open(args.out).read())


if __name__ == "__main__":
    main()
