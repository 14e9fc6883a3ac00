"""RecallCheckpointer is a faithful decorator of the saver it wraps."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fix_checkpoint import config, step_graph, threaded, turn_input
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.pregel._checkpoint import put_writes_accepts_task_path

from langgraph_recall import RecallError
from langgraph_recall.checkpoint import RecallCheckpointer
from langgraph_recall.store import RecallStore


@pytest.fixture
def sqlite_saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(str(tmp_path / "own.db"), check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


@pytest.fixture
def postgres_saver(pg_dsn: str) -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
        yield saver


class Spy(InMemorySaver):
    """An InMemorySaver that notes the arguments LangGraph passes it."""

    def __init__(self) -> None:
        super().__init__()
        self.task_paths: list[str] = []
        self.delta_calls = 0

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.task_paths.append(task_path)
        super().put_writes(config, writes, task_id, task_path)

    def get_delta_channel_history(self, *, config: Any, channels: Any) -> Any:
        self.delta_calls += 1
        return super().get_delta_channel_history(config=config, channels=channels)


def test_put_writes_receives_task_path(store: RecallStore) -> None:
    spy = Spy()
    cp = RecallCheckpointer(spy, store=store)
    # LangGraph sniffs the signature; a *args/**kwargs wrapper would silently lose task_path.
    assert put_writes_accepts_task_path(cp.put_writes)
    step_graph().compile(checkpointer=cp).invoke(turn_input("go", 1), config("t1"))
    assert any(p for p in spy.task_paths), spy.task_paths
    cp.close()


def test_serde_and_next_version_are_the_inner_savers(
    store: RecallStore, sqlite_saver: SqliteSaver
) -> None:
    cp = RecallCheckpointer(sqlite_saver, store=store)
    assert cp.serde is sqlite_saver.serde
    # Called per channel per step: the inner saver's own bound method, no wrapper frame.
    assert cp.get_next_version.__self__ is sqlite_saver  # type: ignore[attr-defined]
    assert cp.config_specs == sqlite_saver.config_specs
    cp.close()


def strict_saver() -> InMemorySaver:
    """A saver whose serde has an explicit msgpack allowlist (so one can be merged in)."""
    return InMemorySaver(serde=JsonPlusSerializer(allowed_msgpack_modules=[("datetime", "date")]))


def test_with_allowlist_reaches_the_inner_saver_and_shares_the_lease_state(
    store: RecallStore,
) -> None:
    inner = strict_saver()
    cp = RecallCheckpointer(inner, store=store)
    clone = cp.with_allowlist([("my_module", "MyType")])
    assert clone is not cp and isinstance(clone, RecallCheckpointer)
    assert clone.inner is not inner and clone.inner.serde is clone.serde
    assert ("my_module", "MyType") in clone.serde._allowed_msgpack_modules  # type: ignore[attr-defined]
    assert ("my_module", "MyType") not in cp.serde._allowed_msgpack_modules  # type: ignore[attr-defined]
    assert clone._shared is cp._shared and clone.holder == cp.holder
    assert cp.with_allowlist([("datetime", "date")]) is cp  # nothing new: no copy
    cp.close()


def test_allowlist_clone_made_by_compile_uses_the_same_lease(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph._internal import _serde

    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", True)  # LANGGRAPH_STRICT_MSGPACK=true
    cp = RecallCheckpointer(strict_saver(), store=store, lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    assert graph.checkpointer is not cp  # compile() re-wrapped it with the graph's allowlist
    assert graph.checkpointer.inner.serde is not cp.inner.serde
    graph.invoke(turn_input("go", 1), config("t1", "agent-1"))
    assert store.lease("agent-1").holder == cp.holder
    assert len(list(cp.list(config("t1")))) == 3  # the clone wrote into the same saver
    cp.close()


def test_context_manager_setup_and_attributes_pass_through(
    store: RecallStore, sqlite_saver: SqliteSaver
) -> None:
    with RecallCheckpointer(InMemorySaver(), store=store) as cp:
        step_graph().compile(checkpointer=cp).invoke(turn_input("go", 1), config("t1"))
    cp = RecallCheckpointer(sqlite_saver, store=store)
    assert cp.setup() is None and sqlite_saver.is_setup
    assert cp.conn is sqlite_saver.conn  # anything else users reach for on their saver
    with pytest.raises(AttributeError):
        cp.no_such_attribute  # noqa: B018
    cp.close()


def test_wrapping_twice_is_refused(store: RecallStore) -> None:
    cp = RecallCheckpointer(InMemorySaver(), store=store)
    with pytest.raises(RecallError):
        RecallCheckpointer(cp, store=store)
    cp.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sync_only_savers_serve_ainvoke(
    store: RecallStore, kind: str, request: pytest.FixtureRequest
) -> None:
    inner = request.getfixturevalue(f"{kind}_saver")
    bare = step_graph().compile(checkpointer=inner)
    with pytest.raises(NotImplementedError):
        asyncio.run(bare.ainvoke(turn_input("go", 1), config("bare")))
    cp = RecallCheckpointer(inner, store=store)
    graph = step_graph().compile(checkpointer=cp, store=store)
    out = asyncio.run(graph.ainvoke(turn_input("go", 2), config("t1")))
    assert out["n"] == 2
    assert asyncio.run(graph.aget_state(config("t1"))).values["n"] == 2
    listed = asyncio.run(_collect(cp.alist(config("t1"))))
    assert [c.config for c in listed] == [c.config for c in cp.list(config("t1"))]
    cp.close()


async def _collect(items: Any) -> list[Any]:
    return [item async for item in items]


def test_capabilities_mirror_the_inner_saver(
    store: RecallStore, sqlite_saver: SqliteSaver, postgres_saver: Any
) -> None:
    for inner in (InMemorySaver(), sqlite_saver, postgres_saver):
        cp = RecallCheckpointer(inner, store=store)
        mine = DetectedCapabilities.from_instance(cp).detected
        theirs = DetectedCapabilities.from_instance(threaded(inner)).detected
        assert mine == theirs, type(inner).__name__
        cp.close()
    cp = RecallCheckpointer(InMemorySaver(), store=store)
    with pytest.raises(NotImplementedError):
        cp.delete_for_runs(["r"])  # InMemorySaver has none: neither do we
    with pytest.raises(NotImplementedError):
        asyncio.run(cp.aprune(["t"]))
    cp.close()


def test_delta_channel_history_goes_to_the_inner_saver(store: RecallStore) -> None:
    spy = Spy()
    cp = RecallCheckpointer(spy, store=store)
    step_graph().compile(checkpointer=cp).invoke(turn_input("go", 1), config("t1"))
    head = cp.get_tuple(config("t1"))
    assert head is not None
    cp.get_delta_channel_history(config=head.config, channels=["messages"])
    asyncio.run(cp.aget_delta_channel_history(config=head.config, channels=["messages"]))
    assert spy.delta_calls == 2
    cp.close()


@pytest.mark.parametrize("what", ["checkpointer", "store"])
def test_a_closed_checkpointer_or_store_refuses_reads_and_runs_by_name(
    store_target: str, what: str
) -> None:
    # After close, get_state was sqlite3.ProgrammingError (store) or psycopg_pool.PoolClosed
    # (PostgreSQL, either), and on SQLite a closed store.checkpointer() kept working.
    store = RecallStore.open(store_target)
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t-closed", "closed")
    graph.invoke(turn_input("hi", 1), cfg)
    (cp if what == "checkpointer" else store).close()
    attempts: list[Any] = [
        lambda: graph.get_state(cfg),
        lambda: list(graph.get_state_history(cfg)),
        lambda: asyncio.run(graph.aget_state(cfg)),
        lambda: graph.invoke(turn_input("again", 1), cfg),
        lambda: asyncio.run(graph.ainvoke(turn_input("again", 1), cfg)),
        lambda: cp.delete_thread("t-closed"),
    ]
    for attempt in attempts:
        with pytest.raises(RecallError) as err:
            attempt()
        assert err.value.code == "closed"
        assert ("store.checkpointer()" if what == "checkpointer" else "RecallStore.open") in str(
            err.value
        )
    store.close()
    with RecallStore.open(store_target) as again:  # nothing was lost
        reopened = step_graph().compile(checkpointer=again.checkpointer(), store=again)
        assert reopened.get_state(cfg).values["n"] == 1
