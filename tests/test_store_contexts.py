"""Opening and closing, and calling sync and async methods from every place a user will:
a script, a thread pool, ``ainvoke`` of a graph, and a Jupyter cell (sync calls while an event
loop runs in the same thread, which LangGraph's own async stores refuse)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest
from fix_checkpoint import chain
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from langgraph_recall import RecallError
from langgraph_recall.store import RecallStore

# --- open and close ------------------------------------------------------------------------


def test_open_as_a_plain_call_and_close_twice(store_target: str) -> None:
    store = RecallStore.open(store_target)
    store.put(("a",), "k", {"v": 1})
    assert store.dialect in ("sqlite", "postgres") and store.target
    store.close()
    store.close()
    with RecallStore.open(store_target) as again:
        assert again.get(("a",), "k").value == {"v": 1}


def test_open_as_a_context_manager_closes_on_exit(store_target: str) -> None:
    with RecallStore.open(store_target) as store:
        store.put(("a",), "k", {"v": 1})
    with pytest.raises(RecallError) as err:
        store.get(("a",), "k")
    assert err.value.code == "closed" and "open it again" in str(err.value)


async def test_open_as_an_async_context_manager(store_target: str) -> None:
    async with RecallStore.open(store_target) as store:
        await store.aput(("a",), "k", {"v": 1})
        assert (await store.aget(("a",), "k")).value == {"v": 1}
        assert await store.arecord("ag", [HumanMessage("hi", id="1")]) == 1
    with pytest.raises(RecallError) as err:
        await store.aget(("a",), "k")
    assert err.value.code == "closed"


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: _Chat) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"re: {last.content}", id=f"r-{last.id}")]}


def test_memory_opens_a_store_of_its_own_that_goes_when_closed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's own ":memory:" is one database per connection; the store reads on several, so
    # it gave "no such table" and left a ":memory:.secret" file in the working folder.
    monkeypatch.chdir(tmp_path)
    first, second = RecallStore.open(":memory:"), RecallStore.open("sqlite:///:memory:")
    try:
        assert first.record("ag", [HumanMessage("hi", id="m1")]) == 1
        assert [t.msg_id for t in first.turns("ag")] == ["m1"]
        assert second.turns("ag") == [], "each :memory: store is its own"
        graph = chain(_Chat, ("reply", _reply)).compile(
            checkpointer=first.checkpointer(), store=first
        )
        graph.invoke(
            {"messages": [HumanMessage("go", id="m2")]}, {"configurable": {"thread_id": "t"}}
        )
        assert [t.msg_id for t in first.turns("t")] == ["m2", "r-m2"]
        folder = os.path.dirname(first.target)
        assert os.path.exists(first.target)
    finally:
        first.close()
        second.close()
    assert not os.path.exists(folder), "its folder is removed on close"
    assert os.listdir(tmp_path) == [], "nothing left in the working folder"


def test_an_empty_path_is_refused_and_creates_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for empty in ("", "sqlite:///", "  "):
        with pytest.raises(RecallError) as err:
            RecallStore.open(empty)
        assert err.value.code == "invalid_value" and ":memory:" in str(err.value)
    assert os.listdir(tmp_path) == []


def test_a_relative_path_keeps_naming_the_same_file_after_a_chdir(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    with RecallStore.open("recall.db") as store:
        store.put(("docs",), "kept", {"v": 1})
        monkeypatch.chdir(tmp_path / "elsewhere")
        seen: list[Any] = []
        # The only idle reader is busy, so the other thread's read opens a new connection.
        with store._db.tx():
            reader = threading.Thread(target=lambda: seen.append(store.get(("docs",), "kept")))
            reader.start()
            reader.join(30)
        # It opened (and created) elsewhere/recall.db: "no such table", or nothing found.
        assert [item.value for item in seen] == [{"v": 1}]
        assert os.listdir(tmp_path / "elsewhere") == []


def test_the_password_is_not_shown(pg_database: str) -> None:
    dsn = pg_database.replace("postgres@", "postgres:hunter2@", 1)
    with RecallStore.open(dsn) as store:
        assert "hunter2" not in store.target and "hunter2" not in repr(store)


# --- from a script -------------------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from langchain_core.messages import HumanMessage
    from langgraph_recall.store import RecallStore

    store = RecallStore.open(sys.argv[1])
    store.put(("script",), "sync", {"v": 1})
    store.record("script-agent", [HumanMessage("from a script", id="s1")])

    async def main():
        await store.aput(("script",), "async", {"v": 2})
        await store.arecord("script-agent", [HumanMessage("and async", id="s2")])
        return (await store.aget(("script",), "sync")).value

    seen = asyncio.run(main())
    print(json.dumps({"seen": seen, "turns": [t.msg_id for t in store.turns("script-agent")]}))
    store.close()
    """
)


def test_sync_and_async_methods_from_a_script(store_target: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, store_target], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "seen": {"v": 1},
        "turns": ["s1", "s2"],
    }
    with RecallStore.open(store_target) as store:
        assert store.get(("script",), "async").value == {"v": 2}


# --- from threads --------------------------------------------------------------------------


def test_sync_and_async_methods_from_a_thread_pool(store: RecallStore) -> None:
    def work(n: int) -> tuple[int, str, int]:
        agent = f"agent-{n}"
        store.record(agent, [HumanMessage(f"m{i}", id=f"{n}-{i}") for i in range(5)])
        claim = store.claim(agent, "shared-action", tool="t", args={}, args_digest="d")
        store.put(("threads",), str(n), {"n": n})

        async def twin() -> int:
            await store.arecord(agent, [HumanMessage("late", id=f"{n}-late")])
            return len(await store.aturns(agent))

        return n, claim.status, asyncio.run(twin())

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(16)))
    assert sorted(r[2] for r in results) == [6] * 16
    assert sorted(r[1] for r in results).count("claimed") == 1
    assert len(store.search(("threads",), limit=100)) == 16


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_threads_that_end_do_not_leave_connections_open(store: RecallStore) -> None:
    """Each asyncio.run() has its own executor threads; a notebook calls it again and again."""
    store.put(("a",), "k", {"v": 1})
    asyncio.run(store.aget(("a",), "k"))
    gc.collect()
    before = _open_fds()
    for _ in range(100):
        asyncio.run(store.aget(("a",), "k"))
    for _ in range(20):
        threads = [threading.Thread(target=store.get, args=(("a",), "k")) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    gc.collect()
    assert _open_fds() - before < 20
    assert store.get(("a",), "k").value == {"v": 1}


# --- from a graph ----------------------------------------------------------------------------


class _State(TypedDict):
    n: int
    seen: list[int]


async def _async_node(state: _State, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    await runtime.store.aput(("graph",), "k", {"n": state["n"]})
    return {}


def _sync_node(state: _State, runtime: Runtime) -> dict[str, Any]:
    store = runtime.store
    assert isinstance(store, RecallStore)
    item = store.get(("graph",), "k")
    store.record("graph-agent", [HumanMessage(f"n={state['n']}", id=f"g{state['n']}")])
    return {"seen": [*state["seen"], item.value["n"]]}


async def test_a_graph_uses_the_store_under_ainvoke(store: RecallStore) -> None:
    graph = chain(_State, ("write", _async_node), ("read", _sync_node)).compile(store=store)
    out = await graph.ainvoke({"n": 5, "seen": []})
    assert out["seen"] == [5]
    out = await graph.ainvoke({"n": 6, "seen": out["seen"]})
    assert out["seen"] == [5, 6]
    assert [t.msg_id for t in await store.aturns("graph-agent")] == ["g5", "g6"]


# --- Jupyter: sync calls while a loop runs in this thread ----------------------------------


async def test_sync_calls_work_while_an_event_loop_runs_in_this_thread(store: RecallStore) -> None:
    assert asyncio.get_running_loop().is_running()
    store.put(("cell",), "k", {"v": 1})
    assert store.get(("cell",), "k").value == {"v": 1}
    assert store.record("cell-agent", [HumanMessage("hi", id="1")]) == 1
    assert store.claim("cell-agent", "a1", tool="t", args={}, args_digest="d").claimed
    assert [i.key for i in store.search(("cell",))] == ["k"]
    assert (await store.aget(("cell",), "k")).value == {"v": 1}
    assert [t.msg_id for t in store.turns("cell-agent")] == ["1"]


NOTEBOOK_CELLS = [
    "import asyncio\nloop_running = asyncio.get_event_loop().is_running()\n"
    "from langchain_core.messages import HumanMessage\n"
    "from langgraph_recall import RecallStore\nstore = RecallStore.open(TARGET)",
    'store.put(("nb",), "k", {"v": 1})\n'
    'n = store.record("nb-agent", [HumanMessage("hi", id="1")])\n'
    'print(loop_running, n, store.get(("nb",), "k").value["v"])',
    'item = await store.aget(("nb",), "k")\nprint(item.value["v"], len(await store.aturns("nb-agent")))',
    "store.close()",
]


def test_a_real_jupyter_kernel(store_target: str) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [f"TARGET = {store_target!r}", *NOTEBOOK_CELLS]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3").execute()
    outputs = ["".join(o.get("text", "") for o in cell.outputs) for cell in nb.cells]
    assert outputs[2].split() == ["True", "1", "1"], "the cell ran with a live event loop"
    assert outputs[3].split() == ["1", "1"]
    with RecallStore.open(store_target) as store:
        assert [t.msg_id for t in store.turns("nb-agent")] == ["1"]


def test_closing_the_store_closes_its_checkpointers_and_their_connections(
    store_target: str,
) -> None:
    # store.close() used to leave store.checkpointer()'s own connections (and its leases)
    # open until the checkpointer itself was closed.
    from langgraph.checkpoint.base import empty_checkpoint

    store = RecallStore.open(store_target)
    saver = store.checkpointer()
    held = saver._shared.keeper.acquire("agent")
    assert store.lease("agent") is not None and store.lease("agent").holder == saver.holder
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.inner.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    store.close()
    # The lease was released before the connections closed: the next process starts at once.
    with RecallStore.open(store_target) as again:
        lease = again.lease("agent")
        assert lease is not None and lease.epoch == held.epoch and lease.expires_at == 0
    inner = saver.inner
    if store.dialect == "sqlite":
        with pytest.raises(Exception, match="closed"):
            inner.conn.execute("SELECT 1")
    else:
        assert inner.conn.closed  # the PostgresSaver's pool
    saver.close()  # closing it again is harmless


def test_a_reused_postgres_cursor_keeps_no_result_between_transactions(pg_database: str) -> None:
    # Each pooled connection keeps one cursor for all its transactions (building one costs
    # about as much as a short statement); the rows it last read must not stay in memory with
    # it while the connection sits idle in the pool.
    agent = f"cursor-{uuid.uuid4().hex}"  # the session's database is shared by tests
    with RecallStore.open(pg_database) as store:
        store.record(agent, [HumanMessage("x" * 200_000, id="big")])
        assert "x" * 1000 in store.turns(agent)[0].message.content
        with store._db.pool.connection() as conn:
            cursor = conn.__dict__["_recall_cursor"]
            assert cursor.pgresult is None
        assert store.turns(agent)[0].msg_id == "big"  # and it serves the next one
