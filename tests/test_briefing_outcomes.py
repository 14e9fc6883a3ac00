"""Every durable call the briefing shows carries its outcome as the records have it.

A call shown bare (``called issue_refund(order='O-4471', amount=42.5)``) reads as unanswered:
a careful model stops, a naive one calls again under a new key and refunds twice. The wording
is a contract (``docs/briefing-outcomes.md``): a scripted model parses the phrase after " -> ".
"""

from __future__ import annotations

from typing import Any

import pytest
from fix_store import captured_sql
from fix_tools import pay_graph
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph_recall import ActionEnd, DurableToolNode
from langgraph_recall.store import RecallStore
from langgraph_recall.store._actions import NOT_STARTED, Intent, action_key, planned_insert
from langgraph_recall.store._models import OUTPUT_REF

REFUND = "issue_refund(order='O-4471', amount=42.5)"
AGAIN = ": call it again if it is still needed"


@tool
def issue_refund(order: str, amount: float) -> str:
    """Refund an order."""
    return f"refund of {amount} for {order} issued"


def _call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def _refund_asked(store: RecallStore, agent: str = "a", klass: str = "external") -> str:
    """The agent asked for the refund (its turn recorded) and the call's intent is recorded
    (open), as the durable tool node records it; returns the action id."""
    ai = AIMessage("", tool_calls=[_call("issue_refund", "c1", order="O-4471", amount=42.5)])
    ai.id = "ai-1"
    store.record(agent, [HumanMessage("refund O-4471", id="h1"), ai])
    action_id = action_key(agent, "ai-1", "c1", "issue_refund")
    store.claim(
        agent,
        action_id,
        tool="issue_refund",
        args={"order": "O-4471", "amount": 42.5},
        args_digest="d",
        klass=klass,
    )
    return action_id


def _line(store: RecallStore, agent: str = "a") -> str:
    """The briefing's line of the refund call (a new thread: nothing excluded)."""
    text = store.briefing(agent).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("assistant: called issue_refund")]
    return line


def _end(store: RecallStore, action_id: str, outcome: str, **kwargs: Any) -> None:
    assert store.end(action_id, store.action(action_id).attempt, outcome, **kwargs)


# --- each outcome, from the records -----------------------------------------------------------


def test_a_call_done_with_no_tool_message_shows_its_result(store: RecallStore) -> None:
    # The process died after the call's end committed, before its ToolMessage was checkpointed.
    action_id = _refund_asked(store)
    result = ToolMessage("refund r-1 issued", tool_call_id="c1", name="issue_refund")
    _end(store, action_id, "done", result=result)
    assert _line(store) == f"assistant: called {REFUND} -> done: refund r-1 issued"


def test_a_call_whose_tool_message_is_shown_says_done_without_repeating_it(
    store: RecallStore,
) -> None:
    action_id = _refund_asked(store)
    result = ToolMessage("refund r-1 issued", tool_call_id="c1", name="issue_refund", id="t1")
    _end(store, action_id, "done", result=result)
    store.record("a", [result])
    text = store.briefing("a").text
    assert f"assistant: called {REFUND} -> done\ntool issue_refund: refund r-1 issued" in text


def test_a_long_result_shows_as_its_stored_output(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    ref = store.put_output("a", "refund " + "x" * 20_000)
    result = ToolMessage(
        f"[output {ref}: 20007 characters]",
        tool_call_id="c1",
        name="issue_refund",
        additional_kwargs={OUTPUT_REF: ref},
    )
    _end(store, action_id, "done", result=result)
    assert _line(store) == (
        f'assistant: called {REFUND} -> done: [stored output: read it with fetch_output(ref="{ref}")]'
    )


def test_a_resolvers_done_on_a_new_thread_shows_its_note_and_result(store: RecallStore) -> None:
    # A crash left the refund open; the resolver, asked by settle, found it in the ledger.
    _refund_asked(store)
    assert _line(store).endswith(
        " -> in doubt: do not call it again; it is settled by a resolver or a person"
    )
    node = DurableToolNode(
        [issue_refund],
        classes={"issue_refund": "external"},
        resolver=lambda action: ActionEnd(
            "done", result="refund r-9 issued", resolution="found r-9 in the ledger"
        ),
    )
    report = node.settle(store, "a")
    assert [a.status for a in report.closed] == ["done"]
    assert _line(store) == (
        f"assistant: called {REFUND} -> done (resolved by a resolver: found r-9 in the ledger): "
        "refund r-9 issued"
    )
    assert "## Unconfirmed calls" not in store.briefing("a").text


def test_a_persons_done_shows_their_note(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    store.resolve(action_id, "done", note="refund r-2 is in the ledger")
    assert _line(store) == (
        f"assistant: called {REFUND} -> done (resolved by a person: refund r-2 is in the ledger)"
    )


def test_a_persons_not_done_says_to_call_again_if_needed(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    store.resolve(action_id, "not_done", note="no refund in the ledger")
    assert _line(store) == (
        f"assistant: called {REFUND} -> not done (resolved by a person: no refund in the "
        f"ledger){AGAIN}"
    )


def test_a_failed_call_shows_its_error(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    _end(store, action_id, "failed", error="card   declined\nby the bank")
    assert _line(store) == f"assistant: called {REFUND} -> failed: card declined by the bank"


def test_a_call_that_never_started_says_so(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    _end(store, action_id, "not_done", note="the run ended first", resolved_by=NOT_STARTED)
    assert _line(store) == f"assistant: called {REFUND} -> not done (never started){AGAIN}"


def test_a_planned_call_whose_tool_never_began_says_not_started_yet(store: RecallStore) -> None:
    # Written ahead with its AI message's checkpoint; the process died before the start mark.
    ai = AIMessage("", tool_calls=[_call("issue_refund", "c1", order="O-4471", amount=42.5)])
    ai.id = "ai-1"
    store.record("a", [HumanMessage("refund O-4471", id="h1"), ai])
    action_id = action_key("a", "ai-1", "c1", "issue_refund")
    intent = Intent(
        "a",
        action_id,
        "issue_refund",
        "external",
        {"order": "O-4471", "amount": 42.5},
        "d",
        action_id,
        "t",
        None,
    )
    planned = planned_insert(store._db.sql, store._db.dialect, intent)
    with store._db.tx(write=True) as tx:
        tx.run(planned.sql, planned.params)
    assert not store.action(action_id).started
    assert _line(store) == (
        f"assistant: called {REFUND} -> not started yet: it runs once when its tool step runs "
        "(on another thread it is closed as never started)"
    )


def test_an_abandoned_call_says_its_paused_step_runs_it_again(store: RecallStore) -> None:
    action_id = _refund_asked(store)
    _end(store, action_id, "abandoned", note="paused by an interrupt() inside the tool")
    assert _line(store) == (
        f"assistant: called {REFUND} -> not done (paused by an interrupt() inside the tool): "
        "it runs again under the same key when its paused step is resumed"
    )


@pytest.mark.parametrize(
    ("klass", "outcome"),
    [
        ("external", "it is settled by a resolver or a person"),
        ("idempotent", "it is re-run under its own key on resume"),
    ],
)
def test_a_call_in_doubt_says_not_to_call_it_again(
    store: RecallStore, klass: str, outcome: str
) -> None:
    _refund_asked(store, klass=klass)
    assert (
        _line(store) == f"assistant: called {REFUND} -> in doubt: do not call it again; {outcome}"
    )


def test_a_pure_call_has_no_outcome_and_each_call_carries_its_own(store: RecallStore) -> None:
    ai = AIMessage(
        "",
        id="ai-1",
        tool_calls=[_call("lookup", "c0", q="O-4471"), _call("issue_refund", "c1", amount=1)],
    )
    store.record("a", [ai])
    action_id = action_key("a", "ai-1", "c1", "issue_refund")
    store.claim("a", action_id, tool="issue_refund", args={"amount": 1}, args_digest="d")
    line = store.briefing("a").text.splitlines()[-1]
    assert line.startswith(
        "assistant: called lookup(q='O-4471'), issue_refund(amount=1) -> in doubt"
    )


# --- approvals, through a real graph ----------------------------------------------------------


def _asked_to_pay(
    store: RecallStore, saver: Any, tmp_path: Any, thread: str
) -> tuple[Any, Any, Any]:
    """The pay agent on ``thread`` (its agent id too), stopped at its approval question:
    the graph, its config and the question."""
    graph = pay_graph(store, saver, str(tmp_path / "e.log"))
    config = {"configurable": {"thread_id": thread}}
    out = graph.invoke({"messages": [HumanMessage("pay alice 10")]}, config)
    return graph, config, out["__interrupt__"][0].value


def _pay_line(store: RecallStore, agent: str) -> str:
    text = store.briefing(agent).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("assistant: called pay(")]
    return line


def test_a_call_waiting_for_approval_says_so(store: RecallStore, saver: Any, tmp_path) -> None:
    _asked_to_pay(store, saver, tmp_path, "w")
    assert (
        _pay_line(store, "w")
        == "assistant: called pay(amount=10, to='alice') -> waiting for approval"
    )


def test_a_rejected_call_says_refused_with_the_persons_message(
    store: RecallStore, saver: Any, tmp_path
) -> None:
    graph, config, _ = _asked_to_pay(store, saver, tmp_path, "r")
    graph.invoke(Command(resume={"type": "reject", "message": "not this month"}), config)
    assert _pay_line(store, "r") == (
        "assistant: called pay(amount=10, to='alice') -> refused (rejected by a person: "
        "not this month)"
    )


def test_a_call_approved_for_other_arguments_says_refused(
    store: RecallStore, saver: Any, tmp_path
) -> None:
    graph, config, _ = _asked_to_pay(store, saver, tmp_path, "m")
    # The saved call replaced (same ids) between the question and the answer.
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    forged = dict(ai.tool_calls[0], args={"amount": 9999, "to": "mallory"})
    graph.update_state(config, {"messages": [AIMessage("", id=ai.id, tool_calls=[forged])]})
    graph.invoke(Command(resume={"type": "approve"}), config)
    assert _pay_line(store, "m").endswith(" -> refused (approval for other arguments)")


def test_an_approved_call_that_ran_says_done(store: RecallStore, saver: Any, tmp_path) -> None:
    graph, config, question = _asked_to_pay(store, saver, tmp_path, "ok")
    graph.invoke(Command(resume={"type": "approve", "digest": question["digest"]}), config)
    assert _pay_line(store, "ok") == "assistant: called pay(amount=10, to='alice') -> done"


# --- cost -------------------------------------------------------------------------------------


@pytest.mark.parametrize("history", [20, 2000])
def test_the_outcomes_are_one_read_whatever_the_history_length(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, history: int
) -> None:
    # Every exchange a durable call with its intent and end recorded.
    messages: list[Any] = []
    for i in range(history):
        ai = AIMessage("", id=f"ai-{i}", tool_calls=[_call("issue_refund", f"c{i}", n=i)])
        messages += [HumanMessage(f"refund {i}", id=f"h{i}"), ai]
    store.record("a", messages)
    for i in range(history):
        action_id = action_key("a", f"ai-{i}", f"c{i}", "issue_refund")
        store.claim("a", action_id, tool="issue_refund", args={"n": i}, args_digest="d")
        store.end(action_id, 1, "done", result=f"refund {i} issued")
    with captured_sql(monkeypatch) as seen:
        b = store.briefing("a", token_budget=1000)
    reads = [(sql, params) for sql, params in seen if "recall_actions" in sql]
    assert len(reads) == 2  # the open calls, then the outcomes of the calls shown
    ((outcomes, params),) = [r for r in reads if "UNION ALL" in r[0]]
    asked = [p for p in params if p != "a"]
    # Only the shown turns' calls are asked for (twice: the actions, then the approvals).
    assert len(asked) == 2 * len(set(asked)) <= 2 * b.turns_shown
    assert f"issue_refund(n={history - 1}) -> done: refund {history - 1} issued" in b.text


def test_a_reused_call_id_is_answered_only_by_its_own_tool_message(store: RecallStore) -> None:
    # Some models number their calls per message ("call_0" each time): a ToolMessage answers
    # the nearest call before it, not an older one whose own answer was never checkpointed.
    first = AIMessage("", id="ai-1", tool_calls=[_call("issue_refund", "c1", order="O-1")])
    second = AIMessage("", id="ai-2", tool_calls=[_call("issue_refund", "c1", order="O-2")])
    answer = ToolMessage("refund r-2 issued", tool_call_id="c1", name="issue_refund", id="t2")
    store.record("a", [first, second, answer])
    for ai, said in (("ai-1", "refund r-1 issued"), ("ai-2", "refund r-2 issued")):
        action_id = action_key("a", ai, "c1", "issue_refund")
        store.claim("a", action_id, tool="issue_refund", args={}, args_digest="d")
        store.end(action_id, 1, "done", result=said)
    lines = [ln for ln in store.briefing("a").text.splitlines() if "called" in ln]
    assert lines == [
        "assistant: called issue_refund(order='O-1') -> done: refund r-1 issued",
        "assistant: called issue_refund(order='O-2') -> done",
    ]
