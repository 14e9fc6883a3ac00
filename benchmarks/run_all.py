"""Run every benchmark script in ``benchmarks/`` and rewrite ``benchmarks/results/SUMMARY.md``.

Each script (``bench_*.py``, ``crash_*.py``...) runs in its own process, one after the other
(they must not compete for the machine), and writes its own results file under
``benchmarks/results/``. The summary then
collects, for every results file, its title, the command that reproduces it and its targets
section, and says which scripts failed (with the end of their error output).

    python benchmarks/run_all.py                  # everything, each script's defaults
    python benchmarks/run_all.py --no-pg          # SQLite only
    python benchmarks/run_all.py --only loop,plugin --rounds 3
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SUMMARY = os.path.join(RESULTS, "SUMMARY.md")
# Written by people, not by a script: linked from the summary, never parsed for figures.
HAND_WRITTEN = ("SUMMARY.md", "profile.md")


@dataclass
class Outcome:
    script: str
    seconds: float
    returncode: int
    tail: str


def scripts(only: list[str] | None) -> list[str]:
    """Every script in ``benchmarks/`` but this one and the private helpers (``_*.py``)."""
    found = [
        p
        for p in sorted(glob.glob(os.path.join(HERE, "*.py")))
        if not os.path.basename(p).startswith("_") and os.path.basename(p) != "run_all.py"
    ]
    if only:
        found = [p for p in found if _stem(p) in only or os.path.basename(p)[:-3] in only]
    return found


def _stem(path: str) -> str:
    name = os.path.basename(path)[:-3]
    return name[len("bench_") :] if name.startswith("bench_") else name


def accepted(script: str, extra: list[str]) -> list[str]:
    """The options of ``extra`` that ``script`` declares (not every script has ``--rounds``)."""
    with open(script) as f:
        source = f.read()
    out: list[str] = []
    i = 0
    while i < len(extra):
        option = extra[i]
        takes_value = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        if f'"{option}"' in source:
            out += extra[i : i + 2] if takes_value else [option]
        i += 2 if takes_value else 1
    return out


def run(script: str, extra: list[str]) -> Outcome:
    """Run one script to the end; its output passes through, its stderr tail is kept."""
    name = os.path.basename(script)
    print(f"== {name} {' '.join(extra)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, script, *extra],
        cwd=os.path.dirname(HERE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seconds = time.monotonic() - started
    tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
    print(f"   {name}: exit {proc.returncode} after {seconds:.0f}s", file=sys.stderr, flush=True)
    return Outcome(name, seconds, proc.returncode, tail)


def section(text: str, pattern: str) -> str | None:
    """The body of the first ``## `` section whose heading matches ``pattern``."""
    parts = re.split(r"^## ", text, flags=re.M)
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        if re.search(pattern, heading, flags=re.I):
            return f"**{heading.strip()}**\n\n{body.strip()}"
    return None


def written(path: str) -> str:
    """When the results file was written: its last commit's date when the file is as
    committed (a fresh clone gives every file the clone's time), else its own time."""
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(path)))
    try:
        unchanged = (
            subprocess.run(
                ["git", "diff", "--quiet", "HEAD", "--", path], cwd=RESULTS, check=False
            ).returncode
            == 0
        )
        if unchanged:
            out = subprocess.run(
                ["git", "log", "-1", "--format=%cd", "--date=format:%Y-%m-%d %H:%M", "--", path],
                cwd=RESULTS,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            if out:
                return f"{out} (its last commit)"
    except OSError:  # no git: the file's own time
        pass
    return stamp


def measured_on(text: str) -> str:
    """ ", on host X" from the file's Machine line (hosts of one class differ in speed)."""
    found = re.search(r"Machine: Linux-[^-]+-([a-z]+-v\d+)", text)
    return f", on host `{found.group(1)}`" if found else ""


def reproduce(text: str) -> str | None:
    m = re.search(r"Reproduce with:\s*```\s*\n(.*?)\n```", text, flags=re.S)
    return m.group(1).strip() if m else None


def summary(outcomes: list[Outcome], command: str) -> str:
    lines = [
        "# Benchmark summary",
        "",
        "Rewritten by `benchmarks/run_all.py`; each section below comes from one results file "
        "(open it for every figure, the machine and the durability setting of each). The "
        "machine is shared and small (2 cores): compare figures within one file, where they "
        "were measured side by side, not across files.",
        "",
        "Last run:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    if outcomes:
        lines += ["| script | exit | seconds |", "|---|---|---|"]
        lines += [f"| {o.script} | {o.returncode} | {o.seconds:.0f} |" for o in outcomes]
        lines.append("")
    for o in outcomes:
        if o.returncode != 0:
            lines += [f"**{o.script} failed** (exit {o.returncode}):", "", "```", o.tail, "```", ""]
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.md"))):
        name = os.path.basename(path)
        if name in HAND_WRITTEN:
            continue
        with open(path) as f:
            text = f.read()
        title = text.splitlines()[0].lstrip("# ").strip() if text else name
        lines += [f"## [{title}]({name})", "", f"Written {written(path)}{measured_on(text)}."]
        cmd = reproduce(text)
        if cmd:
            lines += ["", f"Reproduce: `{cmd}`"]
        targets = section(text, r"target")
        if targets:
            lines += ["", targets]
        lines.append("")
    if os.path.exists(os.path.join(RESULTS, "profile.md")):
        lines += [
            "## [Where the time goes](profile.md)",
            "",
            "The profile of the langgraph-recall side of the tool loop, with proposals ranked by "
            "gain.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", help="comma-separated names: store,loop,plugin (bench_<name>.py) or file stems"
    )
    ap.add_argument("--no-pg", action="store_true", help="pass --no-pg to every script")
    ap.add_argument("--rounds", type=int, help="pass --rounds N to every script that takes it")
    ap.add_argument(
        "--summary-only", action="store_true", help="rewrite SUMMARY.md from the results files"
    )
    args = ap.parse_args(argv)
    extra = (["--no-pg"] if args.no_pg else []) + (
        ["--rounds", str(args.rounds)] if args.rounds else []
    )
    command = "python benchmarks/run_all.py " + " ".join(argv if argv is not None else sys.argv[1:])
    outcomes = []
    if not args.summary_only:
        for script in scripts(args.only.split(",") if args.only else None):
            outcomes.append(run(script, accepted(script, extra)))
    os.makedirs(RESULTS, exist_ok=True)
    with open(SUMMARY, "w") as f:
        f.write(summary(outcomes, command.strip()) + "\n")
    print(f"wrote {os.path.relpath(SUMMARY)}", file=sys.stderr)
    if any(o.returncode != 0 for o in outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
