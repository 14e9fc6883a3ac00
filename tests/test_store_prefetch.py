"""PostgreSQL: the briefing's reads, learned once, sent together in one round trip next time.

The prefetch may only save round trips: every answer must be what the read would have given
when the transaction started, a write is never sent ahead, and a read that cannot run ahead
runs (and fails) on its own as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_recall import RecallStore
from langgraph_recall.store import _prefetch

pytestmark = pytest.mark.postgres


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each read of a learning transaction: whether it was answered from the prefetch."""
    seen: list[bool] = []
    take = _prefetch.Learned.take

    def spy(self: Any, sql: str, params: Any) -> Any:
        rows = take(self, sql, params)
        seen.append(rows is not None)
        return rows

    monkeypatch.setattr(_prefetch.Learned, "take", spy)
    return seen


def _history(store: RecallStore, agent: str) -> None:
    msgs: list[Any] = [HumanMessage("add the numbers", id="h0")]
    for k in range(4):
        msgs.append(
            AIMessage(
                f"step {k}",
                id=f"ai-{k}",
                tool_calls=[{"name": "add", "args": {"a": k}, "id": f"c{k}"}],
            )
        )
        msgs.append(ToolMessage(str(k), tool_call_id=f"c{k}", id=f"tm-{k}"))
    store.record(agent, msgs)
    store.update_working_state(agent, goal="add the numbers", progress="four done")


def test_a_second_briefing_reads_everything_in_one_round_trip(
    pg_store: RecallStore, answered: list[bool]
) -> None:
    _history(pg_store, "a1")
    first = pg_store.briefing("a1").text
    assert answered and not any(answered), "nothing is learned before the first briefing"
    answered.clear()
    second = pg_store.briefing("a1").text
    assert answered and all(answered), answered
    assert second == first


def test_a_prefetched_briefing_sees_what_changed_since_the_last(
    pg_store: RecallStore, answered: list[bool]
) -> None:
    _history(pg_store, "a2")
    before = pg_store.briefing("a2").text
    pg_store.set_pointer("a2", "repo", "git@example.com:team/app.git")
    claim = pg_store.claim("a2", "act-1", tool="send_email", args={"to": "ops"}, args_digest="d")
    assert claim.claimed
    pg_store.update_working_state("a2", progress="five done")
    answered.clear()
    after = pg_store.briefing("a2").text
    assert any(answered)  # it did read ahead ...
    for new in ("git@example.com:team/app.git", "send_email", "five done"):
        assert new in after and new not in before  # ... what was there when it started


def _table(store: RecallStore) -> None:
    with store._db.tx(write=True) as tx:
        tx.run("CREATE TABLE counter (id INT PRIMARY KEY, n INT NOT NULL)")
        tx.run("INSERT INTO counter VALUES (1, 0)")


def test_a_write_is_never_sent_ahead(pg_store: RecallStore) -> None:
    _table(pg_store)
    with pg_store._db.tx(learn="k") as tx:
        assert tx.one("UPDATE counter SET n = n + 1 WHERE id = ? RETURNING n", (1,)) == (1,)
        assert tx.one("SELECT n FROM counter WHERE id = ?", (1,)) == (1,)
    with pg_store._db.tx(learn="k") as tx:  # learned: the SELECT only
        assert tx.one("SELECT n FROM counter WHERE id = ?", (1,)) == (1,)
    with pg_store._db.tx() as tx:
        assert tx.one("SELECT n FROM counter WHERE id = 1") == (1,)


def test_after_a_write_the_reads_made_ahead_are_not_used(
    pg_store: RecallStore, answered: list[bool]
) -> None:
    _table(pg_store)
    with pg_store._db.tx(learn="w") as tx:
        tx.one("SELECT n FROM counter WHERE id = ?", (1,))
        tx.one("SELECT n FROM counter WHERE id = ?", (1,))
    answered.clear()
    with pg_store._db.tx(learn="w") as tx:
        assert tx.one("SELECT n FROM counter WHERE id = ?", (1,)) == (0,)  # read ahead
        tx.run("UPDATE counter SET n = 5 WHERE id = ?", (1,))
        assert tx.one("SELECT n FROM counter WHERE id = ?", (1,)) == (5,)  # not the stale 0
    assert answered == [True, False]


def test_a_read_that_cannot_run_ahead_runs_on_its_own(pg_store: RecallStore) -> None:
    import psycopg

    _table(pg_store)
    with pg_store._db.tx(learn="gone") as tx:
        tx.one("SELECT n FROM counter WHERE id = ?", (1,))
        tx.one("SELECT count(*) FROM recall_turns")
    with pg_store._db.tx(write=True) as tx:
        tx.run("DROP TABLE counter")
    with pg_store._db.tx(learn="gone") as tx:
        assert tx.one("SELECT count(*) FROM recall_turns") == (0,)
        with pytest.raises(psycopg.errors.UndefinedTable):
            tx.one("SELECT n FROM counter WHERE id = ?", (1,))


def test_a_read_with_a_list_parameter_is_not_learned_and_still_runs(
    pg_store: RecallStore, answered: list[bool]
) -> None:
    for _ in range(2):  # the second time would be answered ahead, if it had been learned
        with pg_store._db.tx(learn="list") as tx:
            assert tx.one("SELECT 2 = ANY(?)", ([1, 2, 3],)) == (True,)
    assert answered == [False, False]


def test_plans_are_kept_for_a_bounded_number_of_keys(
    pg_store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long-lived process briefs many agents: the oldest plans go, the newest stay.
    monkeypatch.setattr(_prefetch, "MAX_PLANS", 3)
    for n in range(10):
        with pg_store._db.tx(learn=("agent", n)) as tx:
            tx.one("SELECT ?", (n,))
    plans = pg_store._db.plans  # type: ignore[attr-defined]
    assert [plans.get(("agent", n)) != [] for n in range(10)] == [False] * 7 + [True] * 3
