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


def _store_setting(store: RecallStore) -> str:
    with store._db.tx() as tx:
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
