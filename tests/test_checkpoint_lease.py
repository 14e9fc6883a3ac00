"""One process acts for an agent at a time: taken at run start, renewed, released at run end."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fix_checkpoint import (
    Worker,
    assert_linear,
    attaching,
    config,
    count_steps,
    read_log,
    step_graph,
    turn_input,
)
from fix_store import wait_until

from langgraph_recall import RecallError
from langgraph_recall._errors import LeaseHeld
from langgraph_recall.store import RecallStore


@pytest.fixture
def workers(store_target: str, tmp_path: Path) -> Iterator[list[Worker]]:
    """Two worker processes (A and B) on the test's database, with long leases."""
    with attaching(store_target, tmp_path) as attach:
        yield attach("A", "B", ttl=60)


def test_second_process_gets_lease_held_and_runs_nothing(
    workers: list[Worker], store: RecallStore, inner: Any
) -> None:
    a, b = workers
    a.invoke("t1", "agent-1", "hello", plan={"block_at": 1})
    a.expect("blocked")
    b.invoke("t1", "agent-1", "hello from B")
    refused = b.result()
    assert refused["ok"] is False and refused["code"] == "lease_held"
    assert refused["details"]["holder"] == a.holder
    assert refused["details"]["expires_at"] > 0
    a.open_gate()
    assert a.result()["ok"] is True
    assert {r["who"] for r in read_log(a.log)} == {"A"}, "B ran a node"
    assert_linear(inner, "t1")


@pytest.mark.parametrize("outcome", ["finished", "raised", "interrupted"])
def test_next_process_starts_at_once_after_the_run_ends(
    workers: list[Worker], store: RecallStore, outcome: str
) -> None:
    # Leases last 60 s here: B can only start at once if A released its lease at the end.
    a, b = workers
    plan = {"finished": {}, "raised": {"fail_at": 2}, "interrupted": {"interrupt_at": 2}}[outcome]
    a.invoke("t1", "agent-1", "go", plan=plan)
    first = a.result()
    if outcome == "raised":
        assert first["ok"] is False and "failed on purpose" in first["error"]
    else:
        assert first["ok"] is True and first["interrupted"] == (outcome == "interrupted")
    b.invoke("t1", "agent-1", "next turn", wait=0)
    assert b.result()["ok"] is True


@pytest.mark.parametrize("renewer", ["none yet", "waiting for its round", "idle"])
def test_lease_is_renewed_while_a_run_outlasts_it(store: RecallStore, renewer: str) -> None:
    # The renewal thread, when this run takes the lease: not started; waiting for its next
    # round (an earlier run just ended: it is not woken, its round renews the new lease); or
    # idle with nothing to renew (it must be woken, or it would sleep for a minute). The run's
    # node waits, for as long as it takes, until the lease row shows a renewal: a stalled
    # process delays the renewal and the check alike, so nothing here races a clock.
    for _attempt in range(5):
        seen = _renewed_while_the_run_waits(store, renewer)
        # The case meant: "waiting" needs the run's lease taken within a renewal interval
        # (1 s) of the warm run; a process stalled longer meets an idle renewer: again.
        if seen["idle_at_take"] == (renewer == "idle") or renewer == "none yet":
            break
    else:
        raise AssertionError(f"never caught the renewer {renewer!r} as the run took its lease")
    assert seen["out"]["n"] == 2
    first, renewed = seen["first"], seen["renewed"]
    assert (renewed.holder, renewed.epoch) == (first.holder, first.epoch)
    assert renewed.expires_at > first.expires_at


def _renewed_while_the_run_waits(store: RecallStore, renewer: str) -> dict[str, Any]:
    cp = store.checkpointer(lease_ttl=3.0)  # renewed every second
    keeper = cp._shared.keeper
    seen: dict[str, Any] = {}
    agent = f"agent-{renewer.replace(' ', '-')}-{time.monotonic_ns()}"
    if renewer != "none yet":
        step_graph().compile(checkpointer=cp, store=store).invoke(
            turn_input("warm", 1), config("t-warm", agent)
        )
        if renewer == "idle":
            wait_until(lambda: keeper._renewer_idle, timeout=30, what="the renewer idles")
    real_start = keeper._start_renewer

    def start() -> None:  # called as the run takes its lease
        seen.setdefault("idle_at_take", keeper._renewer_idle)
        real_start()

    keeper._start_renewer = start  # type: ignore[method-assign]

    def outlast_lease(k: int, cfg: Any) -> None:
        if k == 1:
            first = seen["first"] = store.lease(agent)
            assert first is not None
            # Under the idle renewer's own wait (60 s): a renewer never woken fails here.
            seen["renewed"] = wait_until(
                lambda: (now := store.lease(agent)) and now.expires_at > first.expires_at and now,
                timeout=30,
                what="the lease's renewal",
            )

    graph = step_graph(on_step=outlast_lease).compile(checkpointer=cp, store=store)
    try:
        seen["out"] = graph.invoke(turn_input("go", 2), config("t1", agent))
    finally:
        cp.close()
    return seen


def test_in_process_second_run_of_the_same_agent_is_refused(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    inside = threading.Event()
    go_on = threading.Event()

    def hold(k: int, cfg: Any) -> None:
        inside.set()
        assert go_on.wait(60)

    graph = step_graph(on_step=hold).compile(checkpointer=cp, store=store)
    runner = threading.Thread(
        target=graph.invoke, args=(turn_input("a", 1), config("t1", "agent-1"))
    )
    runner.start()
    assert inside.wait(60)
    # Same holder id, so the database lease alone would let it in: the process must refuse.
    with pytest.raises(LeaseHeld):
        graph.invoke(turn_input("b", 1), config("t2", "agent-1"))
    go_on.set()
    runner.join(60)
    cp.close()


def test_wait_queues_behind_a_running_holder(store: RecallStore) -> None:
    first = store.checkpointer(lease_ttl=30)
    second = store.checkpointer(lease_ttl=30, wait=60)
    inside = threading.Event()
    go_on = threading.Event()
    order: list[str] = []

    def hold(k: int, cfg: Any) -> None:
        if cfg["configurable"]["thread_id"] == "t1":
            inside.set()
            assert go_on.wait(60)
        order.append(cfg["configurable"]["thread_id"])

    g = step_graph(on_step=hold)
    runner = threading.Thread(
        target=g.compile(checkpointer=first, store=store).invoke,
        args=(turn_input("a", 1), config("t1", "agent-1")),
    )
    runner.start()
    assert inside.wait(60)
    waiter = threading.Thread(
        target=g.compile(checkpointer=second, store=store).invoke,
        args=(turn_input("b", 1), config("t2", "agent-1")),
    )
    waiter.start()
    go_on.set()
    runner.join(60)
    waiter.join(60)
    assert order == ["t1", "t2"]
    first.close()
    second.close()


def test_wait_gives_up_with_lease_held(store: RecallStore) -> None:
    store.acquire_lease("agent-1", "someone-else", 30)
    cp = store.checkpointer(lease_ttl=30, wait=0.3)
    graph = step_graph().compile(checkpointer=cp, store=store)
    with pytest.raises(RecallError) as err:
        graph.invoke(turn_input("a", 1), config("t1", "agent-1"))
    assert err.value.code == "lease_held"
    assert err.value.details["holder"] == "someone-else"
    cp.close()


def test_reads_and_update_state_need_no_lease(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    graph.invoke(turn_input("a", 1), cfg)
    before = store.lease("agent-1")
    assert graph.get_state(cfg).values["n"] == 1
    assert len(list(graph.get_state_history(cfg))) >= 3
    assert store.lease("agent-1") == before, "get_state took the lease"
    graph.update_state(cfg, {"target": 5})
    assert graph.get_state(cfg).values["target"] == 5
    assert cp.current_epoch("agent-1") is None
    cp.close()


def test_update_state_refused_while_another_process_runs_the_agent(
    workers: list[Worker], store: RecallStore, inner: Any
) -> None:
    a, _ = workers
    a.invoke("t1", "agent-1", "hello", plan={"block_at": 2})
    a.expect("blocked")
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    with pytest.raises(LeaseHeld) as err:
        graph.update_state(cfg, {"target": 9})
    assert err.value.details["holder"] == a.holder
    a.open_gate()
    assert a.result()["ok"] is True
    graph.update_state(cfg, {"target": 9})  # free now
    assert graph.get_state(cfg).values["target"] == 9
    assert_linear(inner, "t1")
    assert count_steps(a.log) == {1: 1, 2: 1, 3: 1}
    cp.close()


@pytest.mark.parametrize("saver", ["same database", "in memory"])
def test_a_write_after_another_holder_took_over_is_refused(store: RecallStore, saver: str) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_recall.checkpoint import RecallCheckpointer

    cp = (
        store.checkpointer(lease_ttl=30)
        if saver == "same database"
        else RecallCheckpointer(InMemorySaver(), store=store, lease_ttl=30)
    )

    def take_over(k: int, cfg: Any) -> None:
        if k == 2:
            # As if our lease had expired unnoticed and another process took it.
            epoch = cp.current_epoch("agent-1")
            assert epoch is not None
            store.release_lease("agent-1", cp.holder, epoch)
            store.acquire_lease("agent-1", "intruder", 30)

    graph = step_graph(on_step=take_over).compile(checkpointer=cp, store=store)
    with pytest.raises(RecallError) as err:
        graph.invoke(turn_input("go", 4), config("t1", "agent-1"), durability="sync")
    assert err.value.code == "lease_lost"
    steps = [h.metadata["step"] for h in cp.list(config("t1"))]
    assert max(steps) == 1, "a checkpoint was written after the takeover"
    assert store.lease("agent-1").holder == "intruder"  # not released by the fenced-out run
    cp.close()


# --- a run whose LangGraph loop fails to enter after the lease was taken --------------------


def _asking_graph(saver: Any) -> Any:
    from langgraph.graph import START, StateGraph
    from langgraph.types import interrupt
    from typing_extensions import TypedDict

    class S(TypedDict, total=False):
        answer: str

    def ask(state: S) -> S:
        return {"answer": str(interrupt("yes or no?"))}

    builder = StateGraph(S)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=saver)


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The failed loop stays uncollected, as it does for as long as a cycle of LangGraph's (or a
    kept traceback) holds it: only the lease's own watch can end the run."""
    import gc

    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_resume_langgraph_refuses_gives_the_lease_back(
    store: RecallStore, no_gc: None, mode: str
) -> None:
    from langgraph.types import Command

    saver = store.checkpointer(lease_ttl=60)
    graph = _asking_graph(saver)
    cfg = config("t-bad", "asker")

    async def call(value: Any) -> Any:
        if mode == "sync":
            return graph.invoke(value, cfg)
        return await graph.ainvoke(value, cfg)

    await call({"answer": ""})  # pauses at the question
    # LangGraph fails this one inside its loop's entry, after the checkpointer took the lease.
    with pytest.raises(Exception) as refused:  # noqa: B017 - LangGraph's own error
        await call(Command(resume=None))
    assert not isinstance(refused.value, RecallError)
    # The same caller tries again at once: its earlier entry is over, so the run that never
    # started is ended instead of refusing this one with lease_held.
    out = await call(Command(resume="yes"))
    assert out["answer"] == "yes"
    assert store.lease("asker") is None or store.lease("asker").expires_at <= time.time()
    saver.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("slow", ["_quietly_end", "_end"], ids=["ender-not-started", "ending"])
async def test_a_failed_run_whose_loop_was_collected_is_ended_before_the_next_run(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, mode: str, slow: str
) -> None:
    """The failed loop is collected: its finalizer ends the run on a thread of its own. A next
    run of the agent came before that thread (on a busy machine) and was refused lease_held."""
    import gc
    import threading

    from langgraph.types import Command

    from langgraph_recall.checkpoint._runs import RunLifecycle

    here = threading.current_thread()
    original = getattr(RunLifecycle, slow)

    def late(self: RunLifecycle, run: Any) -> None:
        if threading.current_thread() is not here:
            time.sleep(0.5)  # the finalizer's thread, slow to start or to finish
        original(self, run)

    monkeypatch.setattr(RunLifecycle, slow, late)
    saver = store.checkpointer(lease_ttl=60)
    runs = saver._shared.runs
    graph = _asking_graph(saver)
    cfg = config("t-gc", "collected")

    async def call(value: Any) -> Any:
        if mode == "sync":
            return graph.invoke(value, cfg)
        return await graph.ainvoke(value, cfg)

    await call({"answer": ""})
    try:
        await call(Command(resume=None))  # LangGraph fails it inside its loop's entry
    except Exception:  # noqa: S110 - LangGraph's own error; no traceback kept to hold the loop
        pass
    failed = runs.run_of("collected")
    assert failed is not None and failed.loop is not None
    gc.collect()
    assert failed.loop() is None, "the failed loop was not collected"
    if slow == "_end":
        deadline = time.monotonic() + 10
        while "collected" not in runs.ending:  # the finalizer's thread is inside end()
            assert time.monotonic() < deadline
            time.sleep(0.01)
    out = await call(Command(resume="yes"))
    assert out["answer"] == "yes"
    saver.close()


@pytest.mark.slow
def test_another_process_gets_the_lease_of_a_run_that_failed_to_enter(
    store: RecallStore, store_target: str, no_gc: None, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from langgraph.types import Command

    saver = store.checkpointer(lease_ttl=2)
    graph = _asking_graph(saver)
    cfg = config("t-bad", "asker")
    graph.invoke({"answer": ""}, cfg)
    with pytest.raises(Exception):  # noqa: B017 - LangGraph's own error
        graph.invoke(Command(resume=None), cfg)
    # This process stays alive and idle, its renewer running; another process asks for the
    # agent. Without the watch, the lease is renewed here for good and it waits in vain.
    code = (
        "import sys, os\n"
        "from langgraph.types import Command\n"
        "sys.path.insert(0, os.environ['TESTS'])\n"
        "from test_checkpoint_lease import _asking_graph\n"
        "from fix_checkpoint import config\n"
        "from langgraph_recall import RecallStore\n"
        "store = RecallStore.open(os.environ['TARGET'])\n"
        "saver = store.checkpointer(lease_ttl=2, wait=30)\n"
        "print(_asking_graph(saver).invoke(Command(resume='yes'), config('t-bad', 'asker')))\n"
    )
    env = {**os.environ, "TESTS": str(Path(__file__).parent), "TARGET": store_target}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'answer': 'yes'" in done.stdout
    saver.close()


@pytest.mark.parametrize("write", ["put", "put_writes"])
def test_closing_the_checkpointer_under_a_write_on_its_way_is_lease_lost(
    store: RecallStore, write: str
) -> None:
    saver = store.checkpointer(lease_ttl=60)
    graph = step_graph().compile(checkpointer=saver, store=store)
    inner = saver.inner
    original = getattr(inner, write)
    closed: list[bool] = []

    def close_first(*args: Any, **kwargs: Any) -> Any:
        # The lease check has passed; the checkpointer is closed before the write lands, as
        # when another thread closes it then. On PostgreSQL the write then met the closed
        # pool and the run ended with psycopg_pool.PoolClosed.
        if not closed:
            closed.append(True)
            saver.close()
        return original(*args, **kwargs)

    setattr(inner, write, close_first)
    with pytest.raises(RecallError) as err:
        graph.invoke(turn_input("go", 3), config("t-close", "closing"), durability="sync")
    assert err.value.code == "lease_lost"
    assert closed == [True]


def _many() -> int:
    # More than the loop's default executor has workers (min(32, cpu + 4)).
    return (os.cpu_count() or 1) + 8


@pytest.mark.timeout(120)
def test_runs_of_one_agent_queued_under_ainvoke_each_get_their_turn(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30, wait=20)
    graph = step_graph().compile(checkpointer=cp, store=store)

    async def queue() -> list[Any]:
        runs = (
            graph.ainvoke(turn_input(f"m{i}", 1), config(f"t{i}", "agent-1"))
            for i in range(_many())
        )
        return await asyncio.gather(*runs, return_exceptions=True)

    # Each queued run used to wait on a worker thread of the loop's executor, which the run
    # holding the lease needs for its checkpoints: it could not finish, and they all gave up.
    results = asyncio.run(queue())
    assert [type(r).__name__ for r in results] == ["dict"] * _many()
    assert [r["n"] for r in results] == [1] * _many()
    cp.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("waiting_with", ["ainvoke", "aupdate_state"])
def test_waiting_for_agents_held_elsewhere_leaves_other_runs_free(
    store: RecallStore, waiting_with: str
) -> None:
    held = [f"busy-{i}" for i in range(_many())]
    cp = store.checkpointer(lease_ttl=30, wait=20)
    graph = step_graph().compile(checkpointer=cp, store=store)
    if waiting_with == "aupdate_state":
        for agent in held:  # a checkpoint to update
            graph.invoke(turn_input("x", 1), config(f"t-{agent}", agent))
    epochs = {agent: store.acquire_lease(agent, "elsewhere", 60).epoch for agent in held}

    def wait_for(agent: str) -> Any:
        if waiting_with == "aupdate_state":
            return graph.aupdate_state(config(f"t-{agent}", agent), {"n": 0})
        return graph.ainvoke(turn_input("w", 1), config(f"t-{agent}", agent))

    async def main() -> tuple[bool, list[Any]]:
        waiting = [asyncio.ensure_future(wait_for(agent)) for agent in held]
        await asyncio.sleep(0.2)  # they are all polling the leases now
        free = await graph.ainvoke(turn_input("f", 1), config("t-free", "free"))
        none_done = free["n"] == 1 and not any(task.done() for task in waiting)
        for agent in held:
            await asyncio.to_thread(store.release_lease, agent, "elsewhere", epochs[agent])
        return none_done, await asyncio.gather(*waiting, return_exceptions=True)

    # Each waiter polled on a worker thread of the loop's executor: with as many of them as
    # it has workers, the free agent's run had none, and waited for them all to give up.
    none_done, results = asyncio.run(main())
    assert none_done, "the free agent's run waited for the others to give up"
    assert [type(r).__name__ for r in results] == ["dict"] * _many()
    cp.close()


@pytest.mark.timeout(120)
def test_a_run_queued_in_this_process_never_runs_on_a_lease_the_database_shows_free(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database release takes a while (a slow server, a descheduled thread): what a run
    # queued in this process does meanwhile decides the test, not how the scheduler ran them.
    for name in ("_end_run", "release_lease"):
        real = getattr(store, name)

        def slow(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            time.sleep(0.02)
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, slow)
    left: list[float] = []  # at each step: seconds left on the agent's lease in the database

    def on_step(k: int, cfg: Any) -> None:
        lease = store.lease(cfg["configurable"]["agent_id"])
        left.append(lease.expires_at - time.time() if lease is not None else -1.0)

    cp = store.checkpointer(lease_ttl=30, wait=20)
    graph = step_graph(on_step=on_step).compile(checkpointer=cp, store=store)

    async def pairs() -> None:
        for i in range(20):
            await asyncio.gather(
                graph.ainvoke(turn_input("a", 2), config(f"ta{i}", f"agent-{i}")),
                graph.ainvoke(turn_input("b", 2), config(f"tb{i}", f"agent-{i}")),
            )

    def threads() -> None:
        for i in range(20, 30):  # the same, each run on a thread of its own (invoke)
            both = [
                threading.Thread(
                    target=graph.invoke, args=(turn_input(x, 2), config(f"t{x}{i}", f"agent-{i}"))
                )
                for x in "ab"
            ]
            for t in both:
                t.start()
            for t in both:
                t.join()

    # The first run gave its slot back before its database release: the queued run re-took
    # the lease (same holder, same epoch), and the release then ended it under that run.
    asyncio.run(pairs())
    threads()
    assert len(left) == 120 and all(s > 0 for s in left), sorted(left)[:3]
    # One process's runs took turns: the second took a released lease, so the epoch stayed
    # (taken while still live, it would count as another process and fence the first out).
    assert {store.lease(f"agent-{i}").epoch for i in range(30)} == {1}
    cp.close()


class _Drains:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def request_drain(self, why: str) -> None:
        self.asked.append(why)


def test_a_late_renewal_of_the_previous_run_does_not_mark_the_next_one_lost(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_recall.checkpoint._lease import LeaseKeeper

    keeper = LeaseKeeper(store, holder="h", ttl=30, wait=0, fenced=True)
    control = _Drains()
    next_run: list[Any] = []
    renew_in_the_database = store.renew_lease

    def renewal_descheduled(*args: Any, **kwargs: Any) -> bool:
        ok = renew_in_the_database(*args, **kwargs)  # after the release: False
        next_run.append(keeper.try_acquire("agent", control))  # the queued run, meanwhile
        return bool(ok)

    monkeypatch.setattr(store, "renew_lease", renewal_descheduled)
    first = keeper.try_acquire("agent")
    keeper.release("agent")
    assert keeper.renew(first) is False
    # The next run took the lease as the same holder, at the same epoch: a verdict on the
    # first run's lease, told apart by epoch, drained it and made its end raise lease_lost.
    assert next_run[0].epoch == first.epoch
    assert next_run[0].lost is None and control.asked == []
    assert keeper.check_write("agent") == first.epoch
    assert keeper.release("agent") is None
    keeper.close()


def test_an_interrupt_inside_a_release_still_gives_the_agent_back(store: RecallStore) -> None:
    import sys

    from langgraph_recall.checkpoint._lease import HeldLease, LeaseKeeper

    keeper = LeaseKeeper(store, holder="h", ttl=30, wait=0, fenced=True)
    keeper.try_acquire("agent")
    fired: list[int] = []

    def in_release(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not LeaseKeeper.release.__code__:
            return None

        def line(frame: Any, event: str, arg: Any) -> Any:
            marked = any(isinstance(v, HeldLease) and v.releasing for v in frame.f_locals.values())
            if event == "line" and marked and not fired:
                fired.append(frame.f_lineno)
                raise KeyboardInterrupt  # Ctrl-C just after the lease was marked releasing
            return line

        return line

    sys.settrace(in_release)
    try:
        with pytest.raises(KeyboardInterrupt):
            keeper.release("agent")
    finally:
        sys.settrace(None)
    # The slot stayed, marked releasing: every later run of the agent here was refused, for good.
    assert fired and not keeper.is_busy("agent")
    keeper.try_acquire("agent")
    keeper.close()
