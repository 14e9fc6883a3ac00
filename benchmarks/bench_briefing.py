"""How long the briefing takes as history grows, and how long a full resume takes.

For 1k, 10k and 100k recorded turns (one agent each, realistic turns: tool calls, results,
some 10,000-character outputs stored whole, recall-tool chatter, an open action, working state
and pointers) it times ``store.briefing(agent, 2000)``, interleaved so machine noise lands on
every size alike; then the hook's whole per-call work (record nothing new, build the briefing)
for a 100-message thread, and for a 1k and a 10k-turn thread held whole in the input; the
briefing of an agent with an earlier thread beside a 10k-turn conversation in the input; then a
full resume in a fresh process: open the store, take the lease, settle, build the first
briefing, at 100k turns, with the import of the package reported apart. Wall time and this
process's CPU time are both given: on a machine shared with other jobs, wall time grows with
the load while CPU time stays close to the idle figure.

    python benchmarks/bench_briefing.py                  # SQLite, and PostgreSQL if reachable
    python benchmarks/bench_briefing.py --rounds 9 --pg postgresql://postgres@127.0.0.1/postgres

Targets (issue 5): under 5 ms at 100k turns, 100k/1k under 1.5; resume under 50 ms beyond
import time. Results go to ``benchmarks/results/briefing.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (1_000, 10_000, 100_000)
BUDGET = 2000


def history(n: int, agent: str) -> list[Any]:
    """``n`` turns in exchanges of six: a question, a tool call with a recall-tool call beside it,
    two results (every 25th result is a 10,000-character output), and an answer."""
    out: list[Any] = []
    i = 0
    while len(out) < n:
        big = i % 25 == 0
        result = f"rows for batch {i}: " + ("r" * 10_000 if big else "42 rows ok")
        out += [
            HumanMessage(f"migrate batch {i} of the billing tables", id=f"{agent}-h{i}"),
            AIMessage(
                f"Migrating batch {i}.",
                id=f"{agent}-a{i}",
                tool_calls=[
                    {
                        "name": "migrate",
                        "args": {"batch": i, "sql": "x" * 300},
                        "id": f"{agent}-c{i}",
                        "type": "tool_call",
                    },
                    {
                        "name": "update_working_state",
                        "args": {"progress": f"batch {i}"},
                        "id": f"{agent}-u{i}",
                        "type": "tool_call",
                    },
                ],
            ),
            ToolMessage(result, tool_call_id=f"{agent}-c{i}", name="migrate", id=f"{agent}-t{i}"),
            ToolMessage(
                "saved: progress",
                tool_call_id=f"{agent}-u{i}",
                name="update_working_state",
                id=f"{agent}-s{i}",
            ),
            AIMessage(f"Batch {i} is done.", id=f"{agent}-r{i}"),
            HumanMessage(f"thanks for batch {i}", id=f"{agent}-k{i}"),
        ]
        i += 1
    return out[:n]


def populate(store: Any, agent: str, n: int) -> list[Any]:
    from langgraph_recall.store._actions import action_key

    msgs = history(n, agent)
    for start in range(0, n, 2000):
        store.record(agent, msgs[start : start + 2000], thread_id="t-1")
    store.update_working_state(
        agent,
        goal="Migrate the billing tables to the v2 schema",
        plan="batch by batch; verify row counts; switch readers last",
        progress=f"{n // 6} batches migrated",
        decisions="amounts stay in cents",
    )
    for p in range(5):
        store.set_pointer(agent, f"ref-{p}", f"/srv/billing/part-{p}.sql", note="dump")
    store.claim(agent, f"{agent}-open", tool="send_email", args={"to": "ops@x"}, args_digest="d")
    # The latest exchanges' migrate calls as a durable tool node records them (intent, then a
    # done end), so the briefing looks up and shows the outcomes of the calls it shows.
    for m in msgs[-400:]:
        if isinstance(m, AIMessage) and m.tool_calls:
            c = m.tool_calls[0]
            action_id = action_key(agent, str(m.id), str(c["id"]), c["name"])
            store.claim(agent, action_id, tool=c["name"], args=c["args"], args_digest="d")
            store.end(action_id, 1, "done", result="42 rows ok")
    return msgs


def timed(fn: Callable[[], object], calls: int) -> list[tuple[float, float]]:
    """(wall, CPU) milliseconds per call. CPU time is what this process spent: on a machine
    shared with other jobs it stays close to the idle figure while wall time does not."""
    out = []
    for _ in range(calls):
        t, c = time.perf_counter(), time.process_time()
        fn()
        out.append(((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000))
    return out


def interleave(
    cases: dict[str, Callable[[], object]], rounds: int, calls: int
) -> dict[str, list[tuple[float, float]]]:
    """Every round runs every case, starting one later each round."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    names = list(cases)
    for k in names:  # warm caches and the connection
        timed(cases[k], 5)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            samples[k] += timed(cases[k], calls)
    return samples


def wall(samples: list[tuple[float, float]]) -> float:
    return statistics.median(w for w, _ in samples)


def cpu(samples: list[tuple[float, float]]) -> float:
    return statistics.median(c for _, c in samples)


def row(label: str, samples: list[tuple[float, float]]) -> str:
    q = sorted(w for w, _ in samples)
    return (
        f"| {label} | **{wall(samples):.2f}** | {q[len(q) // 10]:.2f}-{q[len(q) * 9 // 10]:.2f} "
        f"| {cpu(samples):.2f} |"
    )


RESUME = r"""
import json, sys, time
t0 = time.perf_counter()
from langgraph_recall import RecallStore  # what an application imports: the whole package
from langgraph_recall import _briefing  # counted with the imports even if the package loads it lazily
from langgraph_recall.tools import DurableTools
target, agent = sys.argv[1], sys.argv[2]
if target.startswith(("postgres://", "postgresql://")):
    import psycopg, psycopg_pool  # the driver is code to load, like the package: an import
t1, c1 = time.perf_counter(), time.process_time()
store = RecallStore.open(target)
t2 = time.perf_counter()
lease = store.acquire_lease(agent, "bench-resume", 30.0)
t3 = time.perf_counter()
DurableTools(()).settle(store, agent)
t4 = time.perf_counter()
b = store.briefing(agent, token_budget=2000)
t5, c5 = time.perf_counter(), time.process_time()
store.release_lease(agent, "bench-resume", lease.epoch)
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "lease": t3 - t2, "settle": t4 - t3,
                  "briefing": t5 - t4, "total": t5 - t1, "cpu": c5 - c1, "tokens": b.tokens}))
"""


def resume_runs(target: str, agent: str, runs: int) -> list[dict[str, float]]:
    out = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", RESUME, target, agent],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the resume process failed:\n{done.stderr[-3000:]}")
        out.append(json.loads(done.stdout))
    return out


def bench_backend(name: str, target: str, rounds: int, calls: int, resume: int) -> list[str]:
    from langgraph_recall._hooks import _Options, _pre_model
    from langgraph_recall.store import RecallStore

    store = RecallStore.open(target)
    agents = {n: f"bench-{n}" for n in SIZES}
    threads: dict[int, list[Any]] = {}
    whole: dict[int, list[Any]] = {}
    for n, agent in agents.items():
        t = time.perf_counter()
        whole[n] = populate(store, agent, n)
        threads[n] = whole[n][-100:]
        print(f"[{name}] recorded {n} turns in {time.perf_counter() - t:.1f}s", file=sys.stderr)

    cases: dict[str, Callable[[], object]] = {}
    for n, agent in agents.items():
        cases[f"briefing, {n:,} turns"] = lambda a=agent: store.briefing(a, token_budget=BUDGET)
    cases["briefing, 100,000 turns, same thread (last 100 turns in the input)"] = lambda: (
        store.briefing(
            agents[100_000], token_budget=BUDGET, exclude_msg_ids=[m.id for m in threads[100_000]]
        )
    )
    opts = _Options(token_budget=BUDGET, store=store)
    cfg = {"configurable": {"thread_id": "t-1", "agent_id": agents[100_000]}}
    state = {"messages": threads[100_000]}
    cases["pre_model_hook body (record + briefing), 100-message thread, 100,000 turns"] = lambda: (
        _pre_model(state, cfg, opts)
    )
    # A long conversation with all of it in the model's input, as a hook sees it at every model
    # call when no RecallCheckpointer records (nothing new to record here): what the hook does
    # per message of the input (their ids, compared with those known recorded; the briefing's
    # exclusions) must stay small beside the briefing itself.
    for n in (1_000, 10_000):
        in_input = {"messages": whole[n]}
        at = {"configurable": {"thread_id": "t-1", "agent_id": agents[n]}}
        cases[f"pre_model_hook body, the whole {n:,}-turn thread in the input"] = (
            lambda s=in_input, c=at: _pre_model(s, c, opts)  # type: ignore[misc]
        )
    # The same 10k-turn conversation for an agent that also has an earlier thread (turns the
    # input does not hold, below it): the briefing shows those, and must not read the whole
    # conversation again at every call to find them.
    two = "bench-two-threads"
    store.record(two, history(60, two + "-old"), thread_id="t-0")
    for start in range(0, 10_000, 2000):
        store.record(two, whole[10_000][start : start + 2000], thread_id="t-1")
    conversation = [m.id for m in whole[10_000]]
    cases["briefing, an earlier thread's 60 turns and a 10,000-turn conversation in the input"] = (
        lambda: store.briefing(two, token_budget=BUDGET, exclude_msg_ids=conversation)
    )
    # For scale, beside them: what LangGraph itself does with that 10k-turn channel at every
    # checkpoint that adds a message to it (its serializer writes the whole list).
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    cases["for scale: LangGraph serialising that 10,000-turn channel (each checkpoint does)"] = (
        lambda: serde.dumps_typed(whole[10_000])
    )
    samples = interleave(cases, rounds, calls)
    med = {n: wall(samples[f"briefing, {n:,} turns"]) for n in SIZES}
    med_cpu = {n: cpu(samples[f"briefing, {n:,} turns"]) for n in SIZES}
    b = store.briefing(agents[100_000], token_budget=BUDGET)

    lines = [
        f"### {name}",
        "",
        f"`store.briefing(agent, token_budget={BUDGET})`, {rounds} interleaved rounds of {calls} calls each, milliseconds per call.",
        "",
        "| case | median wall ms | p10-p90 wall ms | median CPU ms |",
        "|---|---|---|---|",
        *[row(k, v) for k, v in samples.items()],
        "",
        f"Ratio 100k/1k: **{med[100_000] / med[1_000]:.2f}** wall, "
        f"**{med_cpu[100_000] / med_cpu[1_000]:.2f}** CPU (target < 1.5). "
        f"The 100k briefing is {b.tokens} tokens, {b.turns_shown} turns shown.",
        "",
    ]
    if resume:
        runs = resume_runs(target, agents[100_000], resume)
        lines += [
            f"Full resume in a new process at 100,000 turns ({resume} runs, medians in ms):",
            "",
            "| import | open | lease | settle | first briefing | **total beyond import** | of which CPU |",
            "|---|---|---|---|---|---|---|",
            "| "
            + " | ".join(
                f"{statistics.median(r[k] for r in runs) * 1000:.1f}"
                for k in ("import", "open", "lease", "settle", "briefing")
            )
            + f" | **{statistics.median(r['total'] for r in runs) * 1000:.1f}**"
            + f" | {statistics.median(r['cpu'] for r in runs) * 1000:.1f} |",
            "",
            "`import` loads langgraph-recall (and, for PostgreSQL, psycopg and its pool); `open` "
            "connects (PostgreSQL: one probe connection and the pool's first) and checks the "
            "schema; the target (issue 7: resume under 50 ms) is the total beyond import.",
            "",
        ]
    store.close()
    return lines


def checkpoint_bytes() -> list[str]:
    """What ``llm_input_messages`` costs a checkpoint per model call: the briefing or a marker."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_recall._hooks import UNSTORED_MARKER, _UnstoredBriefing

    serde = JsonPlusSerializer()
    out = [
        "| briefing size | stored as a SystemMessage | stored by pre_model_hook |",
        "|---|---|---|",
    ]
    for tokens in (500, 2000, 8000):
        text = "x" * (tokens * 4)
        plain = len(serde.dumps_typed(SystemMessage(text, id="recall-briefing"))[1])
        ours = len(serde.dumps_typed(_UnstoredBriefing(content=text, id="recall-briefing"))[1])
        out.append(f"| {tokens} tokens | {plain:,} bytes | {ours:,} bytes |")
    loaded = serde.loads_typed(serde.dumps_typed(_UnstoredBriefing(content="x", id="b")))
    assert loaded.content == UNSTORED_MARKER and type(loaded) is SystemMessage
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--resume-runs", type=int, default=7)
    ap.add_argument(
        "--pg",
        default=os.environ.get("RECALL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "briefing.md"))
    args = ap.parse_args()
    os.environ.setdefault("LANGGRAPH_RECALL_SECRET", "bench-secret-" + "0" * 32)

    sections: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        sections += bench_backend(
            "SQLite (WAL, synchronous=NORMAL)",
            os.path.join(tmp, "b.db"),
            args.rounds,
            args.calls,
            args.resume_runs,
        )
    if not args.no_pg:
        dsn = _pg_database(args.pg)
        if dsn:
            try:
                sections += bench_backend(
                    "PostgreSQL (local server)", dsn, args.rounds, args.calls, args.resume_runs
                )
            finally:
                _drop_pg_database(args.pg, dsn)
    load = os.getloadavg()
    text = "\n".join(
        [
            "# Briefing: cost against history length, and a full resume",
            "",
            "Reproduce with `python benchmarks/bench_briefing.py` (see its docstring).",
            "",
            f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared with other jobs).",
            "",
            *sections,
            "## What a checkpoint keeps of the briefing (create_react_agent)",
            "",
            "LangGraph persists `llm_input_messages` in every checkpoint; `pre_model_hook` hands the model "
            "the full briefing but a checkpoint serializes only a short marker in its place:",
            "",
            *checkpoint_bytes(),
            "",
        ]
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


def _pg_database(admin: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute("DROP DATABASE IF EXISTS recall_bench_briefing")
            conn.execute("CREATE DATABASE recall_bench_briefing")
    except Exception as exc:  # no server here: SQLite only
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return None
    return admin.rsplit("/", 1)[0] + "/recall_bench_briefing"


def _drop_pg_database(admin: str, dsn: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS recall_bench_briefing WITH (FORCE)")


if __name__ == "__main__":
    main()
