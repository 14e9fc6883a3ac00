"""PostgreSQL: recording never reads the recorded ids from a plan made while the table was small.

psycopg prepares a statement after five runs, and the server then keeps one generic plan for
it for the connection's life, made from the statistics of that moment. For a read of which
messages are recorded for an agent, such a plan, made on a small or never-analyzed table
(autovacuum off), used the primary key (agent_id, seq) and read every turn of the agent for
each message: at 5.7k turns, 2.5 ms a message instead of 30 µs. The one-statement recording
of new messages reads no recorded turn at all (``test_store_records``); the locking path,
which a long or partly recorded list takes, does read them, and is planned afresh.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from langgraph_recall.store import RecallStore

pytestmark = pytest.mark.postgres


def _pair(k: int) -> list[Any]:
    return [
        AIMessage(f"step {k}", id=f"ai-{k}", tool_calls=[{"name": "t", "args": {}, "id": f"c{k}"}]),
        ToolMessage(str(k), tool_call_id=f"c{k}", id=f"tm-{k}"),
    ]


def _prepared(store: RecallStore) -> list[tuple[str, int]]:
    pool = store._db.pool  # type: ignore[attr-defined]
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT statement, generic_plans FROM pg_prepared_statements"
        ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def test_a_partly_recorded_batch_reads_recorded_ids_with_a_fresh_plan(
    pg_store: RecallStore,
) -> None:
    """A short batch with a message recorded already goes to the locking path too."""
    store = pg_store
    for k in range(12):  # past psycopg's prepare threshold and the server's five custom plans
        assert store.record("a", [*_pair(k - 1), *_pair(k)] if k else _pair(k)) == 2
    assert len(store.turns("a")) == 24
    reads = [(s, g) for s, g in _prepared(store) if "SELECT msg_id FROM recall_turns" in s]
    assert reads == [], f"the recorded ids were read from a prepared plan: {reads}"


def test_a_long_list_reads_recorded_ids_with_a_fresh_plan(
    pg_store: RecallStore,
) -> None:
    """More than ONE_STATEMENT_MAX messages take the locking path, whose read of the ids
    already recorded has the same choice of index."""
    from langgraph_recall.store._transcript import ONE_STATEMENT_MAX

    store = pg_store
    history = [m for k in range(ONE_STATEMENT_MAX) for m in _pair(k)]
    for _ in range(7):  # the whole history again and again: nothing new after the first
        store.record("b", history)
    assert len(store.turns("b")) == len(history)
    reads = [(s, g) for s, g in _prepared(store) if "SELECT msg_id FROM recall_turns" in s]
    assert reads == [], f"the recorded ids were read from a prepared plan: {reads}"
