"""Resume from records, in real processes killed with SIGKILL, in all three graph styles.

One agent works through a six-step task (working state, pointers, 10,000-character results
stored as outputs, a real side effect per step):

1. a process on thread A is killed inside step 3, right after its side effect;
2. a new process resumes thread A (async), sees step 3 in doubt, checks it instead of redoing
   it, and is killed inside step 5;
3. a new process starts thread B for the same agent and finishes from the briefing alone.

Every step's side effect happens exactly once; on thread A no turn reaches the model twice;
on thread B the model is given the goal, progress, pointers, the in-doubt call first, and the
last turns (large outputs as references).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fix_agents import GOAL, STEPS, STYLES, read_effects, read_seen, repeated_turns
from langchain_core.messages import HumanMessage

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.slow


def _run(job: dict[str, object]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "fix_agents.py"), json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def _briefing(model_input: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in model_input if m["type"] == "system")


def _repeated_turns(model_input: list[dict[str, str]]) -> list[str]:
    """Marks of turns (results, tasks, replies) that occur more than once in one model input."""
    return repeated_turns([HumanMessage(m["content"]) for m in model_input])


# Each style on one backend and create_agent on both (the in-process suites run every style on
# both): three fresh interpreters per case, so the matrix is kept to what adds coverage.
MATRIX = [
    ("react", "sqlite"),
    ("custom", "postgres"),
    ("middleware", "sqlite"),
    ("middleware", "postgres"),
]
assert {style for style, _ in MATRIX} == set(STYLES)


@pytest.mark.parametrize(("style", "backend"), MATRIX, indirect=["backend"])
def test_killed_agent_resumes_on_same_and_new_thread_without_redoing_steps(
    style: str, store_target: str, tmp_path: object
) -> None:
    seen, effects = str(tmp_path) + "/seen.jsonl", str(tmp_path) + "/effects.txt"
    base = {
        "style": style,
        "target": store_target,
        "agent": "billing",
        "seen": seen,
        "effects": effects,
    }

    first = _run({**base, "thread": "A", "kill_at": 3})
    assert first.returncode == -9, first.stderr[-3000:]
    assert read_effects(effects) == [1, 2, 3]
    pids = [r["pid"] for r in read_seen(seen)]

    same = _run({**base, "thread": "A", "resume": True, "use_async": True, "kill_at": 5})
    assert same.returncode == -9, same.stderr[-3000:]
    assert read_effects(effects) == [1, 2, 3, 4, 5]  # step 3 was checked, not run again
    same_inputs = [r["input"] for r in read_seen(seen) if r["pid"] not in pids]
    assert same_inputs
    for model_input in same_inputs:
        assert _repeated_turns(model_input) == []
    pids += [r["pid"] for r in read_seen(seen)]

    new = _run({**base, "thread": "B", "text": "TASK-1: continue."})
    assert new.returncode == 0, new.stderr[-3000:]
    assert read_effects(effects) == list(range(1, STEPS + 1))  # each step exactly once
    with open(seen + ".final") as f:
        assert f.read().strip() == f"All {STEPS} steps done."

    new_inputs = [r["input"] for r in read_seen(seen) if r["pid"] not in pids]
    given = _briefing(new_inputs[0])
    # What the model was given on the new thread, in priority order.
    assert given.index("## Unconfirmed calls") < given.index("## Working state")
    assert "- work(step=5) [action" in given
    assert f"goal: {GOAL}" in given
    assert "progress: done through step 4" in given
    assert "- step-4: /out/step-4.txt" in given
    turns = given[given.index("## Earlier turns") :]
    # The last turn, printed last, its call carrying its outcome.
    assert turns.rstrip().endswith(
        "called work(step=5) -> in doubt: do not call it again; it is settled by a resolver or a person"
    )
    assert 'fetch_output(ref="out-' in turns and "." * 200 not in turns  # outputs by reference
    assert [m["content"] for m in new_inputs[0] if m["type"] == "human"] == ["TASK-1: continue."]
    for model_input in new_inputs:
        assert _repeated_turns(model_input) == []
