"""The payment crash test at full size: 300 orders, 12 workers killed at random, lost answers.

The scenario of ``tests/test_payments_crash.py`` (built in ``tests/fix_payments.py``), larger:
a payment API in its own process that commits every charge, honours idempotency keys, drops
20% of its answers, delays 25%, and SIGKILLs the calling worker right after charging it (10% of
new charges, up to ``orders / 12`` times); a supervisor keeps 12 workers busy on a shared order
queue, SIGKILLs ``orders / 12`` more at random moments and restarts every dead one. Each order
is a scripted agent that calls ``charge(order_id, amount)`` once. Three modes: a plain
``ToolNode`` with no idempotency key (LangGraph alone), ``DurableToolNode`` with the charge
declared ``external``, and declared ``idempotent``. Counts go to
``benchmarks/results/crash_payments.md``.

    python benchmarks/crash_payments.py                      # 300 orders, SQLite + PostgreSQL
    python benchmarks/crash_payments.py --repeat 3           # three runs of everything
    python benchmarks/crash_payments.py --orders 60 --no-pg  # quick look

PostgreSQL: a throwaway database per run is created on the server named by ``--pg`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) and dropped afterwards. Exit status 1 if a
langgraph-recall mode charged an order twice or left an idempotent charge in doubt.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import shlex
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]
from _harness import machine, pg_database, write_report  # noqa: E402
from fix_payments import MODES, Misbehaviour, Outcome, Scenario, run_scenario  # noqa: E402
from fix_tools import Zygote  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("LANGGRAPH_RECALL_SECRET", secrets.token_hex(32))


HEAD = [
    "run",
    "database",
    "mode",
    "orders",
    "kills (random + after charge)",
    "answers dropped",
    "orders charged twice",
    "left in doubt",
    "charges",
    "key replays",
    "seconds",
]


def _row(run: int, o: Outcome) -> list[str]:
    return [
        str(run),
        o.backend,
        o.mode,
        str(o.orders),
        f"{o.kills_random} + {o.kills_by_api}",
        str(o.fates.get("drop", 0)),
        f"**{o.charged_twice}**",
        "-" if o.mode == "plain" else f"**{o.in_doubt}**",
        str(o.charges),
        str(o.replays),
        f"{o.seconds:.0f}",
    ]


def _table(runs: list[tuple[int, Outcome]]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(_row(run, o)) + " |" for run, o in runs]
    return "\n".join(lines)


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo} to {hi}"


def _summary(runs: list[tuple[int, Outcome]], modes: list[str]) -> str:
    """One line per mode over every run and database: the figures for the README."""
    lines = [
        "| mode | runs | orders per run | kills per run | orders charged twice | left in doubt |",
        "|---|---|---|---|---|---|",
    ]
    for mode in modes:
        outs = [o for _, o in runs if o.mode == mode]
        if not outs:
            continue
        doubt = "-" if mode == "plain" else f"**{_span([o.in_doubt for o in outs])}**"
        lines.append(
            f"| {mode} | {len(outs)} ({', '.join(sorted({o.backend for o in outs}))}) | "
            f"{_span([o.orders for o in outs])} | "
            f"{_span([o.kills_random + o.kills_by_api for o in outs])} | "
            f"**{_span([o.charged_twice for o in outs])}** | {doubt} |"
        )
    return "\n".join(lines)


def _details(runs: list[tuple[int, Outcome]]) -> str:
    lines = [
        "| run | database | mode | extra charges after a lost answer (client retry, no key) | "
        "extra charges after a crash (call ran again) | calls sent again after a crash | "
        "of which answered from the key | actions done | in doubt: charged / not charged | "
        "worker run errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, o in runs:
        durable = o.mode != "plain"
        errors = sorted({e[2].split(":")[0][:40] for e in o.worker_errors})
        uncharged = len(set(o.in_doubt_orders) & set(o.not_charged))
        lines.append(
            f"| {run} | {o.backend} | {o.mode} | {o.extra_charges.get('retry', 0)} | "
            f"{o.extra_charges.get('rerun', 0)} | {o.reruns if durable else '-'} | "
            f"{o.rerun_replays if durable else '-'} | {o.done if durable else '-'} | "
            f"{f'{o.in_doubt - uncharged} / {uncharged}' if durable else '-'} | "
            f"{len(o.worker_errors)}{' (' + ', '.join(errors) + ')' if errors else ''} |"
        )
    return "\n".join(lines)


def _violations(o: Outcome) -> list[str]:
    found = []
    if o.finished != o.orders:
        found.append(f"{o.orders - o.finished} orders never finished")
    if o.mode != "plain" and o.charged_twice:
        found.append(f"{o.charged_twice} orders charged twice")
    if o.mode == "external" and o.reruns:
        found.append(f"{o.reruns} external calls sent again after a crash")
    if o.mode == "idempotent" and (o.in_doubt or o.charges != o.orders):
        found.append(f"{o.in_doubt} left in doubt, {o.charges} charges for {o.orders} orders")
    if o.unexpected_exits:
        found.append(f"workers exited with {o.unexpected_exits}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=1, help="runs of every database and mode")
    parser.add_argument("--drop", type=float, default=0.2, help="share of answers lost")
    parser.add_argument("--delay", type=float, default=0.25, help="share of answers delayed")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "crash_payments.md"))
    args = parser.parse_args()

    kills = max(1, args.orders // 12)
    scenario = Scenario(
        orders=args.orders,
        workers=args.workers,
        random_kills=kills,
        kill_every_s=(0.2, 0.9),
        misbehaviour=Misbehaviour(
            drop=args.drop, delay=args.delay, kill=0.1, kill_budget=kills, seed=4
        ),
        lease_ttl=2.0,
        timeout=1800.0,
    )
    modes = [m for m in args.modes.split(",") if m]
    backends = ["sqlite"] + ([] if args.no_pg else ["postgres"])
    runs: list[tuple[int, Outcome]] = []
    zygote = Zygote()
    try:
        for run in range(args.repeat):
            # Each repeat draws other kill moments and other answers to lose.
            this = dataclasses.replace(
                scenario,
                seed=scenario.seed + run,
                misbehaviour=dataclasses.replace(scenario.misbehaviour, seed=4 + run),
            )
            for backend in backends:
                for mode in modes:
                    with tempfile.TemporaryDirectory() as work:
                        if backend == "sqlite":
                            target = os.path.join(work, "recall.db")
                            out = run_scenario(zygote, target, mode, work, this, backend=backend)
                        else:
                            with pg_database(args.pg, "recall_crash") as dsn:
                                out = run_scenario(zygote, dsn, mode, work, this, backend=backend)
                    runs.append((run + 1, out))
                    print(
                        f"run {run + 1} {backend:8} {mode:10} charged twice {out.charged_twice:3}"
                        f"  in doubt {out.in_doubt:3}  kills {out.kills_random}+"
                        f"{out.kills_by_api}  {out.seconds:.0f}s",
                        flush=True,
                    )
    finally:
        zygote.close()

    command = "python benchmarks/crash_payments.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""
    )
    intro = f"""
{args.orders} orders, {args.workers} worker processes, on each database, in three modes.
The payment API (a separate local process) commits every charge before answering, honours
`Idempotency-Key`, loses {args.drop:.0%} of its answers (charges, then closes the connection
without replying), delays {args.delay:.0%} (charges, then waits 0.1-0.6 s), and SIGKILLs the
calling worker right after charging it, before any answer (10% of new charges, at most
{kills} per run). A supervisor SIGKILLs up to {kills} more workers at random moments and
restarts every dead worker at once; the order it was running goes back to the queue and is
resumed by whichever worker takes it next (lease 2 s). The charge tool's client re-sends a
lost answer's request (with the call's `Idempotency-Key` when it has one), as payment SDKs do.
Each order is a scripted agent (`agent_id` = order id) that calls `charge(order_id, amount)`
once.

- **plain**: LangGraph's `ToolNode`, no idempotency key (a plain ToolNode has none to give).
- **external**: `DurableToolNode(..., classes={{"charge": "external"}})`: never re-run blindly.
- **idempotent**: `classes={{"charge": "idempotent"}}`: a call a crash left open is re-run with
  the same key.
"""
    sections = [
        ("Summary", _summary(runs, modes)),
        ("Every run", _table(runs)),
        ("Where the extra charges came from", _details(runs)),
        (
            "Reading it",
            """
- *kills*: random SIGKILLs by the supervisor + SIGKILLs by the API right after a charge (a
  random kill scheduled after the last order finished does not happen).
- *left in doubt*: actions still open at the end: the charge may or may not have happened and
  langgraph-recall did not guess; the model was told the outcome is unknown, and
  `langgraph-recall actions AGENT --open` / `resolve` lists and settles them. Every kill the API
  made after a charge leaves one; a random kill between the intent and the request leaves one
  that was not charged.
- *key replays*: requests the API answered from a key it already knew, charging nothing (lost
  answers re-sent by the client, and idempotent calls re-run after a crash).
""",
        ),
    ]
    write_report(
        args.out,
        "Payment crash test: orders charged twice, orders left in doubt",
        command,
        sections,
        intro=intro,
        about=machine(
            ["langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"]
        ),
    )
    print(f"wrote {args.out}")
    bad = [f"run {r} {o.backend} {o.mode}: {v}" for r, o in runs for v in _violations(o)]
    for line in bad:
        print("VIOLATION", line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
