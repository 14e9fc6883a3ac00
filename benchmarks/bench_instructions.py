"""The tool loop in instructions: callgrind counts per loop, steady where wall time is not.

On this shared 2-core machine the wall and CPU time of a 60 ms LangGraph loop move by +-15%
between loops and rounds, more than the fraction of a millisecond langgraph-recall adds per tool
call. ``valgrind --tool=callgrind`` counts the user-space instructions a process executes, and
the same program counted twice differs by well under 1%. For each subject this script runs two
child processes under callgrind, each building the subject and running 2 warm-up loops, then
``0`` and ``K`` timed loops; the difference divided by ``K`` is the subject's instructions per
loop, with the imports, setup and teardown cancelled out.

Subjects (SQLite, WAL + synchronous=NORMAL, ``durability="sync"``, built with the functions of
``bench_loop.py`` and ``bench_plugin.py``):

- the 20-call loop: plain ``ToolNode`` on the bare ``SqliteSaver``; call4agents' adapter with
  its ledger as shipped (synchronous=FULL) and patched to NORMAL; langgraph-recall
  (``store.checkpointer()`` + ``DurableToolNode``) with the tool classed ``external`` and
  ``idempotent``; and two that split langgraph-recall's cost: the tool classed ``pure`` (the
  node wrapper without a durable call) and plain ``ToolNode`` on ``store.checkpointer()`` (the
  checkpointer wrapper alone); and ``ToolNode`` with DurableToolNode's dispatch (a lone call on
  the node's thread, no thread pool: ``LoneCallInline``) on the bare saver, the dispatch alone;
- the 10-step loop of ``bench_plugin.py``: the bare saver and ``ToolNode`` vs the whole plugin
  (checkpointer, ``DurableToolNode``, a briefing before every model call).

The plain loop is also timed without valgrind in the same run, which turns instructions into an
estimate in microseconds. Callgrind sees user space only: kernel work (writes, fsyncs), lock
waits and I/O latency are not in these counts, so they complement ``loop.md``'s wall and CPU
figures; they do not replace them.

    python benchmarks/bench_instructions.py               # every subject, K=5
    python benchmarks/bench_instructions.py --loops 3 --only plain,recall-external

Needs ``valgrind`` on the PATH (``apt-get install valgrind``) and call4agents 0.5.0 for its
subjects.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_loop import TARGET_MS  # noqa: E402

CALLS = 20  # tool calls per loop of bench_loop.py
STEPS = 10  # tool calls per loop of bench_plugin.py
WARMUP = 2
# A fixed key and hash seed: the children must do the same work each time they are counted.
CHILD_ENV = {"PYTHONHASHSEED": "0", "LANGGRAPH_RECALL_SECRET": "0" * 64}


@dataclass(frozen=True)
class Subject:
    key: str
    label: str
    loop: str  # "20-call" or "10-step"


SUBJECTS = [
    Subject("plain", "ToolNode + bare saver", "20-call"),
    Subject(
        "inline", "ToolNode, lone call inline (DurableToolNode's dispatch) + bare saver", "20-call"
    ),
    Subject("c4a", "call4agents adapter + bare saver (ledger FULL, as shipped)", "20-call"),
    Subject("c4a-normal", "call4agents adapter + bare saver (ledger patched to NORMAL)", "20-call"),
    Subject("recall-external", "langgraph-recall, DurableToolNode, tool 'external'", "20-call"),
    Subject("recall-idempotent", "langgraph-recall, DurableToolNode, tool 'idempotent'", "20-call"),
    Subject("recall-pure", "langgraph-recall, DurableToolNode, tool 'pure'", "20-call"),
    Subject("recall-toolnode", "plain ToolNode on store.checkpointer()", "20-call"),
    Subject("plugin-bare", "bare saver + ToolNode (bench_plugin)", "10-step"),
    Subject("plugin-whole", "whole plugin (bench_plugin)", "10-step"),
]
BY_KEY = {s.key: s for s in SUBJECTS}


# --- the child: one subject, WARMUP + n loops ----------------------------------------------------


def build(key: str, tmp: str, stack: ExitStack, scale: float = 1.0) -> Callable[[], object]:
    """One loop of subject ``key``, its databases under ``tmp``; closed by ``stack``. ``scale``
    stretches the lease's ttl (see ``stretch_time``)."""
    from bench_loop import (
        add_tool,
        c4a_ledger,
        c4a_tool,
        loop_graph,
        run_once,
        sqlite_saver,
        with_ledger,
    )
    from langgraph.prebuilt import ToolNode

    from langgraph_recall import DurableToolNode, RecallStore
    from langgraph_recall.tools._node import LoneCallInline

    calls = STEPS if BY_KEY[key].loop == "10-step" else CALLS

    def bare() -> Any:
        saver = sqlite_saver(os.path.join(tmp, "bare.db"), "NORMAL")
        stack.callback(saver.conn.close)  # type: ignore[attr-defined]
        return saver

    def store() -> RecallStore:
        return stack.enter_context(
            RecallStore.open(os.path.join(tmp, "recall.db"), durability="process")
        )

    if key == "plain" or key == "plugin-bare":
        graph = loop_graph(ToolNode([add_tool()]), bare(), calls=calls)
        return lambda: run_once(graph)
    if key == "inline":
        graph = loop_graph(LoneCallInline([add_tool()]), bare(), calls=calls)
        return lambda: run_once(graph)
    if key in ("c4a", "c4a-normal"):
        ledger = c4a_ledger(os.path.join(tmp, "c4a", "ledger.sqlite"), normal=key == "c4a-normal")
        graph = loop_graph(ToolNode([c4a_tool()]), bare(), calls=calls)
        return lambda: with_ledger(ledger, lambda: run_once(graph))
    if key.startswith("recall-"):
        s = store()
        node: Any = (
            ToolNode([add_tool()])
            if key == "recall-toolnode"
            else DurableToolNode([add_tool()], classes={"add": key.split("-", 1)[1]})
        )
        graph = loop_graph(node, s.checkpointer(lease_ttl=60.0 * scale), calls=calls, store=s)
        return lambda: run_once(graph)
    if key == "plugin-whole":
        from bench_plugin import briefed_agent

        s = store()
        graph = loop_graph(
            DurableToolNode([add_tool()], classes={"add": "external"}),
            s.checkpointer(lease_ttl=60.0 * scale),
            calls=calls,
            store=s,
            agent=briefed_agent,
        )
        return lambda: run_once(graph)
    raise KeyError(key)


# (module, constant): seconds langgraph-recall waits on a clock, stretched by ``--time-scale``.
CLOCKED = [
    ("langgraph_recall.checkpoint._recording", "RECORD_EVERY"),
    ("langgraph_recall.checkpoint._recording", "LINGER"),
]


def stretch_time(scale: float) -> list[str]:
    """Multiply langgraph-recall's clock-driven constants by ``scale``; returns those done.

    Valgrind runs the loop ~50x slower, but the clock does not slow down: a run that natively
    hands its messages to the recorder once, at its end, would under valgrind also hand them
    over every ``RECORD_EVERY`` (0.5 s) mid-run, and count writes the native loop never does.
    Stretching the constants by the slowdown keeps the counted loop on the native path.
    """
    import importlib

    done = []
    for module, name in CLOCKED:
        owner = importlib.import_module(module)
        if isinstance(getattr(owner, name, None), int | float):
            setattr(owner, name, getattr(owner, name) * scale)
            done.append(f"{name}")
        else:  # renamed or gone: say so rather than count the unstretched loop silently
            print(f"bench_instructions: {module}.{name} not found, not stretched", file=sys.stderr)
    return done


def child(key: str, loops: int, scale: float) -> None:
    if scale != 1.0:
        stretch_time(scale)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        loop = build(key, tmp, stack, scale)
        for _ in range(WARMUP + loops):
            loop()


# --- the parent: count, time, report -------------------------------------------------------------


def interpreter() -> str:
    """The real interpreter binary: ``sys.executable`` may be a shim script, and valgrind on a
    script would count the shell that runs it."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def count(key: str, loops: int, scale: float) -> int:
    """Instructions callgrind collected for subject ``key`` with ``loops`` timed loops."""
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        interpreter(),
        os.path.abspath(__file__),
        "--child",
        key,
        str(loops),
        "--time-scale",
        str(scale),
    ]
    env = {**os.environ, **CHILD_ENV}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=os.path.dirname(HERE))
    found = re.findall(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or not found:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"{key} x{loops}: exit {done.returncode}\n{tail}")
    return int(found[-1])


def native_time(loops: int) -> tuple[float, float]:
    """The plain loop without valgrind: median CPU seconds per loop (process_time: user +
    system) and median user seconds per loop (getrusage), the rate's denominator: callgrind's
    counts are user space only."""
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        loop = build("plain", tmp, stack)
        for _ in range(3):
            loop()
        cpu: list[float] = []
        user: list[float] = []
        for _ in range(loops):
            u0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.process_time()
            loop()
            cpu.append(time.process_time() - c0)
            user.append(resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0)
    return statistics.median(cpu), statistics.median(user)


@dataclass
class Run:
    """What the parent measured: counts per (subject, scale), the native timing, the settings."""

    loops: int
    scale: float
    raw: dict[tuple[str, float], tuple[int, int]]  # (collected at 0 loops, at ``loops``)
    cpu_s: float  # the plain loop natively: median CPU seconds per loop (user + system)
    user_s: float  # and user seconds only
    native_loops: int
    seconds: float
    repeat: tuple[str, int, int, int] | None = None  # subject, loops, first count, second

    def per_loop(self, key: str, scale: float | None = None) -> float | None:
        found = self.raw.get((key, self.scale if scale is None else scale))
        return None if found is None else (found[1] - found[0]) / self.loops


def report(run: Run) -> list[tuple[str, str]]:
    plain = run.per_loop("plain")
    # User-space instructions a second, from the plain loop's count and its native user time.
    ips = plain / run.user_s if plain and run.user_s > 0 else None

    def us(instr: float) -> str:
        return f"{instr / ips * 1e6:.1f}" if ips else "-"

    sections: list[tuple[str, str]] = []
    if plain is not None:
        c4a, c4a_n = run.per_loop("c4a"), run.per_loop("c4a-normal")

        def ratio(add: float, base: float | None) -> str:
            return f"{add / ((base - plain) / CALLS):.2f}" if base and base != plain else "-"

        lines = [
            "| subject (20-call loop) | M instructions per loop | added per durable tool call, "
            "k instructions | est. µs per call (user space) | x call4agents' added (FULL, "
            "NORMAL) |",
            "|---|---|---|---|---|",
        ]
        for s in SUBJECTS:
            n = run.per_loop(s.key)
            if s.loop != "20-call" or n is None:
                continue
            if s.key == "plain":
                lines.append(f"| {s.label} | **{n / 1e6:.1f}** | - | - | - |")
                continue
            add = (n - plain) / CALLS
            lines.append(
                f"| {s.label} | **{n / 1e6:.1f}** | **{add / 1e3:.0f}** | {us(add)} | "
                f"{ratio(add, c4a)}, {ratio(add, c4a_n)} |"
            )
        external = run.per_loop("recall-external")
        if external is not None:
            add = (external - plain) / CALLS
            lines += [
                "",
                f"Issue 7's targets on SQLite: under {TARGET_MS['sqlite']} ms added per durable "
                "tool call (wall time, `loop.md`) and at most 0.17x call4agents' added. Here, "
                f"langgraph-recall 'external': {add / 1e3:.0f} k instructions, an estimated "
                f"{us(add)} µs of user-space CPU alone, and "
                f"{ratio(add, c4a)}x / {ratio(add, c4a_n)}x call4agents' added instructions "
                "(FULL / NORMAL ledger; its fsyncs are kernel time, not counted here).",
            ]
        sections.append(
            ("Added instructions per durable tool call (issue 7 targets)", "\n".join(lines))
        )
        split = []
        for a, b, what in (
            ("inline", "plain", "DurableToolNode's dispatch: a lone call inline, no thread pool"),
            ("recall-toolnode", "plain", "checkpointer wrapper (lease, fencing, recording)"),
            ("recall-pure", "recall-toolnode", "DurableToolNode wrapper, no durable call"),
            ("recall-external", "recall-pure", "durable call, 'external' (claim, end)"),
            ("recall-idempotent", "recall-pure", "durable call, 'idempotent'"),
        ):
            na, nb = run.per_loop(a), run.per_loop(b)
            if na is not None and nb is not None:
                d = (na - nb) / CALLS
                split.append(f"| {what} | {a} - {b} | {d / 1e3:.0f} | {us(d)} |")
        if split:
            sections.append(
                (
                    "Where langgraph-recall's instructions go",
                    "| part | difference of subjects | k instructions per tool call | est. µs "
                    "per call |\n|---|---|---|---|\n" + "\n".join(split),
                )
            )
    bare, whole = run.per_loop("plugin-bare"), run.per_loop("plugin-whole")
    if bare and whole:
        sections.append(
            (
                "The whole plugin, 10-step loop, durability sync",
                "| subject | M instructions per loop |\n|---|---|\n"
                f"| {BY_KEY['plugin-bare'].label} | {bare / 1e6:.1f} |\n"
                f"| {BY_KEY['plugin-whole'].label} | {whole / 1e6:.1f} |\n"
                f"| **plugin / bare** | **{whole / bare:.3f}x** (issue 7's target, on wall time: "
                "< 1.3x) |",
            )
        )
    stretched = run.per_loop("recall-external")
    unstretched = run.per_loop("recall-external", 1.0)
    if run.scale != 1.0 and stretched and unstretched and plain:
        sections.append(
            (
                "Clock-driven work under valgrind",
                f"Valgrind slows the loop ~50x but not the clock, so the children stretch "
                f"langgraph-recall's clock-driven constants ({', '.join(n for _, n in CLOCKED)}; "
                f"the lease ttl) by `--time-scale {run.scale:g}` to keep the counted loop on its "
                "native path. The control, langgraph-recall 'external' counted unstretched: "
                f"**{unstretched / 1e6:.1f}** M per loop, "
                f"{(unstretched - plain) / CALLS / 1e3:.0f} k added per call, against "
                f"{stretched / 1e6:.1f} M and {(stretched - plain) / CALLS / 1e3:.0f} k stretched: "
                "what mid-run hand-overs to the recorder that the native loop does not make "
                "would add to the count.",
            )
        )
    rows = "\n".join(
        f"| {key} | {scale:g} | {a:,} | {b:,} | {(b - a) / run.loops / 1e6:.2f} |"
        for (key, scale), (a, b) in run.raw.items()
    )
    sections.append(
        (
            "Raw counts",
            f"| subject | time scale | collected, {WARMUP} warm-up + 0 loops | collected, "
            f"{WARMUP} warm-up + {run.loops} loops | M per loop |\n|---|---|---|---|---|\n{rows}",
        )
    )
    repeat = ""
    if run.repeat:
        key, n, first, second = run.repeat
        diff = abs(second - first)
        repeat = (
            f"Repeatability, measured in this run: the `{key}` child with {n} loops, counted "
            f"twice, gave {first:,} and {second:,} instructions, {diff:,} apart "
            f"({diff / first:.3%}); a difference that size moves a per-loop figure by "
            f"{diff / run.loops / 1e6:.2f} M and a per-call one by "
            f"{diff / run.loops / CALLS / 1e3:.0f} k.\n\n"
        )
    est = (
        f"The plain loop timed without valgrind in this run ({run.native_loops} loops after 3 "
        f"warm-up): median {run.cpu_s * 1e3:.1f} ms CPU (process_time: user + system) and "
        f"{run.user_s * 1e3:.1f} ms user time per loop"
        + (f", so {ips / 1e9:.2f} G user-space instructions a second. " if ips else ". ")
        + "The µs columns divide instruction counts by that rate: an **estimate**, which assumes "
        "the added code runs at the plain loop's instructions per second (cache behaviour and "
        "the machine's load move that) and leaves out kernel time entirely."
    )
    sections.append(
        (
            "How to read this",
            "Each subject is counted by two child processes under `valgrind --tool=callgrind`, "
            f"two at a time: one runs {WARMUP} warm-up loops and stops, the other the same plus "
            f"{run.loops} loops; (second - first) / {run.loops} is the subject's instructions per "
            "loop (imports, setup and teardown cancel out). Both run with PYTHONHASHSEED=0 and a "
            "fixed LANGGRAPH_RECALL_SECRET. A 20-call loop is one `graph.invoke` on a fresh "
            f'thread: {CALLS} tool calls, {2 * CALLS + 1} supersteps, `durability="sync"`, a '
            f"scripted model; the 10-step loop is bench_plugin's, with {STEPS} calls. SQLite WAL + "
            'synchronous=NORMAL (durability "process") throughout. "Added per durable tool call" '
            f"is (subject - plain) / {CALLS}: everything the subject adds to the loop, including "
            "its per-run work, spread over its tool calls. All threads of the process are counted "
            "(langgraph-recall's recorder and lease renewer too).\n\n"
            "**Callgrind counts user-space instructions only.** Kernel time for writes and "
            "fsyncs, waits for locks and I/O latency are not in these figures: call4agents' FULL "
            "ledger pays an fsync per commit that costs it nothing here. These counts complement "
            "the wall and CPU figures of `loop.md` and `plugin.md`; they do not replace them.\n\n"
            + repeat
            + est
            + f"\n\nThe counting took {run.seconds:.0f} s.",
        )
    )
    return sections


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--child", nargs=2, metavar=("SUBJECT", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--loops", type=int, default=5, help="timed loops K per counted child")
    ap.add_argument("--only", help="comma-separated subjects: " + ",".join(BY_KEY))
    ap.add_argument(
        "--time-scale",
        type=float,
        default=50.0,
        help="stretch langgraph-recall's clock-driven constants by this (valgrind's slowdown)",
    )
    ap.add_argument("--native-loops", type=int, default=30, help="plain loops timed natively")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "instructions.md"))
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.time_scale)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_instructions: valgrind is not installed (apt-get install valgrind)")
    keys = [k.strip() for k in args.only.split(",")] if args.only else list(BY_KEY)
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown:
        sys.exit(f"unknown subjects {unknown}; choose from {', '.join(BY_KEY)}")
    if "plain" not in keys and any(BY_KEY[k].loop == "20-call" for k in keys):
        keys.insert(0, "plain")  # every 20-call figure is relative to it
    command = "python benchmarks/bench_instructions.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    command = command.strip()
    from _harness import machine, write_report
    from bench_loop import about

    before = about()
    # Timed first and alone: the callgrind children take both cores.
    cpu_s, user_s = native_time(args.native_loops)
    started = time.monotonic()
    subjects = [(k, args.time_scale) for k in keys]
    if args.time_scale != 1.0 and "recall-external" in keys:
        subjects.append(("recall-external", 1.0))  # the control: what stretching changes
    jobs = [(k, n, scale) for k, scale in subjects for n in (args.loops, 0)]
    # One child counted a second time: how far the counts repeat, in this run. A subject with
    # background threads (langgraph-recall's) is the least repeatable, so that one if present.
    again = next((j for j in jobs if j[0] == "recall-external"), jobs[0])
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: two children at a time
        done = list(pool.map(lambda job: count(*job), [again, *jobs]))
    counts = dict(zip(jobs, done[1:], strict=True))
    run = Run(
        loops=args.loops,
        scale=args.time_scale,
        raw={(k, s): (counts[(k, 0, s)], counts[(k, args.loops, s)]) for k, s in subjects},
        cpu_s=cpu_s,
        user_s=user_s,
        native_loops=args.native_loops,
        seconds=time.monotonic() - started,
        repeat=(again[0], again[1], counts[again], done[0]),
    )
    after = machine()
    vg = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    sections = report(run)
    heading, body = sections[-1]
    sections[-1] = (
        heading,
        body + f"\n\nLoad before the run: {before.split('load average ')[1].split(';')[0]}; "
        f"after: {after.split('load average ')[1].split(';')[0]} (load moves the µs estimate, "
        "not the counts).",
    )
    write_report(
        args.out,
        "The tool loop in instructions (callgrind)",
        command,
        sections,
        intro="Instructions counted by callgrind, **user space only**: kernel time (writes, "
        "fsyncs), lock waits and I/O latency are not in them. A loop's total repeats to about 2% "
        "between runs (threads interleave differently); the added cost per call, a difference "
        "of two totals, moves by about 10% (792k and 965k for the same code, 2026-12-01). They complement the wall and CPU time of `loop.md` and `plugin.md`, not "
        "replace them. The µs figures are estimates (see the end).",
        about=f"{before}; {vg}; interpreter {interpreter()}",
    )
    print(open(args.out).read())


if __name__ == "__main__":
    main()
