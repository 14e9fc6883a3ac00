"""A store or checkpointer opened before a fork refuses to work in the forked child.

The child inherits the parent's connections and its lease holder id. Before this guard, two
children of one parent both ran one thread at once on SQLite (they took the lease as one
holder), and on PostgreSQL the second hung on the inherited pool. Each test forks real child
processes (multiprocessing's "fork" start method) and checks what they did in the database, and
that the parent's own connections still work after its children closed their copies.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from langgraph_recall import RecallError, RecallStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

RAN, FORKED, OTHER_RECALL, CRASHED = 0, 3, 4, 5


class _State(TypedDict):
    n: int


def _graph(store: RecallStore, checkpointer: Any) -> Any:
    builder = StateGraph(_State)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=checkpointer, store=store)


def _in_children(work: Callable[[], None], report: Path, n: int = 2) -> list[int | None]:
    """Run ``work`` in ``n`` forked children at once; their exit codes (RAN, FORKED...).

    Each child writes the message of the error it met to ``report``-<i>."""

    def child(i: int) -> None:
        try:
            work()
        except RecallError as exc:
            Path(f"{report}-{i}").write_text(f"{exc.code}: {exc}")
            os._exit(FORKED if exc.code == "forked" else OTHER_RECALL)
        except BaseException as exc:  # noqa: BLE001 - reported through the exit code
            Path(f"{report}-{i}").write_text(repr(exc))
            os._exit(CRASHED)
        os._exit(RAN)

    procs = [mp.get_context("fork").Process(target=child, args=(i,)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        if p.is_alive():  # hung (an inherited pool): fail the test, do not hang it
            p.kill()
            p.join()
    return [p.exitcode for p in procs]


def test_a_store_opened_before_a_fork_refuses_in_the_child(
    store_target: str, tmp_path: Path
) -> None:
    store = RecallStore.open(store_target)
    checkpointer = store.checkpointer()
    try:
        graph = _graph(store, checkpointer)
        graph.invoke({"n": 0}, {"configurable": {"thread_id": "before"}})

        def work() -> None:
            try:
                graph.invoke({"n": 0}, {"configurable": {"thread_id": "shared"}})
            finally:
                # What a `with RecallStore.open(...)` block left in the child does: it must
                # not close the parent's connections (a psycopg close ends the server session).
                checkpointer.close()
                store.close()

        codes = _in_children(work, tmp_path / "report")
        messages = [(tmp_path / f"report-{i}").read_text() for i in range(2)]
        assert codes == [FORKED, FORKED], messages
        assert all("Open the store and its checkpointer in each process" in m for m in messages)
        # Nothing of theirs landed: no checkpoint of the thread, no lease taken for it.
        assert checkpointer.get_tuple({"configurable": {"thread_id": "shared"}}) is None
        assert "shared" not in {a.agent_id for a in store.agents()}

        # The parent's store and saver still work, on the connections the children inherited.
        out = graph.invoke({"n": 1}, {"configurable": {"thread_id": "after"}})
        assert out == {"n": 2}
        assert store.record("after-fork", [HumanMessage("still here", id="m1")]) == 1
        assert [t.msg_id for t in store.turns("after-fork")] == ["m1"]
    finally:
        checkpointer.close()
        store.close()


def test_each_record_call_is_refused_in_the_child_too(store_target: str, tmp_path: Path) -> None:
    # Store calls without a graph (records, items) go through the same check.
    with RecallStore.open(store_target) as store:
        store.put(("ns",), "k", {"v": 1})

        def work() -> None:
            store.record("agent", [HumanMessage("from the child", id="c1")])

        def read() -> None:
            store.get(("ns",), "k")

        assert _in_children(work, tmp_path / "w", n=1) == [FORKED]
        assert _in_children(read, tmp_path / "r", n=1) == [FORKED]
        assert store.turns("agent") == []
        item = store.get(("ns",), "k")
        assert item is not None and item.value == {"v": 1}


@pytest.mark.parametrize(
    "call", ["get_state", "update_state", "history", "wait_durable", "setup", "conn", "turn"]
)
def test_the_checkpointer_alone_is_refused_in_the_child(
    store_target: str, tmp_path: Path, call: str
) -> None:
    # Reading or editing a thread's state takes no lease: these reach the saver's inherited
    # connection without the store's check, so the checkpointer checks too.
    store = RecallStore.open(store_target)
    checkpointer = store.checkpointer()
    try:
        graph = _graph(store, checkpointer)
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"n": 0}, config)
        head = graph.get_state(config).config["configurable"]["checkpoint_id"]

        def work() -> None:
            if call == "get_state":
                graph.get_state(config)
            elif call == "update_state":
                graph.update_state(config, {"n": 100})
            elif call == "history":
                list(graph.get_state_history(config))
            elif call == "wait_durable":  # what a durable tool asks before its side effect
                checkpointer.wait_durable(config, head)
            elif call == "setup":
                checkpointer.setup()
            elif call == "conn":  # the inner saver's attributes, reached through the wrapper
                checkpointer.conn  # noqa: B018
            else:
                checkpointer.invoke(graph, {"n": 0}, config)

        assert _in_children(work, tmp_path / "s", n=1) == [FORKED]
        assert graph.get_state(config).values == {"n": 1}
    finally:
        checkpointer.close()
        store.close()


def test_making_a_checkpointer_in_the_child_is_refused_even_with_the_lock_held(
    store_target: str, tmp_path: Path
) -> None:
    # A thread of the parent is inside a write transaction when the process forks: the child's
    # copy of the store's write lock stays taken forever. Making the same-database saver there
    # must refuse at once, not take that lock (the child would hang).
    import threading

    from langgraph_recall import RecallCheckpointer

    store = RecallStore.open(store_target)
    try:
        inside, leave = threading.Event(), threading.Event()

        def writer() -> None:
            with store._db.tx(write=True) as tx:
                tx.run("SELECT 1")
                inside.set()
                leave.wait(30)

        thread = threading.Thread(target=writer)
        thread.start()
        assert inside.wait(30)
        try:

            def made_here() -> None:
                store.checkpointer()

            def wrapped_here() -> None:
                from langgraph.checkpoint.memory import InMemorySaver

                RecallCheckpointer(InMemorySaver(), store=store)

            assert _in_children(made_here, tmp_path / "m", n=1) == [FORKED]
            assert _in_children(wrapped_here, tmp_path / "w", n=1) == [FORKED]
        finally:
            leave.set()
            thread.join(30)
        store.put(("ns",), "k", {"v": 1})  # the parent's lock was given back
    finally:
        store.close()


async def test_async_calls_are_refused_in_the_child(store_target: str, tmp_path: Path) -> None:
    import asyncio

    store = RecallStore.open(store_target)
    checkpointer = store.checkpointer()
    try:
        graph = _graph(store, checkpointer)

        def work() -> None:
            asyncio.run(graph.ainvoke({"n": 0}, {"configurable": {"thread_id": "async"}}))

        assert _in_children(work, tmp_path / "a", n=1) == [FORKED]
        assert await checkpointer.aget_tuple({"configurable": {"thread_id": "async"}}) is None
    finally:
        checkpointer.close()
        store.close()


def test_a_store_opened_in_the_child_works(store_target: str, tmp_path: Path) -> None:
    # The fix the error names: open the store (and its checkpointer) after the fork.
    with RecallStore.open(store_target) as store:
        store.put(("ns",), "k", {"v": 1})  # the parent has used its own copy

        def work() -> None:
            with RecallStore.open(store_target) as mine, mine.checkpointer() as saver:
                _graph(mine, saver).invoke({"n": 0}, {"configurable": {"thread_id": "child"}})

        assert _in_children(work, tmp_path / "c", n=1) == [RAN]
        saver = store.checkpointer()
        try:
            saved = saver.get_tuple({"configurable": {"thread_id": "child"}})
            assert saved is not None and saved.checkpoint["channel_values"]["n"] == 1
        finally:
            saver.close()


def test_a_memory_store_keeps_its_folder_when_a_forked_child_exits() -> None:
    store = RecallStore.open(":memory:")
    try:
        folder = Path(store._db.path).parent
        pid = os.fork()
        if pid == 0:  # the child: run its exit handlers as a normal exit would, then leave
            try:
                atexit._run_exitfuncs()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert folder.is_dir(), "the child's exit removed the parent's store folder"
        store.put(("ns",), "k", {"v": 1})
    finally:
        store.close()
    assert not folder.exists()


def test_a_store_or_checkpointer_sent_to_another_process_is_refused_clearly(
    store_target: str,
) -> None:
    # multiprocessing's "spawn", a process pool's arguments, Ray: all pickle. The objects hold
    # connections and leases, so the error says to pass the path or DSN and open it there.
    import copy
    import pickle

    with RecallStore.open(store_target) as store:
        checkpointer = store.checkpointer()
        try:
            for obj, name in ((store, "RecallStore"), (checkpointer, "RecallCheckpointer")):
                with pytest.raises(RecallError) as err:
                    pickle.dumps(obj)
                assert err.value.code == "invalid_value"
                assert name in str(err.value) and "RecallStore.open" in str(err.value)
            assert copy.copy(store) is store  # one handle on one database
            clone = copy.copy(checkpointer)  # what with_allowlist builds on: shares the leases
            assert clone is not checkpointer and clone._shared is checkpointer._shared
            # Both still work after the attempts.
            store.put(("ns",), "k", {"v": 1})
            graph = _graph(store, clone)
            assert graph.invoke({"n": 0}, {"configurable": {"thread_id": "p"}}) == {"n": 1}
        finally:
            checkpointer.close()
