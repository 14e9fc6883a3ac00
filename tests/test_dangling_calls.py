"""A tool call no ToolMessage answers is answered, in the model's input, with its outcome.

Killed inside a tool step and resumed on the same thread with a new message, a thread holds an
AI message whose calls have no answer (LangGraph drops the pending tool task). The records know
what became of each call, but the briefing leaves out the turns in the model's input: unless
the input answers the call, a careful model stops and a naive one refunds twice. The wording
is the briefing's (docs/briefing-outcomes.md), after "[langgraph-recall] <call> ".
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from fix_store import captured_sql
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import create_react_agent
from typing_extensions import TypedDict

from langgraph_recall import pre_model_hook, with_briefing
from langgraph_recall._dangling import answer_dangling
from langgraph_recall._middleware import RecallMiddleware
from langgraph_recall.store import RecallStore
from langgraph_recall.store._actions import NOT_STARTED, action_key
from langgraph_recall.testing import ScriptedChatModel, reply

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

REFUND = "[langgraph-recall] issue_refund(order='O-4471', amount=42.5)"
AGAIN = ": call it again if it is still needed"
OUTCOMES = {
    "done": f"{REFUND} -> done: refund r-1 issued",
    "not_done": f"{REFUND} -> not done (never started){AGAIN}",
    "open": f"{REFUND} -> in doubt: do not call it again; it is settled by a resolver or a person",
}


@tool
def issue_refund(order: str, amount: float) -> str:
    """Refund an order."""
    return f"refund of {amount} for {order} issued"


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"{order}: paid"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def _killed_thread(*calls: dict[str, Any], answered: int = 0) -> list[AnyMessage]:
    """The thread after a kill inside the tool step and a new user message: the AI message's
    first ``answered`` calls have their ToolMessage, the others none."""
    ai = AIMessage("", tool_calls=list(calls), id="ai-1")
    answers = [
        ToolMessage(f"{c['name']} ok", tool_call_id=c["id"], name=c["name"], id=f"t-{c['id']}")
        for c in calls[:answered]
    ]
    return [HumanMessage("refund O-4471", id="h1"), ai, *answers, HumanMessage("continue", id="h2")]


def _refund_recorded(
    store: RecallStore, outcome: str, agent: str = "a", call_id: str = "c1"
) -> str:
    """The refund call as the records hold it after the run-start settle: ``open`` (in doubt),
    ``done`` with its result, or ``not_done`` (never started)."""
    action_id = action_key(agent, "ai-1", call_id, "issue_refund")
    store.claim(
        agent,
        action_id,
        tool="issue_refund",
        args={"order": "O-4471", "amount": 42.5},
        args_digest="d",
        klass="external",
    )
    if outcome == "done":
        result = ToolMessage("refund r-1 issued", tool_call_id=call_id, name="issue_refund")
        assert store.end(action_id, 1, "done", result=result)
    elif outcome == "not_done":
        assert store.end(action_id, 1, "not_done", resolved_by=NOT_STARTED)
    return action_id


def _briefed_graph(store: RecallStore, model: ScriptedChatModel) -> Any:
    """A custom graph whose model node hands the model ``with_briefing(messages)``."""

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(with_briefing(state["messages"]))]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    return g.compile(store=store, checkpointer=InMemorySaver())


def _config(thread: str = "t") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "agent_id": "a"}}


def _after_briefing(seen: list[Any]) -> list[Any]:
    """What the model was given after its system message(s)."""
    i = 0
    while i < len(seen) and seen[i].type == "system":
        i += 1
    return seen[i:]


def _answer_of(seen: list[Any], call_id: str) -> list[str]:
    return [m.content for m in seen if isinstance(m, ToolMessage) and m.tool_call_id == call_id]


# --- with_briefing ------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["done", "not_done", "open"])
def test_with_briefing_answers_a_dangling_durable_call_with_its_recorded_outcome(
    store: RecallStore, outcome: str
) -> None:
    _refund_recorded(store, outcome)
    model = ScriptedChatModel([reply("ok")])
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5))
    _briefed_graph(store, model).invoke({"messages": thread}, _config())

    (seen,) = model.seen
    given = _after_briefing(seen)
    assert [m.type for m in given] == ["human", "ai", "tool", "human"]
    assert given[2].content == OUTCOMES[outcome]
    assert given[2].tool_call_id == "c1" and given[2].name == "issue_refund"


def test_the_answer_follows_the_ai_messages_own_answers(store: RecallStore) -> None:
    _refund_recorded(store, "done", call_id="c2")
    thread = _killed_thread(
        _call("lookup", "c1", order="O-4471"),
        _call("issue_refund", "c2", order="O-4471", amount=42.5),
        answered=1,
    )
    given = _after_briefing(with_briefing(thread, store=store, config=_config()))
    assert [(m.type, getattr(m, "tool_call_id", None)) for m in given] == [
        ("human", None),
        ("ai", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("human", None),
    ]
    assert given[2] is thread[2]
    assert given[3].content == f"{REFUND} -> done: refund r-1 issued"


def test_a_pure_tools_dangling_call_says_it_got_no_answer(store: RecallStore) -> None:
    thread = _killed_thread(_call("lookup", "c1", order="O-4471"))
    given = _after_briefing(with_briefing(thread, store=store, config=_config()))
    assert _answer_of(given, "c1") == [
        "[langgraph-recall] lookup(order='O-4471') -> no answer: it was interrupted before it "
        "answered; call it again if it is still needed"
    ]


def test_a_message_of_another_class_is_looked_at_too(store: RecallStore) -> None:
    # A subclass of LangChain's message classes (a chunk, an application's own) is not split
    # off by class identity; the messages are then looked at one by one.
    class CustomAI(AIMessage):
        pass

    _refund_recorded(store, "done")
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5))
    thread[1] = CustomAI("", tool_calls=thread[1].tool_calls, id="ai-1")
    assert _answer_of(answer_dangling(store, "a", thread), "c1") == [OUTCOMES["done"]]


def test_nothing_dangling_leaves_the_input_as_it_is_and_reads_nothing(
    store: RecallStore, monkeypatch: Any
) -> None:
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5), answered=1)
    with captured_sql(monkeypatch) as sql:
        assert answer_dangling(store, "a", thread) is thread
    assert sql == []
    given = _after_briefing(with_briefing(thread, store=store, config=_config()))
    assert len(given) == len(thread) and all(map(lambda a, b: a is b, given, thread))


def test_all_dangling_calls_are_looked_up_in_one_query(
    store: RecallStore, monkeypatch: Any
) -> None:
    _refund_recorded(store, "done", call_id="c1")
    _refund_recorded(store, "open", call_id="c2")
    thread = _killed_thread(
        _call("issue_refund", "c1", order="O-4471", amount=42.5),
        _call("issue_refund", "c2", order="O-4471", amount=42.5),
        _call("lookup", "c3", order="O-4471"),
    )
    with captured_sql(monkeypatch) as sql:
        given = answer_dangling(store, "a", thread)
    assert len(sql) == 1
    assert [m.content for m in given[2:5]] == [
        OUTCOMES["done"],
        OUTCOMES["open"],
        "[langgraph-recall] lookup(order='O-4471') -> no answer: it was interrupted before it "
        "answered; call it again if it is still needed",
    ]


def test_the_state_keeps_its_messages_as_they_were(store: RecallStore) -> None:
    _refund_recorded(store, "done")
    model = ScriptedChatModel([reply("ok")])
    graph = _briefed_graph(store, model)
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5))
    out = graph.invoke({"messages": thread}, _config())
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
    assert _answer_of(model.seen[0], "c1") == [OUTCOMES["done"]]


# --- create_agent + RecallMiddleware, and pre_model_hook ----------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("outcome", ["done", "not_done"])
def test_the_middleware_answers_a_dangling_call_in_the_models_input(
    store: RecallStore, outcome: str, use_async: bool
) -> None:
    _refund_recorded(store, outcome)
    model = ScriptedChatModel([reply("ok")])
    agent = create_agent(
        model,
        [issue_refund],
        middleware=[RecallMiddleware(classes={"issue_refund": "external"})],
        checkpointer=InMemorySaver(),
        store=store,
    )
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5))
    if use_async:
        out = asyncio.run(agent.ainvoke({"messages": thread}, _config()))
    else:
        out = agent.invoke({"messages": thread}, _config())

    (seen,) = model.seen
    given = _after_briefing(seen)
    assert [m.type for m in given] == ["human", "ai", "tool", "human"]
    assert given[2].content == OUTCOMES[outcome]
    # Only the model's input: the state has no answer for the call.
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]


def test_the_middleware_leaves_the_messages_alone_when_nothing_dangles(
    store: RecallStore,
) -> None:
    model = ScriptedChatModel([reply("ok")])
    agent = create_agent(
        model, [lookup], middleware=[RecallMiddleware(classes={"lookup": "pure"})], store=store
    )
    thread = _killed_thread(_call("lookup", "c1", order="O-4471"), answered=1)
    agent.invoke({"messages": thread}, _config())
    given = _after_briefing(model.seen[0])
    assert [(m.type, m.id) for m in given] == [(m.type, m.id) for m in thread]


def test_pre_model_hook_answers_a_dangling_call(store: RecallStore) -> None:
    _refund_recorded(store, "not_done")
    model = ScriptedChatModel([reply("ok")])
    agent = create_react_agent(model, [issue_refund], pre_model_hook=pre_model_hook, store=store)
    thread = _killed_thread(_call("issue_refund", "c1", order="O-4471", amount=42.5))
    out = agent.invoke({"messages": thread}, _config())
    given = _after_briefing(model.seen[0])
    assert [m.type for m in given] == ["human", "ai", "tool", "human"]
    assert given[2].content == OUTCOMES["not_done"]
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
