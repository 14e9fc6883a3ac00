#!/usr/bin/env python
"""Remove each guard of the durable tool path in turn and show that a test fails.

For every guard below, the check copies the package and its tests to a temporary folder (the
working tree is never touched: other people may be running it), replaces one exact piece of
source with a version that lacks the guard, runs the tests that specify that guard, and
expects them to FAIL. A guard whose removal no test notices is reported as SURVIVED, and the
script exits 1. The tests first run unmodified and must pass.

    python scripts/mutation_check.py            # all guards
    python scripts/mutation_check.py --only digest
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    guard: str
    path: str  # relative to the repository
    find: str  # must occur exactly once
    replace: str
    tests: tuple[str, ...]  # pytest node ids or "file::-k expression"


MUTATIONS = [
    Mutation(
        "claim",
        "claim uniqueness: a call that ran (or is running) is never claimed again",
        "langgraph_recall/store/_records.py",
        '    if prev.status == "open":\n'
        '        return Claim("in_doubt", prev)\n'
        '    if prev.status in ("done", "failed"):\n'
        "        return Claim(prev.status, prev)\n",
        "    pass  # every claim inserts a new attempt\n",
        (
            "tests/test_tools_calls.py::test_replaying_a_finished_call_returns_its_result_without_running",
            "tests/test_tools_parallel.py::test_finished_sibling_runs_once_when_another_call_interrupts",
        ),
    ),
    Mutation(
        "in_doubt",
        "in-doubt refusal: an external call left open by a crash is not run again",
        "langgraph_recall/tools/_durable.py",
        '            if klass != "external" or self.resolver is None:\n'
        "                return in_doubt_message(action, call)\n",
        '            if klass != "external" or self.resolver is None:\n'
        "                return (\n"
        "                    yield from self._run(store, request, handler, action, args, verdict, agent_id)\n"
        "                )\n",
        (
            "tests/test_tools_calls.py::test_in_doubt_external_call_is_not_run_and_the_model_is_told",
        ),
    ),
    Mutation(
        "digest",
        "digest comparison: an approval runs only the arguments it was given for",
        "langgraph_recall/store/_records.py",
        '    if not hmac.compare_digest(a.args_digest or "", args_digest):\n',
        "    if False:\n",
        (
            "tests/test_tools_approval.py::test_edited_saved_call_is_refused_and_nothing_runs",
            "tests/test_tools_approval.py::test_approval_for_another_digest_is_refused",
        ),
    ),
    Mutation(
        "spend",
        "single spend: one approval is used by one execution",
        "langgraph_recall/store/_records.py",
        "    if not spent:\n        raise ApprovalMismatch(\n",
        "    if False:\n        raise ApprovalMismatch(\n",
        ("tests/test_tools_approval.py::test_approval_is_spent_by_one_attempt",),
    ),
    Mutation(
        "durability",
        "durability wait: the AI message is saved before its call runs",
        "langgraph_recall/tools/_durable.py",
        "        target = _barrier.target_of(config, runtime, name)",
        "        target = None",
        (
            "tests/test_tools_calls.py::test_tool_waits_until_the_ai_message_that_asked_for_it_is_saved",
        ),
    ),
]


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in ("langgraph_recall", "tests"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _env(dest: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(dest), "PYTHONDONTWRITEBYTECODE": "1"}


def _pytest(dest: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            cmd, cwd=dest, env=_env(dest), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, "timed out"
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    return done.returncode, tail


def _check_imports_copy(dest: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import langgraph_recall; print(langgraph_recall.__file__)"],
        cwd=dest,
        env=_env(dest),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not out.startswith(str(dest)):
        raise SystemExit(f"the copy is not the package under test ({out}); aborting")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="guard name(s) to check")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    with tempfile.TemporaryDirectory(prefix="recall-mutation-") as tmp:
        dest = Path(tmp)
        _copy_tree(dest)
        _check_imports_copy(dest)
        every_test = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        code, tail = _pytest(dest, every_test, args.timeout)
        print(f"unmodified: {'pass' if code == 0 else 'FAIL'} ({tail})")
        if code != 0:
            print("the tests must pass before guards are removed; fix that first")
            return 1
        survived = []
        for m in chosen:
            target = dest / m.path
            original = target.read_text()
            if original.count(m.find) != 1:
                print(
                    f"{m.name:11s} cannot apply: the guarded source changed ({m.path}); update MUTATIONS"
                )
                survived.append(m.name)
                continue
            target.write_text(original.replace(m.find, m.replace))
            start = time.monotonic()
            try:
                code, tail = _pytest(dest, m.tests, args.timeout)
            finally:
                target.write_text(original)
            verdict = "killed" if code != 0 else "SURVIVED"
            if code == 0:
                survived.append(m.name)
            print(
                f"{m.name:11s} {verdict:9s} {time.monotonic() - start:5.1f}s  {m.guard}  [{tail}]"
            )
        if survived:
            print(f"guards no test notices: {', '.join(survived)}")
            return 1
        print("every guard is specified by a test that fails without it")
        return 0


if __name__ == "__main__":
    sys.exit(main())
