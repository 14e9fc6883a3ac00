"""An agent's actions come back in the order they were claimed, even within one clock tick."""

from __future__ import annotations

from langgraph_recall.store import RecallStore


def test_actions_keep_claim_order_when_ids_sort_the_other_way(store: RecallStore) -> None:
    # Ids that sort in reverse of the claim order: ordering by time (milliseconds on SQLite)
    # and then by id would list same-millisecond claims backwards, and undo would walk them
    # in the wrong order.
    ids = [f"z{99 - i:02d}" for i in range(30)]
    for action_id in ids:
        store.claim("agent", action_id, tool="t", args={"i": action_id}, args_digest=action_id)
    assert [a.action_id for a in store.actions("agent")] == ids
    assert [a.action_id for a in store.actions("agent", open_only=True)] == ids


def test_an_agent_id_with_a_dot_does_not_share_items_with_another_agent(
    store: RecallStore,
) -> None:
    # Namespace labels are joined with "."; an unescaped "x.y" would land under ("recall",
    # "x", "y", ...) and a search over agent "x" would return agent "x.y"'s working state.
    store.update_working_state("x.y", goal="the dotted agent's goal")
    store.update_working_state("x", goal="x's goal")
    assert store.working_state("x.y") == {"goal": "the dotted agent's goal"}
    found = store.search(("recall", "x"))
    assert [i.value["goal"] for i in found] == ["x's goal"]


def test_messages_never_show_a_dsn_password() -> None:
    # Errors and `store.target` print where the store lives; a password must not leak there.
    from langgraph_recall.store._db import _redact

    assert _redact("postgresql://bob:s3cret@db:5432/app") == "postgresql://bob@db:5432/app"
    assert "s3cret" not in _redact("host=db password=s3cret dbname=app")
    assert "s 3" not in _redact("host=db password='s 3' dbname=app")
    # libpq takes a quote inside a quoted value as \' (psycopg's conninfo reads "it's s3").
    assert _redact(r"host=db password='it\'s s3' dbname=app") == "host=db password=*** dbname=app"
    # libpq takes the password as a query parameter too.
    assert _redact("postgresql://bob@db/app?sslmode=require&password=s3cret&x=1") == (
        "postgresql://bob@db/app?sslmode=require&password=***&x=1"
    )
    assert _redact("postgresql://db/app?PASSWORD=s3@cret") == "postgresql://db/app?PASSWORD=***"
    # A driver's message may quote the password back (libpq, for a raw "%" in it).
    from langgraph_recall.store._db import _scrub

    said = 'invalid percent-encoded token: "s3%zzcret"'
    assert (
        _scrub(said, "postgresql://bob:s3%zzcret@db/app") == 'invalid percent-encoded token: "***"'
    )
    assert "s3%zz" not in _scrub(said, "postgresql://db/app?password=s3%zzcret")
    assert _scrub("no password x", "postgresql://bob@db/app") == "no password x"
    assert _scrub('bad "it\'s s3" here', r"password='it\'s s3'") == 'bad "***" here'
