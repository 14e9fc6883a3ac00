"""``langgraph_recall.testing.ScriptedChatModel``: deterministic replies, ids unique per thread."""

from __future__ import annotations

from typing import Any

from fix_tools import read_effects, record_effect
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_recall import DurableToolNode, RecallStore, with_briefing
from langgraph_recall.testing import ScriptedChatModel, call, reply


def _graph(store: RecallStore, saver: Any, effects: str, to: str) -> Any:
    @tool
    def send(to: str) -> str:
        """Send an email."""
        record_effect(effects, to=to)
        return f"sent to {to}"

    model = ScriptedChatModel([reply("", call("send", to=to)), reply("done")])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(with_briefing(state["messages"]))]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", DurableToolNode([send], classes={"send": "external"}))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(store=store, checkpointer=saver)


def test_a_new_thread_of_the_same_agent_gets_new_calls_not_the_first_threads_results(
    store, saver, tmp_path
) -> None:
    # With ids repeating across threads, the second thread's call had the first's action key:
    # it was answered with "sent to a" without running, and its AI messages were never recorded.
    effects = str(tmp_path / "e.log")
    answers = []
    for thread, to in (("t-1", "a"), ("t-2", "b")):
        out = _graph(store, saver, effects, to).invoke(
            {"messages": [HumanMessage(f"mail {to}")]},
            {"configurable": {"thread_id": thread, "agent_id": "mailer"}},
        )
        answers.append(out["messages"][2].content)
    assert answers == ["sent to a", "sent to b"]
    assert [e["to"] for e in read_effects(effects)] == ["a", "b"]
    recorded = [(t.thread_id, t.msg_id) for t in store.turns("mailer") if t.role == "ai"]
    assert recorded == [
        ("t-1", "ai-t-1-0"),
        ("t-1", "ai-t-1-1"),
        ("t-2", "ai-t-2-0"),
        ("t-2", "ai-t-2-1"),
    ]


def test_ids_are_the_same_in_every_process_and_plain_outside_a_graph() -> None:
    script = [reply("one", call("send", to="a")), reply("two")]
    first = ScriptedChatModel(script).invoke([HumanMessage("go")])
    again = ScriptedChatModel(script).invoke([HumanMessage("go")])
    assert (first.id, again.id) == ("ai-0", "ai-0")
    assert first.tool_calls[0]["id"] == "call-0-0"
    later = ScriptedChatModel(script, name_prefix="w").invoke([HumanMessage("go"), first])
    assert isinstance(later, AIMessage) and (later.id, later.content) == ("w-1", "two")


def test_a_scripted_call_may_have_an_argument_called_name() -> None:
    # call(name, **args) made "name" the tool's own: set_pointer(name=...) could not be scripted.
    assert call("set_pointer", name="doc", target="/x") == {
        "name": "set_pointer",
        "args": {"name": "doc", "target": "/x"},
    }
