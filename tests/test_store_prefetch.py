"""PostgreSQL: the briefing's reads, learned once, sent together as one statement next time.

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


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement psycopg sends (a pipeline's too, one by one)."""
    import psycopg

    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def spy(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy)
    return sent


def test_the_reads_ahead_are_one_statement(pg_store: RecallStore, statements: list[str]) -> None:
    _history(pg_store, "one")
    first = pg_store.briefing("one").text
    statements.clear()
    assert pg_store.briefing("one").text == first
    assert len(statements) == 1, statements  # six reads, one statement, one round trip


def _kinds(store: RecallStore) -> None:
    with store._db.tx(write=True) as tx:
        tx.run(
            "CREATE TABLE kinds (id INT PRIMARY KEY, b BYTEA, f DOUBLE PRECISION, n BIGINT, "
            "t TEXT, ok BOOLEAN, j JSONB)"
        )
        for row in [
            (1, b"\x00\xff raw", 1.0, 2**40, "plain", True, '{"a": [1, 2.5, null]}'),
            (2, None, 0.1 + 0.2, None, "\\x41 is not bytes", None, None),
            (3, b"", -1e-300, -7, "", False, "[]"),
            (4, b'{,}"', 1700000000.123456, 0, 'a "quoted", {braced} NULL', True, '"s"'),
        ]:
            tx.run("INSERT INTO kinds VALUES (?, ?, ?, ?, ?, ?, CAST(? AS JSONB))", row)


# Reads of every shape the combined statement must carry back unchanged: each column type, NULLs,
# several rows in a given order, no row, no parameter (with a literal "%"), the same read twice.
_READS: list[tuple[str, tuple[Any, ...]]] = [
    ("SELECT id, b, f, n, t, ok, j FROM kinds WHERE id > ? ORDER BY id DESC", (0,)),
    ("SELECT t, b FROM kinds WHERE id = ?", (2,)),
    ("SELECT id FROM kinds WHERE id > ? ORDER BY id", (99,)),
    ("SELECT '100%' AS pct, count(*) FROM kinds", ()),
    ("SELECT f FROM kinds WHERE t LIKE ? ORDER BY id", ("a%",)),
    ("SELECT t, b FROM kinds WHERE id = ?", (2,)),
]


def _read_all(store: RecallStore, key: str) -> list[list[tuple[Any, ...]]]:
    with store._db.tx(learn=key) as tx:
        return [tx.all(sql, params) for sql, params in _READS]


def test_answers_read_ahead_are_exactly_the_reads_own(
    pg_store: RecallStore, answered: list[bool], statements: list[str]
) -> None:
    _kinds(pg_store)
    direct = _read_all(pg_store, "kinds")
    assert not any(answered)
    answered.clear()
    statements.clear()
    ahead = _read_all(pg_store, "kinds")
    assert answered == [True] * len(_READS) and len(statements) == 1
    assert ahead == direct
    # Not only equal: the same types (bytes, not a hex string; a float, not an int or Decimal).
    assert [[[type(v) for v in row] for row in rows] for rows in ahead] == [
        [[type(v) for v in row] for row in rows] for rows in direct
    ]
    assert [row[0] for row in ahead[0]] == [4, 3, 2, 1]  # the read's own order
    assert ahead[3] == [("100%", 4)]


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


def test_a_new_agents_first_briefing_borrows_the_reads_of_the_last(
    pg_store: RecallStore, pg_dsn: str, answered: list[bool], statements: list[str]
) -> None:
    # Each new thread is a new agent by default: its first briefing would otherwise make its
    # reads one round trip each.
    _history(pg_store, "first-agent")
    pg_store.briefing("first-agent")
    _history(pg_store, "next-agent")
    answered.clear()
    statements.clear()
    borrowed = pg_store.briefing("next-agent").text
    # Every read but the last, the outcomes of the shown calls: those are looked up by action
    # ids, which hash the agent id in (the borrowed plan asked for the other agent's calls),
    # so that one read runs on its own.
    assert answered[:-1] and all(answered[:-1]) and not answered[-1], answered
    assert len(statements) == 2 and "recall_actions" in statements[-1]
    with RecallStore.open(pg_dsn) as fresh:  # nothing learned there: every read on its own
        assert fresh.briefing("next-agent").text == borrowed
    assert "next-agent" in borrowed and "first-agent" not in borrowed


def test_a_borrowed_read_that_does_not_fit_runs_on_its_own(
    pg_store: RecallStore, pg_dsn: str, answered: list[bool]
) -> None:
    # "x.y" is escaped in its namespaces ("x%2Ey"), which the swap of ids does not know: those
    # reads miss and run; the answer is the same.
    _history(pg_store, "plain")
    pg_store.briefing("plain")
    _history(pg_store, "x.y")
    answered.clear()
    text = pg_store.briefing("x.y").text
    assert any(answered) and not all(answered), answered
    with RecallStore.open(pg_dsn) as fresh:
        assert fresh.briefing("x.y").text == text


def test_a_plan_is_borrowed_only_under_the_same_kind() -> None:
    plans = _prefetch.Plans()
    read = (("SELECT 1 WHERE ? = ?", ("a-1", "recall.a-1.state")), 1)
    plans.put(("briefing", "a-1"), [read])
    assert plans.get(("briefing", "b-2")) == [
        (("SELECT 1 WHERE ? = ?", ("b-2", "recall.b-2.state")), 1)
    ]
    assert plans.get(("other", "b-2")) == []
    assert plans.get("briefing") == []
    assert plans.get(("briefing", "a-1")) == [read]  # its own, not a borrowed one
