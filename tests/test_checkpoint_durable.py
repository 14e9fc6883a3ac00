"""The durability barrier (``wait_durable``/``await_durable``) and ``current_epoch``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from fix_checkpoint import State, chain, config, turn_input
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.runtime import Runtime

from langgraph_recall._context import checkpointer_of
from langgraph_recall.checkpoint import RecallCheckpointer
from langgraph_recall.store import RecallStore


class SlowSaver(InMemorySaver):
    """An in-memory saver whose checkpoint writes take a while, so that under
    durability="async" the next node starts before its step's checkpoint exists."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        time.sleep(0.3)
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        await asyncio.sleep(0.3)
        return await super().aput(config, checkpoint, metadata, new_versions)


def barrier_graph(seen: list[tuple[bool, bool]], *, use_async: bool = False) -> StateGraph:
    """Two nodes; the second waits for its step's checkpoint, then checks it really exists."""

    def first(state: State) -> dict[str, Any]:
        return {"n": 1}

    def check(config: RunnableConfig, runtime: Runtime, ok: bool) -> None:
        cp = checkpointer_of(config)
        cid = runtime.execution_info.checkpoint_id
        cfg = {
            "configurable": {
                "thread_id": config["configurable"]["thread_id"],
                "checkpoint_ns": "",
                "checkpoint_id": cid,
            }
        }
        seen.append((ok, cp.inner.get_tuple(cfg) is not None))

    def second(state: State, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        ok = checkpointer_of(config).wait_durable(
            config, runtime.execution_info.checkpoint_id, timeout=30
        )
        check(config, runtime, ok)
        return {"n": 2}

    async def asecond(state: State, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        ok = await checkpointer_of(config).await_durable(
            config, runtime.execution_info.checkpoint_id, timeout=30
        )
        await asyncio.to_thread(check, config, runtime, ok)
        return {"n": 2}

    return chain(State, ("first", first), ("second", asecond if use_async else second))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_wait_durable_returns_once_the_checkpoint_is_written(
    store: RecallStore, durability: str
) -> None:
    seen: list[tuple[bool, bool]] = []
    cp = RecallCheckpointer(SlowSaver(), store=store, lease_ttl=30)
    graph = barrier_graph(seen).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("go", 2), config("t1", "agent-1"), durability=durability)
    assert seen == [(True, True)]
    cp.close()


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_await_durable_returns_once_the_checkpoint_is_written(
    store: RecallStore, durability: str
) -> None:
    seen: list[tuple[bool, bool]] = []
    cp = RecallCheckpointer(SlowSaver(), store=store, lease_ttl=30)
    graph = barrier_graph(seen, use_async=True).compile(checkpointer=cp, store=store)
    asyncio.run(graph.ainvoke(turn_input("go", 2), config("t1", "agent-1"), durability=durability))
    assert seen == [(True, True)]
    cp.close()


def test_durability_exit_writes_nothing_during_the_run_so_the_barrier_says_no(
    store: RecallStore,
) -> None:
    seen: list[tuple[bool, bool]] = []
    cp = store.checkpointer(lease_ttl=30)
    graph = barrier_graph(seen).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("go", 2), config("t1", "agent-1"), durability="exit")
    assert seen == [(False, False)]
    cp.close()


def test_checkpoints_written_earlier_or_elsewhere_are_found_in_the_saver(
    store: RecallStore,
) -> None:
    writer = store.checkpointer(lease_ttl=30)
    graph = barrier_graph([]).compile(checkpointer=writer, store=store)
    cfg = config("t1", "agent-1")
    graph.invoke(turn_input("go", 2), cfg)
    head = graph.get_state(cfg).config["configurable"]["checkpoint_id"]
    other = store.checkpointer(lease_ttl=30)  # knows nothing of the writer's puts
    assert other.wait_durable(cfg, head, timeout=5) is True
    assert asyncio.run(other.await_durable(cfg, head, timeout=5)) is True
    assert other.wait_durable(cfg, "1f000000-0000-6000-8000-000000000000", timeout=0.2) is False
    writer.close()
    other.close()


def test_current_epoch_is_the_lease_epoch_during_a_run(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    during: list[int | None] = []

    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        during.append(checkpointer_of(config).current_epoch("agent-1"))
        return {"n": 1}

    graph = chain(State, ("node", node)).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("go", 1), config("t1", "agent-1"))
    lease = store.lease("agent-1")
    assert lease is not None and during == [lease.epoch]
    assert cp.current_epoch("agent-1") is None  # the run ended: nothing held
    cp.close()


def test_a_failed_write_answers_waiters_with_no(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    answers: list[bool] = []
    cid = "1f000000-0000-6000-8000-00000000abcd"
    waiter = threading.Thread(
        target=lambda: answers.append(cp.wait_durable(config("t1"), cid, timeout=60))
    )
    waiter.start()
    cp._shared.durable.mark("t1", cid, written=False)  # what a refused put records (_put_failed)
    waiter.join(30)
    assert answers == [False]
    cp.close()


def test_a_waiter_finds_its_checkpoint_however_many_puts_land_before_it_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The log keeps the newest `capacity` puts. A waiter wakes only when the lock is free, and
    # by then other threads may have marked more puts than that: its own entry must still be
    # there, or it sleeps to its timeout for a checkpoint written long before.
    from langgraph_recall.checkpoint._durable import DurableLog

    log = DurableLog(capacity=2)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(log.wait("t", "c-mine", timeout=20.0)))
    waiter.start()
    while not log._waiters:  # it is waiting
        time.sleep(0.001)
    # Every mark lands before the waiter runs again: its wake-ups are held back until the end.
    monkeypatch.setattr(log._cond, "notify_all", lambda: None)
    log.mark("t", "c-mine")
    for n in range(5):
        log.mark("t", f"c-other-{n}")
    monkeypatch.undo()
    with log._cond:
        log._cond.notify_all()
    waiter.join(timeout=60)
    assert got == [True]
    assert log.seen("t", "c-other-4") and len(log._done) <= 3  # still bounded
    assert log._wanted == {}  # once it has its answer, its entry may go like any other
    log.mark("t", "c-last")
    assert not log.seen("t", "c-mine")


def test_an_async_waiter_is_woken_from_the_writing_thread_without_holding_one() -> None:
    from langgraph_recall.checkpoint._durable import DurableLog

    log = DurableLog(capacity=2)

    def puts_land() -> None:  # a saver's background thread: more puts than the log keeps
        log.mark("t", "c-mine")
        log.mark("t", "c-refused", written=False)
        for n in range(5):
            log.mark("t", f"c-other-{n}")

    async def main() -> tuple[bool, bool, bool]:
        mine = asyncio.ensure_future(log.await_written("t", "c-mine", 20.0))
        refused = asyncio.ensure_future(log.await_written("t", "c-refused", 20.0))
        while log._waiters < 2:
            await asyncio.sleep(0.001)
        writer = threading.Thread(target=puts_land)
        writer.start()
        answers = (await mine, await refused, await log.await_written("t", "never", 0.05))
        writer.join()
        return answers

    assert asyncio.run(main()) == (True, False, False)  # written, refused, timed out
    assert log._waiters == 0 and log._wanted == {}
    assert len(log._done) <= 4  # bounded again once no one waits


def _log_waiter() -> tuple[Any, Any]:
    from langgraph_recall.checkpoint._durable import DurableLog

    log = DurableLog()
    return log.await_written("t", "c", 10.0), lambda: log.mark("t", "c")


def _turn_waiter() -> tuple[Any, Any]:
    from langgraph_recall.tools._order import Turns

    turns = Turns(["first", "second"])
    return turns.await_turn("second"), lambda: turns.release("first")


@pytest.mark.parametrize("make", [_log_waiter, _turn_waiter], ids=["checkpoint", "turn"])
def test_a_waiter_cancelled_just_after_its_wake_up_stays_cancelled(make: Any) -> None:
    # asyncio.wait_for (Python 3.11 and older) swallowed a cancellation that landed just after
    # the wait ended: a cancelled ainvoke went on to run the tool it had been waiting for.
    async def trial(ticks: int) -> str:
        wait, wake = make()
        waiting = asyncio.ensure_future(wait)
        await asyncio.sleep(0.01)  # parked
        wake()
        for _ in range(ticks):
            await asyncio.sleep(0)
        if not waiting.cancel():
            return "done before the cancel"
        try:
            await waiting
        except asyncio.CancelledError:
            return "cancelled"
        return "went on"

    async def trials() -> list[str]:
        return [await trial(ticks) for ticks in range(6)]

    outcomes = asyncio.run(trials())
    assert "went on" not in outcomes and "cancelled" in outcomes, outcomes


def test_waiters_that_gave_up_leave_nothing_behind() -> None:
    from langgraph_recall.checkpoint._durable import DurableLog

    log = DurableLog()

    async def cancelled() -> None:
        waiting = asyncio.ensure_future(log.await_written("t", "never", 10.0))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    for _ in range(20):  # one event loop per request, as a web server's handlers might
        assert asyncio.run(log.await_written("t", "never", 0.0)) is False
        asyncio.run(cancelled())
    # Each kept its closed loop alive until the next put that someone waited for.
    assert log._wakeups._waiting == [] and log._waiters == 0 and log._wanted == {}


def test_a_wait_without_a_limit_blocks_until_the_put() -> None:
    import math

    from langgraph_recall.checkpoint._durable import DurableLog

    log = DurableLog()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(log.wait("t", "c", math.inf)))
    waiter.start()
    while not log._waiters and waiter.is_alive():  # it died at once: OverflowError
        time.sleep(0.001)
    log.mark("t", "c")
    waiter.join(30)
    assert got == [True]
