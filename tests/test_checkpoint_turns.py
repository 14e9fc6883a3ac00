"""A turn submitted twice runs once (``configurable["turn_id"]``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fix_checkpoint import (
    Worker,
    config,
    count_steps,
    recorded_ids,
    step_graph,
    turn_input,
)
from langgraph.types import Command

from langgraph_recall import RecallError
from langgraph_recall.store import RecallStore


@pytest.fixture
def ran(tmp_path: Path) -> str:
    return str(tmp_path / "nodes.log")


def test_same_turn_twice_runs_once(store: RecallStore, ran: str) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1", turn_id="turn-1")
    first = cp.invoke(graph, turn_input("hello", 3, msg_id="turn-1"), cfg)
    again = cp.invoke(graph, turn_input("hello", 3, msg_id="turn-1"), cfg)
    assert again == first
    assert count_steps(ran) == {1: 1, 2: 1, 3: 1}
    assert recorded_ids(store, "agent-1").count("turn-1") == 1
    cp.close()


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize(
    "turn_id", [42, uuid.UUID("12345678-1234-5678-1234-567812345678")], ids=["int", "uuid"]
)
def test_a_turn_id_that_is_not_text_still_runs_once(
    store: RecallStore, ran: str, turn_id: Any, use_async: bool
) -> None:
    # LangGraph keeps turn_id=42 in the checkpoint's metadata as 42 (a UUID not at all), and the
    # lookup asked for "42": the resubmitted turn found nothing and ran a second time.
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1", turn_id=turn_id)

    async def twice() -> tuple[Any, Any]:
        first = await cp.ainvoke(graph, turn_input("hello", 2), cfg)
        return first, await cp.ainvoke(graph, turn_input("hello", 2), cfg)

    if use_async:
        first, again = asyncio.run(twice())
    else:
        first = cp.invoke(graph, turn_input("hello", 2), cfg)
        again = cp.invoke(graph, turn_input("hello", 2), cfg)
    assert again == first
    assert count_steps(ran) == {1: 1, 2: 1}
    with pytest.raises(RecallError) as err:
        graph.invoke(turn_input("hello", 2), cfg)
    assert err.value.code == "duplicate_turn"
    cp.close()


def test_a_store_default_ttl_does_not_expire_the_turn_marker(store_target: str, ran: str) -> None:
    import time

    # default_ttl is in minutes: 0.01 is 0.6 s. The marker used to be a plain put, which the
    # default took, so the same turn submitted again after it ran a second time.
    with RecallStore.open(store_target, ttl={"default_ttl": 0.01}) as store:
        cp = store.checkpointer(lease_ttl=30)
        graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
        cfg = config("t1", "agent-1", turn_id="turn-1")
        first = cp.invoke(graph, turn_input("hello", 2, msg_id="turn-1"), cfg)
        time.sleep(1.0)
        assert cp.invoke(graph, turn_input("hello", 2, msg_id="turn-1"), cfg) == first
        assert count_steps(ran) == {1: 1, 2: 1}
        cp.close()


def test_plain_invoke_of_a_finished_turn_raises_duplicate_turn(
    store: RecallStore, ran: str
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1", turn_id="turn-1")
    graph.invoke(turn_input("hello", 2), cfg)
    with pytest.raises(RecallError) as err:
        graph.invoke(turn_input("hello", 2), cfg)
    assert err.value.code == "duplicate_turn"
    assert err.value.details["thread_id"] == "t1" and err.value.details["at_head"] is True
    assert count_steps(ran) == {1: 1, 2: 1}
    # Nothing ran, and the lease is free for the next turn.
    graph.invoke(turn_input("next", 2), config("t1", "agent-1", turn_id="turn-2"))
    cp.close()


def test_an_older_turn_resubmitted_returns_its_own_result(store: RecallStore, ran: str) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
    first = cp.invoke(graph, turn_input("one", 1), config("t1", "agent-1", turn_id="turn-1"))
    cp.invoke(graph, turn_input("two", 1), config("t1", "agent-1", turn_id="turn-2"))
    replay = cp.invoke(graph, turn_input("one", 1), config("t1", "agent-1", turn_id="turn-1"))
    assert replay == first
    assert count_steps(ran) == {1: 2}
    cp.close()


def test_turn_resubmitted_on_another_thread_of_the_agent_is_caught(
    store: RecallStore, ran: str
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
    first = cp.invoke(graph, turn_input("hello", 2), config("t1", "agent-1", turn_id="turn-1"))
    again = cp.invoke(graph, turn_input("hello", 2), config("t2", "agent-1", turn_id="turn-1"))
    assert again == first
    assert count_steps(ran) == {1: 1, 2: 1}
    cp.close()


def test_resume_of_an_interrupted_turn_passes_and_resubmission_resumes(
    store: RecallStore, ran: str
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(who="p", log=ran).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1", turn_id="turn-1")
    data = {**turn_input("hello", 3), "plan": {"p": {"interrupt_at": 2}}}
    out = cp.invoke(graph, data, cfg)
    assert "__interrupt__" in out
    # The client retries the same turn: it is resumed (waiting again), not restarted.
    again = cp.invoke(graph, data, cfg)
    assert again["n"] == 1 and graph.get_state(cfg).next == ("step",)
    assert count_steps(ran, "start") == {1: 1, 2: 2}
    # Command(resume=...) with the same turn_id is the turn going on, not a resubmission.
    done = graph.invoke(Command(resume="ok"), cfg)
    assert done["n"] == 3
    cp.close()


def test_same_turn_twice_async(store: RecallStore, ran: str) -> None:
    async def main() -> None:
        cp = store.checkpointer(lease_ttl=30)
        graph = step_graph(log=ran).compile(checkpointer=cp, store=store)
        cfg = config("t1", "agent-1", turn_id="turn-1")
        first = await cp.ainvoke(graph, turn_input("hello", 2), cfg)
        again = await cp.ainvoke(graph, turn_input("hello", 2), cfg)
        assert again == first
        await asyncio.to_thread(cp.close)

    asyncio.run(main())
    assert count_steps(ran) == {1: 1, 2: 1}


@pytest.mark.slow
def test_turn_resubmitted_after_a_crash_mid_turn_resumes_it(
    attach: Callable[..., list[Worker]], store: RecallStore
) -> None:
    # A dies right after step 2's checkpoint; the client resubmits the turn to B, twice.
    (a,) = attach("A", ttl=1, faults="after_put=4:exit")
    (b,) = attach("B", ttl=30)
    a.invoke("t1", "agent-1", "hello", target=4, turn_id="turn-1", msg_id="turn-1")
    assert a.exit_code() == 99
    for _ in range(2):
        b.invoke(
            "t1",
            "agent-1",
            "hello",
            target=4,
            turn_id="turn-1",
            msg_id="turn-1",
            helper=True,
            wait=60,
        )
        out = b.result()
        assert out["ok"] is True and out["n"] == 4, out
    assert count_steps(a.log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert recorded_ids(store, "agent-1").count("turn-1") == 1


@pytest.mark.slow
def test_turn_killed_before_anything_was_saved_runs_again(
    attach: Callable[..., list[Worker]], store: RecallStore
) -> None:
    (a,) = attach("A", ttl=1, faults="before_put=1:exit")
    (b,) = attach("B", ttl=30)
    a.invoke("t1", "agent-1", "hello", target=2, turn_id="turn-1", msg_id="turn-1")
    assert a.exit_code() == 99
    b.invoke(
        "t1", "agent-1", "hello", target=2, turn_id="turn-1", msg_id="turn-1", helper=True, wait=60
    )
    out = b.result()
    assert out["ok"] is True and out["n"] == 2, out
