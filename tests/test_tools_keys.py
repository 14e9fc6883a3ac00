"""The idempotency key is identical on every run of the same call, across processes."""

from __future__ import annotations

from collections import defaultdict

import pytest
from fix_tools import Zygote, read_effects, zygotes  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def _step(z: Zygote, target: str, effects: str, flag: str, step: str) -> int:
    z.start(
        "fix_tools:key_worker",
        target=target,
        agent_id="keys",
        effects=effects,
        step=step,
        crash_flag=flag,
    )
    code = z.wait(120)
    assert code is not None
    return code


def test_key_is_identical_across_a_crash_and_across_an_interrupt(
    zygotes,  # noqa: F811 (the fixture)
    store_target,
    store,
    tmp_path,
) -> None:
    effects, flag = str(tmp_path / "e.log"), str(tmp_path / "crashed")
    z = zygotes[0]
    assert _step(z, store_target, effects, flag, "start") == 9  # killed inside `book`
    assert _step(z, store_target, effects, flag, "continue") == 0  # book re-run; confirm asks
    assert _step(z, store_target, effects, flag, "resume") == 0  # confirm answered

    keys: dict[str, set[str]] = defaultdict(set)
    runs: dict[str, set[int]] = defaultdict(set)
    for e in read_effects(effects):
        tool = e["what"].split("-")[0]
        keys[tool].update({e["key"], e["ctx"], e["cfg"]})
        runs[e["what"]].add(e["pid"])
    actions = {a.tool: a for a in store.actions("keys")}
    # Three processes, one key per call, the same through all three channels.
    assert keys == {
        "book": {actions["book"].idempotency_key},
        "confirm": {actions["confirm"].idempotency_key},
    }
    assert (
        len(runs["book"]) == 2
        and len(runs["confirm-asked"]) == 2
        and len(runs["confirm-done"]) == 1
    )
    assert actions["book"].status == "done" and actions["book"].attempt == 1  # re-run, same attempt
    assert (
        actions["confirm"].status == "done" and actions["confirm"].attempt == 2
    )  # after the interrupt
