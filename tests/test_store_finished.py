"""A finished action is answered from memory once this process has seen it finish
(``store/_finished.py``), and only then: never an end that may still roll back, never one that
came second, never an action that can still change."""

from __future__ import annotations

from typing import Any

import pytest
from fix_store import captured_sql, count_transactions, ok_results, run_together
from fix_tools import build_graph, call, read_effects, record_effect, reply
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command, interrupt

from langgraph_recall import RecallError, RecallStore
from langgraph_recall.store import _actions, _finished
from langgraph_recall.store._finished import FinishedActions
from langgraph_recall.tools import DurableToolNode, IdempotencyKey

ARGS = {"to": "ops", "n": 1}


def _claim(store: RecallStore, action_id: str = "act-1", args: Any = ARGS) -> Any:
    return store.claim("agent", action_id, tool="notify", args=args, args_digest="d-1")


def _finish(store: RecallStore, action_id: str = "act-1", content: str = "sent") -> None:
    claim = _claim(store, action_id)
    assert claim.status == "claimed"
    assert store.end(
        action_id, claim.action.attempt, "done", result=ToolMessage(content, tool_call_id="c1")
    )


@pytest.fixture
def transactions(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    return count_transactions(store, monkeypatch)


def test_the_outcome_column_is_where_the_cache_looks() -> None:
    columns = [c.strip() for c in _actions._ACTION_COLS.split(",")]
    assert columns.index("a.outcome") == _finished._OUTCOME
    assert columns.index("a.action_id") == 0


def test_a_call_that_finished_here_is_answered_without_a_transaction(
    store: RecallStore, transactions: list[bool]
) -> None:
    _finish(store)
    transactions.clear()
    for _ in range(3):
        again = _claim(store)
        assert again.status == "done"
        assert again.action.result.content == "sent" and again.action.attempt == 1
    assert transactions == [], "a repeat of a call this process saw finish reads nothing"


def test_a_call_another_process_finished_is_read_once(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real process claims and ends the call; this one never saw it finish.
    ok_results(run_together(store_target, _finish, [("act-1", "from elsewhere")]))
    with RecallStore.open(store_target) as store:
        opened = count_transactions(store, monkeypatch)
        assert _claim(store).status == "done"
        assert len(opened) == 1, "the first repeat in a process reads the database"
        assert _claim(store).action.result.content == "from elsewhere"
        assert len(opened) == 1, "the second is answered from what the first read"


def test_each_repeat_gets_objects_of_its_own(store: RecallStore) -> None:
    # LangGraph's reducers set ids on messages in place: a shared result would carry one
    # run's id into the next repeat's answer.
    _finish(store)
    first, second = _claim(store).action, _claim(store).action
    assert first.result is not second.result and first.args is not second.args
    first.result.id = "set-by-a-reducer"
    first.args["to"] = "changed"
    third = _claim(store).action
    assert third.result.id is None and third.args == ARGS


def test_an_end_inside_a_transaction_that_rolls_back_is_not_kept(store: RecallStore) -> None:
    claim = _claim(store)
    with pytest.raises(RuntimeError), store._db.tx(write=True):
        assert store.end("act-1", claim.action.attempt, "done", result="sent")
        raise RuntimeError("the caller's transaction fails after the end")
    assert len(store._db.finished) == 0
    again = _claim(store)
    assert again.status == "in_doubt", "the end rolled back: the call is open, not done"


def test_an_end_that_came_second_is_not_kept(store: RecallStore) -> None:
    claim = _claim(store)
    # A person settled it first ("it did not happen"); the tool's own end comes too late.
    assert store.end("act-1", claim.action.attempt, "not_done", resolved_by="person")
    assert not store.end("act-1", claim.action.attempt, "done", result="sent")
    assert len(store._db.finished) == 0
    again = _claim(store)
    assert again.status == "claimed" and again.action.attempt == 2


@pytest.mark.parametrize("outcome", ["abandoned", "not_done"])
def test_an_action_that_may_run_again_is_not_kept(store: RecallStore, outcome: str) -> None:
    claim = _claim(store)
    assert store.end("act-1", claim.action.attempt, outcome)
    assert _claim(store).status == "claimed"  # attempt 2, open
    assert len(store._db.finished) == 0


def test_a_failed_call_is_kept_as_failed(store: RecallStore, transactions: list[bool]) -> None:
    claim = _claim(store)
    assert store.end("act-1", claim.action.attempt, "failed", error="boom")
    transactions.clear()
    again = _claim(store)
    assert again.status == "failed" and again.action.error == "boom"
    assert transactions == []


def test_a_closed_store_refuses_a_kept_call(store_target: str) -> None:
    store = RecallStore.open(store_target)
    _finish(store)
    store.close()
    with pytest.raises(RecallError) as err:
        _claim(store)
    assert err.value.code == "closed"


def test_the_oldest_row_goes_first_past_the_bound() -> None:
    kept = FinishedActions(max_kept=2)
    rows = [(f"a{i}",) + (None,) * 10 + ("done",) for i in range(3)]
    for row in rows:
        kept.keep(row)
    assert len(kept) == 2 and kept.get("a0") is None and kept.get("a2") == rows[2]
    kept.keep(("open",) + (None,) * 10 + (None,))
    assert kept.get("open") is None


# --- the durable tool path ---------------------------------------------------------------------


def test_a_finished_sibling_is_answered_from_memory_on_resume(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = str(tmp_path / "e.log")

    @tool
    def notify(who: str, key: IdempotencyKey) -> str:
        """Side effect that finishes at once."""
        record_effect(effects, what="notify", who=who)
        return f"notified {who}"

    @tool
    def ask(question: str, key: IdempotencyKey) -> str:
        """Asks a person."""
        return f"answer: {interrupt({'question': question})}"

    node = DurableToolNode([notify, ask], classes={"notify": "external", "ask": "external"})
    script = [reply("", call("notify", who="ops"), call("ask", question="go?")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "sib"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    notified = next(a for a in store.actions("sib") if a.tool == "notify")
    assert store._db.finished.get(notified.action_id) is not None, "its end was kept"
    with captured_sql(monkeypatch) as seen:
        out = graph.invoke(Command(resume="yes"), config)
    assert not [sql for sql, params in seen if notified.action_id in params]
    assert [e["what"] for e in read_effects(effects)] == ["notify"]
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [
        "notified ops",
        "answer: yes",
    ]
