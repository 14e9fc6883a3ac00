"""The house checks run with the suite: ruff (lint and format) and mypy on the package."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_is_clean() -> None:
    done = _run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean() -> None:
    done = _run("ruff", "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean_on_the_package() -> None:
    done = _run("mypy", "langgraph_recall")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ci_runs_the_readmes_second_quick_start_command() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2, commands  # install and demo; install and test
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    # CI's copy may only add pip's -q: anything else would run something weaker than users do.
    assert commands[1].replace("pip install -e", "pip install -q -e") in ci
