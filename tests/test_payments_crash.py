"""12 worker processes charge 60 orders through a payment API that misbehaves; workers die.

The payment API is a separate local process (``fix_payments.PaymentAPI``): it commits every
charge before answering, honours idempotency keys, drops 20% of its answers (charges, then
closes the connection), delays 25%, and SIGKILLs the calling worker right after charging it,
before any answer, up to 5 times per run. A supervisor keeps 12 workers busy on a shared order
queue, SIGKILLs 5 more at random moments and restarts every dead one; whichever worker takes
an order next resumes it (the lease, 2 s, keeps it to one worker at a time).

Each order is a scripted agent (``agent_id`` = order id) that calls ``charge(order_id,
amount)`` once. The same scenario runs three ways, on SQLite and on PostgreSQL:

- a plain ``ToolNode`` (no idempotency key): orders get charged twice, both by the client's
  retry of a lost answer and by the re-run of a call a crash interrupted. This is the baseline
  that shows the kills land where it matters;
- ``DurableToolNode`` with ``charge`` external: no order is charged twice and no call is ever
  sent again after a crash; every order the API killed a worker for is left in doubt;
- ``charge`` idempotent: no order is charged twice and none is left in doubt: the calls a
  crash left open are sent again with the same key and the API charges nothing the second time.

Full size (300 orders) and the figures: ``benchmarks/crash_payments.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fix_payments import Misbehaviour, Outcome, Scenario, run_scenario
from fix_tools import Zygote, zygotes  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

SCENARIO = Scenario(
    orders=60,
    workers=12,
    random_kills=5,
    kill_every_s=(0.4, 1.5),
    misbehaviour=Misbehaviour(drop=0.2, delay=0.25, kill=0.15, kill_budget=5),
    lease_ttl=2.0,
    timeout=240.0,
)


def _run(pool: list[Zygote], target: str, mode: str, tmp: Path, backend: str) -> Outcome:
    out = run_scenario(pool[0], target, mode, str(tmp), SCENARIO, backend=backend)
    # The run itself: every order finished, workers were really killed, no worker failed.
    assert out.finished == out.orders, f"{out.orders - out.finished} orders never finished"
    assert out.kills_by_api > 0, "the API never killed a worker right after a charge"
    assert not out.unexpected_exits, (out.unexpected_exits, out.worker_errors[-5:])
    assert out.fates["drop"] > 0, "no answer was lost"
    return out


def test_plain_tool_node_charges_orders_twice(
    zygotes: list[Zygote],  # noqa: F811 (the fixture)
    store_target: str,
    backend: str,
    tmp_path: Path,
) -> None:
    out = _run(zygotes, store_target, "plain", tmp_path, backend)
    assert not out.not_charged  # each order finished after an answer
    assert out.charged_twice >= 1
    # Some of them because a crash made the call run again (what the durable node prevents),
    # not only because the client retried a lost answer without a key.
    assert out.extra_charges["rerun"] >= 1, out.extra_charges


def test_external_charge_is_never_charged_twice(
    zygotes: list[Zygote],  # noqa: F811
    store_target: str,
    backend: str,
    tmp_path: Path,
) -> None:
    out = _run(zygotes, store_target, "external", tmp_path, backend)
    assert out.charged_twice == 0, out.extra_charges
    # Never run blindly again: no call was sent afresh after a crash, even though this API
    # would have recognised the key.
    assert out.reruns == 0
    assert not out.other_actions, out.other_actions  # nothing recorded failed or abandoned
    assert out.done + out.in_doubt == out.orders
    # Every charge that lost its worker is left in doubt for a person, not guessed at.
    assert out.in_doubt >= out.kills_by_api
    # An order is charged once, or it is in doubt (a kill between the intent and the request
    # leaves it uncharged and in doubt).
    assert set(out.not_charged) <= set(out.in_doubt_orders), out.not_charged
    assert out.charges == out.orders - len(out.not_charged)
    assert not out.key_mismatches, out.key_mismatches


def test_idempotent_charge_is_never_charged_twice_nor_left_in_doubt(
    zygotes: list[Zygote],  # noqa: F811
    store_target: str,
    backend: str,
    tmp_path: Path,
) -> None:
    out = _run(zygotes, store_target, "idempotent", tmp_path, backend)
    assert out.charged_twice == 0, out.extra_charges
    assert out.charges == out.orders
    assert out.in_doubt == 0
    assert out.done == out.orders, out.other_actions
    # The calls the API's kills left open were sent again with the same key, and the API
    # answered them from the key (charging nothing).
    assert out.rerun_replays >= out.kills_by_api
    assert not out.key_mismatches, out.key_mismatches
