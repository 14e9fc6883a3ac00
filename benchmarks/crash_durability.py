"""What a SIGKILL loses under each LangGraph durability mode, with and without langgraph-recall.

A graph of ``--steps`` steps (each adds one AI message) runs on a new thread, and the process
SIGKILLs itself inside the node of step ``--kill-at``, as it starts or ``--delay`` milliseconds
into it (the other nodes return at once). Afterwards a fresh process reads the
thread's newest checkpoint and the agent's records: how many finished steps the checkpoints
lost (``kill_at - 1`` finished, minus those the newest checkpoint holds), and whether the
request and the finished steps' messages are in the turns. Each case runs ``--repeat`` times,
under "async" (LangGraph's default), "sync" and "exit", on LangGraph's own saver alone and on
``store.checkpointer()``. A kill as the node starts is the worst case for "async": the step
began the moment the previous step's checkpoint was handed to the background writer; a model
call takes seconds, and a kill later in it finds that checkpoint written. Counts go to ``benchmarks/results/durability.md``.

    python benchmarks/crash_durability.py               # SQLite and PostgreSQL
    python benchmarks/crash_durability.py --no-pg --repeat 5

Each run is a child forked from this process after the imports (a kill costs no interpreter
start). PostgreSQL: a throwaway database on ``--pg`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), dropped afterwards.
"""

from __future__ import annotations

import argparse
import collections
import os
import secrets
import shlex
import signal
import sys
import tempfile
import threading
import time
import warnings
from typing import Annotated, Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _harness import machine, pg_database, write_report  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from langgraph_recall import RecallStore  # noqa: E402
from langgraph_recall.checkpoint._same_db import (  # noqa: E402
    close_same_database_saver,
    same_database_saver,
)

warnings.filterwarnings("ignore")
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", secrets.token_hex(32))
DEFAULT_PG = os.environ.get("RECALL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
MODES = ("async", "sync", "exit")
SAVERS = ("LangGraph's saver alone", "store.checkpointer()")


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int


def graph(steps: int, kill_at: int, delay: float) -> StateGraph:
    def step(state: State) -> dict[str, Any]:
        k = state.get("n", 0) + 1
        if k == kill_at:
            time.sleep(delay)
            signal.pthread_kill(threading.get_ident(), signal.SIGKILL)
        return {"messages": [AIMessage(f"step {k}", id=f"m-{k}")], "n": k}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END, ["step", END])
    return g


def child(target: str, saver: str, mode: str, thread: str, steps: int, kill: int, delay: float):
    store = RecallStore.open(target)
    cp = store.checkpointer() if saver == SAVERS[1] else same_database_saver(store)
    app = graph(steps, kill, delay).compile(checkpointer=cp, store=store)
    request = {"messages": [HumanMessage("do the task", id="h-request")], "n": 0}
    app.invoke(request, {"configurable": {"thread_id": thread}}, durability=mode)
    os._exit(0)  # not reached: the node of step ``kill`` kills the process


def one_run(target: str, saver: str, mode: str, steps: int, kill: int, delay: float) -> dict:
    thread = f"t-{secrets.token_hex(4)}"
    pid = os.fork()
    if pid == 0:
        try:
            child(target, saver, mode, thread, steps, kill, delay)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    store = RecallStore.open(target)
    inner = same_database_saver(store)
    try:
        saved = inner.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        values = saved.checkpoint["channel_values"] if saved else {}
        held = int(values.get("n", 0)) if saved else -1  # -1: no checkpoint at all
        turns = [t.msg_id for t in store.turns(thread)]
    finally:
        close_same_database_saver(inner)
        store.close()
    return {
        "killed": killed,
        "lost": (kill - 1) - max(held, 0),
        "no_checkpoint": held < 0,
        "request_recorded": "h-request" in turns,
        "steps_recorded": sum(1 for t in turns if t.startswith("m-")),
    }


def histogram(values: list[int]) -> str:
    counts = collections.Counter(values)
    return ", ".join(f"{k}: {counts[k]}" for k in sorted(counts))


def table(target: str, args: argparse.Namespace) -> str:
    head = [
        "durability",
        "saver",
        "killed in the node",
        "finished steps lost to the kill (lost: runs)",
        "runs left with no checkpoint",
        "request in the turns",
        "finished steps in the turns (median)",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode in MODES:
        for saver in SAVERS:
            for delay in (0.0, args.delay / 1000):
                runs = [
                    one_run(target, saver, mode, args.steps, args.kill_at, delay)
                    for _ in range(args.repeat)
                ]
                assert all(r["killed"] for r in runs), "a child was not killed"
                recorded = sorted(r["steps_recorded"] for r in runs)
                rows.append(
                    "| "
                    + " | ".join(
                        [
                            f'"{mode}"',
                            saver,
                            "as it starts" if not delay else f"{delay * 1000:g} ms into it",
                            histogram([r["lost"] for r in runs]),
                            f"{sum(r['no_checkpoint'] for r in runs)} of {len(runs)}",
                            "-"
                            if saver == SAVERS[0]
                            else f"{sum(r['request_recorded'] for r in runs)} of {len(runs)}",
                            "-" if saver == SAVERS[0] else str(recorded[len(recorded) // 2]),
                        ]
                    )
                    + " |"
                )
                print(rows[-1], flush=True)
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--kill-at", type=int, default=6, help="the step whose node is killed")
    ap.add_argument("--delay", type=float, default=20.0, help="ms into the node the later kill")
    ap.add_argument("--pg", default=DEFAULT_PG)
    ap.add_argument("--no-pg", dest="pg", action="store_const", const=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "durability.md"))
    args = ap.parse_args()
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        sections.append(("SQLite", table(os.path.join(tmp, "recall.db"), args)))
    if args.pg:
        with pg_database(args.pg, "recall_durability") as dsn:
            sections.append(("PostgreSQL (local server)", table(dsn, args)))
    command = "python benchmarks/crash_durability.py " + shlex.join(sys.argv[1:])
    write_report(
        args.out,
        "What a SIGKILL loses under each durability mode",
        command.strip(),
        sections,
        intro=(
            f"{args.steps}-step graph; the process kills itself (SIGKILL) in step "
            f"{args.kill_at}'s node, so {args.kill_at - 1} steps had finished. "
            f"{args.repeat} runs per row, each on a new thread. A lost step is a finished "
            "step the newest checkpoint does not hold: the resume runs it again."
        ),
        about=machine(
            ["langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"]
        ),
    )


if __name__ == "__main__":
    main()
