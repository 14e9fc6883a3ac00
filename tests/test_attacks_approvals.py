"""Attacks on approvals by someone who can write the database but holds no secret.

The attacker here has plain SQL (INSERT, UPDATE, DELETE; the append-only triggers dropped on
SQLite, bypassed with ``session_replication_role = replica`` on PostgreSQL) and LangGraph's
``update_state``; never the signing secret, never a person's answer. Every case runs on
SQLite and on PostgreSQL, against a real graph whose ``pay`` tool writes each execution to a
file: the tool never runs with other arguments than a person approved, never twice on one
decision, a later "no" wins, and deleting rows may make a person be asked again but never
runs anything. ``docs/security.md`` states what is and is not guaranteed.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import with_schema
from fix_tools import build_graph, pay_graph, read_effects, record_effect
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph_recall import InDoubt, RecallStore
from langgraph_recall.store._codec import dumps_typed
from langgraph_recall.store._schema import APPEND_ONLY_TABLES
from langgraph_recall.store._verify import verify
from langgraph_recall.testing import call, reply
from langgraph_recall.tools import DurableToolNode, IdempotencyKey
from langgraph_recall.tools._canonical import args_digest

_COLS = (
    "approval_id, agent_id, action_id, decision, args_type, args, args_digest, message, "
    "signature, created_at, task_id, asked, seq, attempt, key_id"
)


class Attacker:
    """Plain SQL on the store's database, past its append-only triggers, without the secret."""

    def __init__(self, target: str) -> None:
        self.sqlite = not target.startswith("postgresql://")
        if self.sqlite:
            self.conn: Any = sqlite3.connect(target, isolation_level=None)
            for table in APPEND_ONLY_TABLES:
                self.conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
                self.conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        else:
            import psycopg

            self.conn = psycopg.connect(target, autocommit=True)
            self.conn.execute("SET session_replication_role = replica")  # no triggers fire

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.sqlite:
            sql = sql.replace("?", "%s")
        cur = self.conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []

    def rows(self, action_id: str) -> list[dict[str, Any]]:
        """The action's approval rows, in chain order (as the attacker reads them)."""
        names = [c.strip() for c in _COLS.split(",")]
        got = self.run(
            f"SELECT {_COLS} FROM recall_approvals WHERE action_id = ? ORDER BY seq", (action_id,)
        )
        return [dict(zip(names, r, strict=True)) for r in got]

    def insert(self, row: dict[str, Any], **changes: Any) -> None:
        """Insert a copy of ``row`` (a new approval id unless given) with ``changes``."""
        new = {**row, "approval_id": row["approval_id"] + "-" + uuid.uuid4().hex[:4], **changes}
        names = list(new)
        self.run(
            f"INSERT INTO recall_approvals ({', '.join(names)}) "
            f"VALUES ({', '.join('?' for _ in names)})",
            tuple(new[n] for n in names),
        )

    def delete(self, approval_id: str) -> None:
        self.run("DELETE FROM recall_approvals WHERE approval_id = ?", (approval_id,))

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One database per engine for the whole module; each test uses agents of its own."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("attacks") / "recall.db")
    import psycopg

    dsn = request.getfixturevalue("pg_database")
    schema = "attacks_" + uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return with_schema(dsn, schema)


@pytest.fixture(scope="module")
def shared(target: str) -> Iterator[tuple[RecallStore, Any, Attacker]]:
    store = RecallStore.open(target)
    saver = store.checkpointer()
    attacker = Attacker(target)
    try:
        yield store, saver, attacker
    finally:
        attacker.close()
        saver.close()
        store.close()


@pytest.fixture
def store(shared: tuple[RecallStore, Any, Attacker]) -> RecallStore:
    return shared[0]


@pytest.fixture
def sql(shared: tuple[RecallStore, Any, Attacker]) -> Attacker:
    return shared[2]


@pytest.fixture
def agent(request: pytest.FixtureRequest) -> str:
    return f"{request.node.originalname}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def effects(tmp_path: Any) -> str:
    return str(tmp_path / "effects.log")


@pytest.fixture
def graph(shared: tuple[RecallStore, Any, Attacker], effects: str, agent: str) -> Any:
    store, saver, _ = shared
    return pay_graph(store, saver, effects, prefix=agent)


def _config(agent: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": agent}}


def _ask(graph: Any, agent: str, to: str = "alice") -> dict[str, Any]:
    """Run until the approval request; its value (action id, args, digest)."""
    out = graph.invoke({"messages": [HumanMessage(f"pay {to} 10")]}, _config(agent))
    [pending] = out["__interrupt__"]
    return pending.value  # type: ignore[no-any-return]


def _paid(effects: str) -> list[tuple[int, str]]:
    return [(e["amount"], e["to"]) for e in read_effects(effects)]


def _tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def _refused(out: dict[str, Any]) -> str:
    """The code the last tool message was refused with (none: it did not refuse)."""
    messages = _tool_messages(out)
    assert messages, out
    return str((messages[-1].artifact or {}).get("recall", {}).get("code"))


def _edit_saved_call(graph: Any, agent: str, amount: int = 9999, to: str = "mallory") -> None:
    """``update_state``: the saved call now pays mallory (same message id, same call id)."""
    config = _config(agent)
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    forged = dict(ai.tool_calls[0], args={"amount": amount, "to": to})
    graph.update_state(config, {"messages": [AIMessage(ai.content, id=ai.id, tool_calls=[forged])]})


def _untrusted(store: RecallStore, action_id: str) -> None:
    """The action's decisions are refused as a whole, and ``verify`` names a problem."""
    from langgraph_recall import ApprovalMismatch

    with pytest.raises(ApprovalMismatch) as err:
        store.latest_decision(action_id)
    assert "langgraph-recall verify" in str(err.value)
    assert any(action_id in p for p in verify(store).problems)


# --- forged requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "place", ["appended", "appended, not ascii", "instead of the real one", "outside the chain"]
)
def test_a_forged_request_for_edited_args_never_gets_signed(
    graph, store, sql, agent, effects, place
) -> None:
    request = _ask(graph, agent)
    action_id = request["action_id"]
    _edit_saved_call(graph, agent)
    mallory = args_digest("pay", {"amount": 9999, "to": "mallory"})
    [real] = sql.rows(action_id)
    if place == "appended":
        sql.insert(real, args_digest=mallory, signature="v2:" + "0" * 64, seq=2)
    elif place == "appended, not ascii":  # compared as bytes, never a TypeError
        sql.insert(real, args_digest=mallory, signature="v2:\u00e9", seq=2)
    elif place == "instead of the real one":
        sql.delete(real["approval_id"])
        sql.insert(real, args_digest=mallory, signature="v2:" + "0" * 64)
    else:  # a row of the old format, which nothing decides with any more
        sql.insert(real, args_digest=mallory, signature="0" * 64, seq=None)
    # The person sends a bare "yes": before, a genuine approve was signed over mallory's digest.
    out = graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert _paid(effects) == []
    assert _refused(out) == "approval_mismatch"
    assert all(
        r["args_digest"] != mallory or r["decision"] == "requested" for r in sql.rows(action_id)
    )
    if place != "outside the chain":
        _untrusted(store, action_id)


# --- rows copied from elsewhere -----------------------------------------------------------------


@pytest.mark.parametrize("source", ["another action", "another agent"])
def test_an_approve_copied_from_elsewhere_runs_nothing(
    shared, graph, store, sql, agent, effects, source, tmp_path
) -> None:
    # Elsewhere, a person approved the same payment and it ran.
    other_effects = str(tmp_path / "other.log")
    other_agent = agent + "-b"
    if source == "another action":  # same agent, another thread: another AI message
        config = {"configurable": {"thread_id": other_agent, "agent_id": agent}}
        other = pay_graph(shared[0], shared[1], other_effects, prefix=other_agent)
    else:
        config = _config(other_agent)
        other = pay_graph(shared[0], shared[1], other_effects, prefix=other_agent)
    first = other.invoke({"messages": [HumanMessage("pay")]}, config)["__interrupt__"][0].value
    other.invoke(Command(resume={"type": "approve"}), config)
    assert _paid(other_effects) == [(10, "alice")]
    [_, approve] = sql.rows(first["action_id"])
    # Here, the same call waits for a person; the attacker copies that "yes" in.
    request = _ask(graph, agent)
    for changes in (
        {"action_id": request["action_id"], "seq": 2},  # the row as it was, moved
        {"action_id": request["action_id"], "seq": 2, "agent_id": agent},
    ):
        sql.insert(approve, **changes)
        out = graph.invoke(None, _config(agent))  # a worker picks the run up
        assert _paid(effects) == [] and _refused(out) == "approval_mismatch"
        _untrusted(store, request["action_id"])
        [_, copied] = sql.rows(request["action_id"])
        assert any(
            f"{copied['approval_id']} for action {request['action_id']} is a copy of decision "
            f"{approve['approval_id']}" in p
            for p in verify(store).problems
        )
        sql.delete(copied["approval_id"])


# --- a spent "yes" used again -------------------------------------------------------------------


def _in_doubt_pay(effects: str, flag: str) -> Any:
    """pay(amount, to): pays, then the first time loses the bank's answer (``InDoubt``)."""

    @tool
    def pay(amount: int, to: str, key: IdempotencyKey) -> str:
        """Pay someone."""
        record_effect(effects, what="pay", amount=amount, to=to, key=key)
        if not os.path.exists(flag):
            open(flag, "w").close()
            raise InDoubt("the bank did not answer")
        return f"paid {amount} to {to}"

    return pay


def _paid_then_settled_not_done(
    shared: Any, agent: str, effects: str, flag: str
) -> tuple[Any, str, dict[str, Any]]:
    """An approved payment went out, its answer was lost, and a person wrongly settled it as
    not done. The graph, the action and its (spent) approve row."""
    store, saver, sql = shared
    node = DurableToolNode(
        [_in_doubt_pay(effects, flag)], classes={"pay": "external"}, approve=("pay",)
    )
    script = [reply("", call("pay", amount=10, to="alice")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver, name_prefix=agent)
    action_id = _ask(graph, agent)["action_id"]
    graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert _paid(effects) == [(10, "alice")]
    store.resolve(action_id, "not_done", note="no payment seen yet")
    [_, approve] = sql.rows(action_id)
    return graph, action_id, approve


def _run_tools_again(graph: Any, agent: str) -> dict[str, Any]:
    """A worker runs the tools again from the checkpoint before them."""
    config = _config(agent)
    before = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    return graph.invoke(None, before.config)  # type: ignore[no-any-return]


def _drop_spend(sql: Attacker, approval_id: str) -> None:
    sql.run("DELETE FROM recall_approval_spends WHERE approval_id = ?", (approval_id,))


def _drop_attempt(sql: Attacker, action_id: str) -> None:
    sql.run("DELETE FROM recall_actions WHERE action_id = ?", (action_id,))


@pytest.mark.parametrize("how", ["new id", "same id", "spend deleted", "attempt deleted"])
def test_a_spent_approve_put_back_does_not_run_the_call_again(
    shared, store, sql, agent, effects, tmp_path, how
) -> None:
    graph, action_id, approve = _paid_then_settled_not_done(
        shared, agent, effects, str(tmp_path / "flag")
    )
    if how == "new id":  # the replay: the spent row again, under a new id and place
        sql.insert(approve, seq=3)
    elif how == "same id":  # the same row again: the original deleted, re-inserted as new
        sql.delete(approve["approval_id"])
        _drop_spend(sql, approve["approval_id"])
        sql.insert(approve, approval_id=approve["approval_id"])
    elif how == "spend deleted":
        _drop_spend(sql, approve["approval_id"])
    else:  # the attempt it ran as deleted: the next claim is attempt 1 again
        _drop_attempt(sql, action_id)
    out = _run_tools_again(graph, agent)
    assert _paid(effects) == [(10, "alice")]  # once, as the one decision authorised
    assert _refused(out) == "approval_mismatch"
    if how == "new id":
        _untrusted(store, action_id)


def test_a_rollback_of_every_table_involved_runs_the_call_again_under_the_same_key(
    shared, sql, agent, effects, tmp_path
) -> None:
    """The limit no check inside the database can pass (docs/security.md): the attempt and its
    spend deleted together are the store as it was just after the "yes". The call runs again,
    with the key it ran with, so an API that honours idempotency keys executes it once."""
    graph, action_id, approve = _paid_then_settled_not_done(
        shared, agent, effects, str(tmp_path / "flag")
    )
    _drop_spend(sql, approve["approval_id"])
    _drop_attempt(sql, action_id)
    _run_tools_again(graph, agent)
    paid = read_effects(effects)
    assert [(e["amount"], e["to"]) for e in paid] == [(10, "alice")] * 2
    assert paid[0]["key"] == paid[1]["key"] == action_id


# --- a later "no" -------------------------------------------------------------------------------


def _approved_then_rejected(graph: Any, store: RecallStore, agent: str) -> tuple[str, Any]:
    """A "yes" recorded (an operator's UI; the run has not gone on yet), then a "no"."""
    request = _ask(graph, agent)
    action_id = request["action_id"]
    store.record_decision(agent, action_id, "approve", args_digest=request["digest"])
    store.record_decision(agent, action_id, "reject", message="not this month")
    return action_id, request


@pytest.mark.parametrize(
    "how", ["approve re-appended", "places swapped", "ids and times rewritten", "reject deleted"]
)
def test_a_later_no_wins_over_re_ordered_or_deleted_rows(
    graph, store, sql, agent, effects, how
) -> None:
    action_id, _ = _approved_then_rejected(graph, store, agent)
    request, approve, reject = sql.rows(action_id)
    newest = "9" * 20 + "-" + uuid.uuid4().hex[:8]  # sorts after every real id
    if how == "approve re-appended":  # the attack: the "yes" again, after the "no"
        sql.insert(approve, seq=4, approval_id=newest, created_at=9e12)
    elif how == "places swapped":
        sql.run(
            "UPDATE recall_approvals SET seq = 99 WHERE approval_id = ?", (approve["approval_id"],)
        )
        sql.run(
            "UPDATE recall_approvals SET seq = 2 WHERE approval_id = ?", (reject["approval_id"],)
        )
        sql.run(
            "UPDATE recall_approvals SET seq = 3 WHERE approval_id = ?", (approve["approval_id"],)
        )
    elif how == "ids and times rewritten":  # the "yes" made to look newest by id and time
        sql.run(
            "UPDATE recall_approvals SET approval_id = ?, created_at = ? WHERE approval_id = ?",
            (newest, 9e12, approve["approval_id"]),
        )
    else:  # the tail: the "no" deleted, leaving the "yes" newest
        sql.delete(reject["approval_id"])
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == []
    assert _refused(out) in ("approval_mismatch", "approval_denied")
    if how != "reject deleted":
        _untrusted(store, action_id)
    else:  # the "yes" was withdrawn when the "no" was recorded
        assert "withdrawn" in str(_tool_messages(out)[-1].content)


def test_a_later_no_recorded_through_the_store_wins(graph, store, agent, effects) -> None:
    action_id, _ = _approved_then_rejected(graph, store, agent)
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_denied"
    assert store.latest_decision(action_id).decision == "reject"  # type: ignore[union-attr]


# --- deleted decisions --------------------------------------------------------------------------


def test_a_deleted_reject_of_a_request_asks_again(graph, store, sql, agent, effects) -> None:
    request = _ask(graph, agent)
    store.record_decision(agent, request["action_id"], "reject", message="no")
    [_, reject] = sql.rows(request["action_id"])
    sql.delete(reject["approval_id"])
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == []
    assert out["__interrupt__"][0].value["action_id"] == request["action_id"]


def test_a_deleted_request_asks_again_and_the_answer_to_it_is_not_signed(
    graph, store, sql, agent, effects
) -> None:
    request = _ask(graph, agent)
    _edit_saved_call(graph, agent)
    [row] = sql.rows(request["action_id"])
    sql.delete(row["approval_id"])
    # The person approves what they saw (alice). The question's record is gone: the node had
    # to record it anew, for mallory, and this answer must not be taken as a "yes" to that.
    out = graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    [again] = out["__interrupt__"]
    assert "no longer on record" in again.value["problem"]
    assert again.value["args"] == {"amount": 9999, "to": "mallory"}
    assert [r["decision"] for r in sql.rows(request["action_id"])] == ["requested", "requested"]
    # The same answer seen again by a later run of the task is still not taken.
    out = graph.invoke(Command(resume={"type": "reject", "message": "not mallory"}), _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_denied"


def test_a_deleted_request_then_a_fresh_yes_runs_once(graph, sql, agent, effects) -> None:
    request = _ask(graph, agent)
    [row] = sql.rows(request["action_id"])
    sql.delete(row["approval_id"])
    out = graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert "no longer on record" in out["__interrupt__"][0].value["problem"]
    graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert _paid(effects) == [(10, "alice")]


def test_a_request_deleted_under_an_approve_leaves_a_gap(graph, store, sql, agent, effects) -> None:
    request = _ask(graph, agent)
    store.record_decision(agent, request["action_id"], "approve", args_digest=request["digest"])
    first, _ = sql.rows(request["action_id"])
    sql.delete(first["approval_id"])
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_mismatch"
    _untrusted(store, request["action_id"])
    assert any("is missing" in p for p in verify(store).problems)


# --- edited arguments ---------------------------------------------------------------------------


def test_args_edited_in_the_saved_message_after_a_yes_do_not_run(
    graph, store, agent, effects
) -> None:
    request = _ask(graph, agent)
    store.record_decision(agent, request["action_id"], "approve", args_digest=request["digest"])
    _edit_saved_call(graph, agent)
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_mismatch"


@pytest.mark.parametrize("also_digest", [False, True], ids=["args", "args and digest"])
def test_args_edited_inside_an_approve_row_do_not_run(
    graph, store, sql, agent, effects, also_digest
) -> None:
    request = _ask(graph, agent)
    edited = {"amount": 5, "to": "bob"}  # a person's edit, recorded by an operator's UI
    store.record_decision(
        agent, request["action_id"], "approve", args=edited, args_digest=args_digest("pay", edited)
    )
    _, approve = sql.rows(request["action_id"])
    forged = {"amount": 9999, "to": "mallory"}
    atype, adata = dumps_typed(forged)
    sets = "args_type = ?, args = ?" + (", args_digest = ?" if also_digest else "")
    params = (atype, adata, *([args_digest("pay", forged)] if also_digest else []))
    sql.run(
        f"UPDATE recall_approvals SET {sets} WHERE approval_id = ?",
        (*params, approve["approval_id"]),
    )
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_mismatch"
    _untrusted(store, request["action_id"])  # the stored arguments' bytes are signed too


def test_args_edited_inside_a_request_row_are_not_shown_or_used(
    graph, store, sql, agent, effects
) -> None:
    # What `langgraph-recall pending` and the briefing show a person is the row's arguments.
    request = _ask(graph, agent)
    [row] = sql.rows(request["action_id"])
    atype, adata = dumps_typed({"amount": 1, "to": "alice"})
    sql.run(
        "UPDATE recall_approvals SET args_type = ?, args = ? WHERE approval_id = ?",
        (atype, adata, row["approval_id"]),
    )
    assert request["action_id"] not in [a.action_id for a in store.pending_approvals(agent)]
    out = graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert _paid(effects) == [] and _refused(out) == "approval_mismatch"
    _untrusted(store, request["action_id"])


# --- two rows at one place ----------------------------------------------------------------------


def test_two_rows_can_never_hold_one_place_in_a_chain(graph, store, sql, agent) -> None:
    request = _ask(graph, agent)
    store.record_decision(agent, request["action_id"], "approve", args_digest=request["digest"])
    _, approve = sql.rows(request["action_id"])
    # Past every trigger, the unique index still refuses a second row at a taken place.
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        sql.insert(approve, seq=2, decision="reject")
    assert [r["decision"] for r in sql.rows(request["action_id"])] == ["requested", "approve"]


# --- verify names every bad row -----------------------------------------------------------------


def test_verify_names_copied_reordered_orphaned_gapped_and_badly_signed_rows(
    shared, target, store, sql, agent, capsys
) -> None:
    from langgraph_recall.cli import main

    def chain(action_id: str, *decisions: str) -> list[dict[str, Any]]:
        for decision in decisions:
            store.record_decision(agent, action_id, decision, args_digest="d")
        return sql.rows(action_id)

    source = chain(f"{agent}-source", "requested", "approve")
    chain(f"{agent}-copied", "requested")
    sql.insert(source[1], action_id=f"{agent}-copied", seq=2)
    reordered = chain(f"{agent}-reordered", "requested", "approve", "reject")
    sql.run(
        "UPDATE recall_approvals SET seq = 9 WHERE approval_id = ?", (reordered[1]["approval_id"],)
    )
    sql.run(
        "UPDATE recall_approvals SET seq = 2 WHERE approval_id = ?", (reordered[2]["approval_id"],)
    )
    sql.run(
        "UPDATE recall_approvals SET seq = 3 WHERE approval_id = ?", (reordered[1]["approval_id"],)
    )
    gapped = chain(f"{agent}-gapped", "requested", "approve", "reject")
    sql.delete(gapped[1]["approval_id"])
    badly = chain(f"{agent}-badly", "requested")
    sql.run(
        "UPDATE recall_approvals SET args_digest = 'mallory' WHERE approval_id = ?",
        (badly[0]["approval_id"],),
    )
    sql.insert(source[0], action_id=f"{agent}-orphan", agent_id=f"{agent}-nobody", seq=1)
    sql.run(
        "INSERT INTO recall_approval_spends (approval_id, action_id, attempt, created_at) "
        "VALUES (?, ?, 1, 0)",
        (f"{agent}-no-such-decision", f"{agent}-source"),
    )
    code, out, _ = _cli(capsys, main, "--db", target, "verify")
    assert code == 1
    expected = [
        f"{sql.rows(agent + '-copied')[1]['approval_id']} for action {agent}-copied is a copy of "
        f"decision {source[1]['approval_id']} (action {agent}-source",
        f"{reordered[2]['approval_id']} for action {agent}-reordered is out of order: it was "
        "signed for place 3, found at place 2",
        f"{reordered[1]['approval_id']} for action {agent}-reordered is out of order: it was "
        "signed for place 2, found at place 3",
        f"{gapped[2]['approval_id']} for action {agent}-gapped is at place 3, but place 2 is "
        "missing",
        f"{badly[0]['approval_id']} for action {agent}-badly has an invalid signature",
        f"for action {agent}-orphan names agent '{agent}-nobody', which has no records (orphaned)",
        f"the spend of decision {agent}-no-such-decision (action {agent}-source, attempt 1) names "
        "no recorded decision (orphaned)",
    ]
    for line in expected:
        assert line in out, (line, out)
    assert f"for action {agent}-source " not in out  # the chain copied from is intact


def _cli(capsys: Any, main: Any, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


# --- rows written before the chain --------------------------------------------------------------


def test_an_unspent_yes_from_before_the_upgrade_is_asked_again(
    graph, store, sql, agent, effects
) -> None:
    from langgraph_recall.store._approvals import sign_v1

    request = _ask(graph, agent)
    store.record_decision(agent, request["action_id"], "approve", args_digest=request["digest"])
    # As schema v8 left them: no place, no attempt, the v1 signature (made with the secret:
    # this is the old version's own record, not an attacker's).
    for row in sql.rows(request["action_id"]):
        sql.run(
            "UPDATE recall_approvals SET seq = NULL, attempt = NULL, signature = ? "
            "WHERE approval_id = ?",
            (sign_v1(store._secret, _as_approval(row)), row["approval_id"]),
        )
    assert store.latest_decision(request["action_id"]) is None
    out = graph.invoke(None, _config(agent))
    assert _paid(effects) == []
    assert out["__interrupt__"][0].value["action_id"] == request["action_id"]
    graph.invoke(Command(resume={"type": "approve"}), _config(agent))
    assert _paid(effects) == [(10, "alice")]
    assert not any(request["action_id"] in p for p in verify(store).problems)


def _as_approval(row: dict[str, Any]) -> Any:
    from langgraph_recall.store import Approval

    return Approval(**{k: v for k, v in row.items() if k not in ("args_type", "args")}, args=None)
