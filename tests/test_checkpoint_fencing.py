"""Two writers never fork an agent's history: racing, killed and frozen holders, real processes."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fix_checkpoint import (
    Worker,
    assert_linear,
    count_steps,
    history,
    read_log,
    recorded_ids,
    wait_until,
)

from langgraph_recall.store import RecallStore

pytestmark = pytest.mark.slow

RACE_ROUNDS = 8


def test_racing_processes_one_runs_the_other_gets_lease_held(
    attach: Callable[..., list[Worker]], inner: Any, store: RecallStore
) -> None:
    a, b = attach("A", "B", ttl=30)
    for i in range(RACE_ROUNDS):
        # Both start at the same instant; whoever gets the lease blocks in its first step
        # until the other has answered, so the two runs overlap every time.
        at = time.time() + 0.3
        for w in (a, b):
            w.invoke("t", "agent", f"{w.who}{i}", plan={"block_at": 1}, at=at, msg_id=f"{w.who}{i}")
        first = {w.who: w.next_event() for w in (a, b)}
        winners = [w for w in (a, b) if first[w.who]["event"] == "blocked"]
        losers = [w for w in (a, b) if first[w.who]["event"] == "result"]
        assert len(winners) == 1 and len(losers) == 1, first
        assert first[losers[0].who]["code"] == "lease_held"
        assert first[losers[0].who]["details"]["holder"] == winners[0].holder
        winners[0].open_gate()
        assert winners[0].result()["ok"] is True
        winners[0].close_gate()
    assert_linear(inner, "t")
    # Every accepted turn is in the head, none silently dropped by a fork.
    head = history(inner, "t")[-1].checkpoint["channel_values"]["messages"]
    assert len([m for m in head if m.type == "human"]) == RACE_ROUNDS
    assert sum(count_steps(a.log).values()) == RACE_ROUNDS * 3
    ids = recorded_ids(store, "agent")
    assert ids == [m.id for m in head]


def test_killed_holder_keeps_the_agent_until_expiry_then_another_finishes_the_run(
    attach: Callable[..., list[Worker]], inner: Any
) -> None:
    # B's first try must come before A's lease runs out: 6 s leaves a stalled machine room.
    a, b = attach("A", "B", ttl=6)
    a.invoke("t", "agent", "go", plan={"block_at": 2}, target=3)
    a.expect("blocked")
    a.signal(signal.SIGKILL)
    assert a.exit_code() == -signal.SIGKILL
    b.invoke("t", "agent", None)
    refused = b.result()
    assert refused["code"] == "lease_held" and refused["details"]["holder"] == a.holder
    b.invoke("t", "agent", None, wait=60)
    done = b.result()
    assert done["ok"] is True and done["n"] == 3
    assert_linear(inner, "t")
    assert count_steps(a.log) == {1: 1, 2: 1, 3: 1}
    assert count_steps(a.log, "start") == {1: 1, 2: 2, 3: 1}  # step 2: killed A, then B


def test_frozen_holder_cannot_land_a_checkpoint_after_takeover(
    attach: Callable[..., list[Worker]], inner: Any
) -> None:
    # A freezes (SIGSTOP) inside put() for step 2's checkpoint: past every check of its own,
    # before the write. Only the database can refuse that write now.
    (a,) = attach("A", ttl=1.5, faults="before_put=4:stop")
    (b,) = attach("B", ttl=30)
    a.invoke("t", "agent", "go", target=3)
    wait_until(a.stopped, what="A to freeze")
    b.invoke("t", "agent", None, wait=60)
    done = b.result()
    assert done.get("n") == 3, done
    a.signal(signal.SIGCONT)
    late = a.result()
    assert late["ok"] is False and late["code"] == "lease_lost", late
    assert_linear(inner, "t")
    steps = {h.metadata["step"]: h for h in history(inner, "t")}
    epoch_a, epoch_b = steps[1].metadata["recall_epoch"], steps[2].metadata["recall_epoch"]
    assert epoch_b > epoch_a
    assert [h.metadata["recall_epoch"] for h in history(inner, "t") if h.metadata["step"] >= 2] == [
        epoch_b
    ] * 2
    head = [m.content for m in steps[3].checkpoint["channel_values"]["messages"]]
    # Step 2's result is A's if A's task writes (not fenced: genuine results) landed before
    # it froze, and B reused them; else B's own. Either way one per step, then B's step 3.
    assert head[:2] == ["go", "A: step 1"] and head[3] == "B: step 3"
    assert head[2] in ("A: step 2", "B: step 2")


def test_a_worker_restarted_under_its_holder_name_fences_the_frozen_old_one_out(
    attach: Callable[..., list[Worker]], inner: Any
) -> None:
    # A and B share holder="worker-1" (B is A's restart): B takes the agent at once, without
    # waiting out A's 30 s lease. A froze (SIGSTOP) inside put() for step 2's checkpoint, past
    # its own checks. With the epoch kept for the same name, A's late write landed on B's
    # history; now B's lease has a new epoch and the database refuses it.
    (a,) = attach("A", ttl=30, faults="before_put=4:stop", holder="worker-1")
    (b,) = attach("B", ttl=30, holder="worker-1")
    a.invoke("t", "agent", "go", target=3)
    wait_until(a.stopped, what="A to freeze")
    b.invoke("t", "agent", None)
    done = b.result()
    assert done.get("n") == 3, done
    a.signal(signal.SIGCONT)
    late = a.result()
    assert late["ok"] is False and late["code"] == "lease_lost", late
    assert_linear(inner, "t")
    epochs = {h.metadata["step"]: h.metadata["recall_epoch"] for h in history(inner, "t")}
    assert epochs[3] > epochs[1]


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_frozen_holder_learns_it_lost_the_lease_and_stops(
    attach: Callable[..., list[Worker]], inner: Any, store: RecallStore, durability: str
) -> None:
    # A freezes inside step 2's node; B takes over and finishes; A thaws.
    (a,) = attach("A", ttl=1.5)
    (b,) = attach("B", ttl=30)
    a.invoke("t", "agent", "go", plan={"stop_at": 2}, target=4, durability=durability)
    wait_until(a.stopped, what="A to freeze")
    b.invoke("t", "agent", None, wait=60)
    got = b.result()
    assert got.get("n") == 4, got
    epoch_b = store.lease("agent").epoch
    a.signal(signal.SIGCONT)
    late = a.result()
    assert late["ok"] is False and late["code"] == "lease_lost", late
    assert_linear(inner, "t")
    after = [h for h in history(inner, "t") if h.metadata["recall_epoch"] != epoch_b]
    assert max(h.metadata["step"] for h in after) <= 1, "A wrote a checkpoint after takeover"
    if durability == "sync":
        # Each step waits for its checkpoint: the refused write ends A before step 3.
        a_steps = {r["step"] for r in read_log(a.log) if r["who"] == "A"}
        assert max(a_steps) == 2
    assert len(set(recorded_ids(store, "agent"))) == len(recorded_ids(store, "agent"))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_saver_outside_the_store_database_is_fenced_best_effort(
    attach: Callable[..., list[Worker]], tmp_path: Path, backend: str
) -> None:
    # No trigger here: the thawed holder must find out by itself (renewal or the lease check
    # before each write) and write nothing more.
    own = str(tmp_path / "own-checkpoints.db")
    # A fences itself once its lease's time has passed without a renewal: a ttl long enough
    # that a stalled machine does not end A before it reaches its freeze at step 2.
    (a,) = attach("A", ttl=5, own_saver=own)
    (b,) = attach("B", ttl=30, own_saver=own)
    a.invoke("t", "agent", "go", plan={"stop_at": 2}, target=4)
    wait_until(a.stopped, what="A to freeze")
    b.invoke("t", "agent", None, wait=60)
    assert b.result()["n"] == 4
    a.signal(signal.SIGCONT)
    late = a.result()
    assert late["ok"] is False and late["code"] == "lease_lost", late
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(own, check_same_thread=False))
    assert_linear(saver, "t")
    assert max(r["step"] for r in read_log(a.log) if r["who"] == "A") == 2
