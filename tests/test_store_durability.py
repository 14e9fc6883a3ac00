"""``RecallStore.open(..., durability=...)``: what each setting turns on, on both databases.

"process": commits survive any process of the application being killed (SQLite WAL with
synchronous=NORMAL; PostgreSQL synchronous_commit=off on langgraph-recall's connections).
"power": they survive power loss too (synchronous=FULL; synchronous_commit=on). The default is
"process" on SQLite and the server's own setting on PostgreSQL. The same setting reaches the
connections of ``store.checkpointer()``, whose checkpoints are part of the same guarantees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from langgraph_recall import RecallError, RecallStore


def _store_setting(store: RecallStore, *, writer: bool = False) -> str:
    """The setting of a connection of the store (``writer``: on SQLite, the one that writes,
    which the same-database saver shares)."""
    with store._db.tx(write=writer) as tx:
        if store.dialect == "sqlite":
            row = tx.one("PRAGMA synchronous")
            return {1: "NORMAL", 2: "FULL"}[int(row[0])]  # type: ignore[index]
        return str(tx.one("SHOW synchronous_commit")[0])  # type: ignore[index]


def _saver_setting(store: RecallStore) -> str:
    saver = store.checkpointer()
    try:
        inner: Any = saver.inner
        if store.dialect == "sqlite":
            value = inner.conn.execute("PRAGMA synchronous").fetchone()[0]
            return {1: "NORMAL", 2: "FULL"}[int(value)]
        with inner.conn.connection() as conn:  # PostgresSaver on its pool
            return str(conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"])
    finally:
        saver.close()


def _server_default(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]


@pytest.mark.parametrize("durability", [None, "process", "power"])
def test_each_setting_reaches_the_store_and_its_checkpointer(
    backend: str, store_target: str, durability: str | None
) -> None:
    if backend == "sqlite":
        expected = "FULL" if durability == "power" else "NORMAL"
    else:
        expected = {None: _server_default(store_target), "process": "off", "power": "on"}[
            durability
        ]
    kwargs = {} if durability is None else {"durability": durability}
    with RecallStore.open(store_target, **kwargs) as store:
        assert _store_setting(store) == expected
        assert _saver_setting(store) == expected


def test_an_unknown_setting_is_refused_before_anything_is_opened(
    backend: str, store_target: str
) -> None:
    with pytest.raises(RecallError) as err:
        RecallStore.open(store_target, durability="fast")
    assert err.value.code == "invalid_value"
    assert "'process' or 'power'" in str(err.value)
    if backend == "sqlite":
        assert not os.path.exists(store_target)


def test_postgres_process_durability_keeps_an_intent_when_the_claimer_is_killed(
    pg_dsn: str,
) -> None:
    # A worker records an intent under synchronous_commit=off and dies the moment the claim
    # returns (os._exit: no cleanup, no pool close). The commit had returned, so the intent
    # is there for the next process: what "process" promises.
    script = textwrap.dedent(
        f"""
        import os
        from langgraph_recall import RecallStore
        store = RecallStore.open({pg_dsn!r}, durability="process")
        claim = store.claim("agent", "act-1", tool="send", args={{"to": "a"}}, args_digest="d")
        assert claim.status == "claimed"
        os._exit(0)
        """
    )
    env = {**os.environ, "LANGGRAPH_RECALL_SECRET": "s" * 32}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert done.returncode == 0
    with RecallStore.open(pg_dsn, secret="s" * 32) as store:
        (action,) = store.actions("agent", open_only=True)
        assert action.action_id == "act-1" and action.status == "open"


# --- a call's end, flushed by the write that follows it ------------------------------------------


def _claimed(store: RecallStore, action_id: str) -> Any:
    return store.claim(
        "agent-f", action_id, tool="send", args={"to": "a"}, args_digest="d" * 64
    ).action


def test_a_commit_flushed_later_relaxes_only_its_own_transaction(
    backend: str, store_target: str
) -> None:
    """``flush_later`` lets one commit skip the disk flush (the next write's flush carries it);
    every other commit on the connection, a claim's included, still waits for the disk."""
    from langgraph_recall.store import _actions

    # One connection on PostgreSQL, so the statement after the end is on the same session.
    store = RecallStore.open(store_target, durability="power", pool_size=1)
    try:
        action = _claimed(store, "act-1")
        with store._db.tx(write=True, flush_later=True) as tx:
            assert _actions.end(tx, action.action_id, action.attempt, "done", result="ok")
            if backend == "sqlite":
                assert int(tx.one("PRAGMA synchronous")[0]) == 1  # type: ignore[index]
            else:
                assert tx.one("SHOW synchronous_commit")[0] == "off"  # type: ignore[index]
        assert _store_setting(store, writer=True) == ("FULL" if backend == "sqlite" else "on")
        assert store.action(action.action_id).status == "done"

        # The store's own call, autocommitted on PostgreSQL, leaves the session as it was too.
        second = _claimed(store, "act-2")
        assert store.end(second.action_id, second.attempt, "done", result=1, flush_later=True)
        assert _store_setting(store, writer=True) == ("FULL" if backend == "sqlite" else "on")
        assert store.action(second.action_id).status == "done"

        # A transaction that fails puts the setting back as well.
        with pytest.raises(ZeroDivisionError):
            with store._db.tx(write=True, flush_later=True):
                1 / 0  # noqa: B018
        assert _store_setting(store, writer=True) == ("FULL" if backend == "sqlite" else "on")
    finally:
        store.close()


def test_an_end_flushed_later_survives_its_process_being_killed(
    backend: str, store_target: str
) -> None:
    """The relaxed commit still commits: a worker records a call's end that way and dies the
    moment it returns (os._exit: no close, no later write to flush it); the end is there."""
    script = textwrap.dedent(
        f"""
        import os
        from langgraph_recall import RecallStore
        store = RecallStore.open({store_target!r}, durability="power")
        claim = store.claim("agent", "act-1", tool="send", args={{"to": "a"}}, args_digest="d")
        assert store._db.flushes_each_commit
        assert store.end("act-1", claim.action.attempt, "done", result="sent", flush_later=True)
        os._exit(0)
        """
    )
    env = {**os.environ, "LANGGRAPH_RECALL_SECRET": "s" * 32}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert done.returncode == 0
    with RecallStore.open(store_target, secret="s" * 32) as store:
        action = store.action("act-1")
        assert action.status == "done" and action.result == "sent"
        assert store.actions("agent", open_only=True) == []


def test_flush_later_changes_nothing_where_commits_do_not_wait(tmp_path: Any) -> None:
    store = RecallStore.open(str(tmp_path / "p.db"), durability="process")
    try:
        with store._db.tx(write=True, flush_later=True) as tx:
            assert tx.flush_later is False
            assert int(tx.one("PRAGMA synchronous")[0]) == 1  # type: ignore[index]
        assert _store_setting(store, writer=True) == "NORMAL"
    finally:
        store.close()


def test_a_tool_call_end_is_flushed_later_only_with_the_same_database_saver(
    tmp_path: Any,
) -> None:
    """An end committed on its own (here: two calls in one message, so neither rides the
    task's write) skips its flush only when the task's own write goes to the same database
    (the saver of ``store.checkpointer()``); with any other saver it keeps its own flush."""
    from fix_tools import build_graph, call, reply
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_recall import DurableToolNode, RecallCheckpointer

    @tool
    def send(to: str) -> str:
        """Send."""
        return f"sent to {to}"

    store = RecallStore.open(str(tmp_path / "r.db"), durability="power")
    seen: list[bool] = []
    real_end = store.end

    def spy(*args: Any, **kwargs: Any) -> bool:
        seen.append(bool(kwargs.get("flush_later")))
        return real_end(*args, **kwargs)

    store.end = spy  # type: ignore[method-assign]
    savers = {
        "same database": store.checkpointer(),
        "another saver, wrapped": RecallCheckpointer(InMemorySaver(), store=store),
        "another saver": InMemorySaver(),
    }
    try:
        found = {}
        for label, saver in savers.items():
            seen.clear()
            node = DurableToolNode([send], classes={"send": "external"})
            graph = build_graph(
                node,
                [reply("", call("send", to=label), call("send", to="x")), reply("done")],
                store=store,
                checkpointer=saver,
            )
            graph.invoke(
                {"messages": [HumanMessage("go")]},
                {"configurable": {"thread_id": label.replace(" ", "-")}},
                durability="sync",
            )
            found[label] = list(seen)
        assert found == {
            "same database": [True, True],
            "another saver, wrapped": [False, False],
            "another saver": [False, False],
        }
    finally:
        for saver in savers.values():
            if isinstance(saver, RecallCheckpointer):
                saver.close()
        store.close()
