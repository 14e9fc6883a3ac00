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


def test_every_guard_of_the_mutation_check_still_matches_its_source() -> None:
    # scripts/mutation_check.py removes each guard by replacing an exact piece of source; one
    # that no longer matches checks nothing, and would be noticed only by a full run (40+ min).
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mutation_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    stale = [
        m.name for m in mutation_check.MUTATIONS if (ROOT / m.path).read_text().count(m.find) != 1
    ]
    assert stale == [], f"update these guards in scripts/mutation_check.py: {stale}"
    assert len({m.name for m in mutation_check.MUTATIONS}) == len(mutation_check.MUTATIONS)


def test_pytest_asyncio_is_given_the_fixture_loop_scope() -> None:
    # Unset, pytest-asyncio warned on every run that its default will change (a
    # PytestDeprecationWarning printed before any test, easy to take for a real problem).
    done = subprocess.run(
        [sys.executable, "-W", "always", "-m", "pytest", "--collect-only", "-q"]
        + ["-p", "no:cacheprovider", "tests/test_public_api.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "asyncio_default_fixture_loop_scope" not in done.stdout + done.stderr
