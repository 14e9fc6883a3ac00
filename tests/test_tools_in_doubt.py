"""A tool that cannot tell whether its effect happened says so, and the call stays in doubt."""

from __future__ import annotations

from typing import Any

from fix_tools import build_graph, call, read_effects, record_effect, reply
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_recall import InDoubt
from langgraph_recall.tools import DurableToolNode, IdempotencyKey


def test_a_tool_raising_in_doubt_leaves_the_action_open_and_is_not_retried(
    store: Any, saver: Any, tmp_path: Any
) -> None:
    effects = str(tmp_path / "charges")

    @tool
    def charge(order: str, key: IdempotencyKey) -> str:
        """Charge an order."""
        record_effect(effects, order=order, key=key)  # the request reached the payment API...
        raise InDoubt("the payment API closed the connection before answering")  # ...no answer

    node = DurableToolNode([charge], classes={"charge": "external"})
    script = [reply("", call("charge", order="o-1")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "t-doubt", "agent_id": "a-doubt"}}
    out = graph.invoke({"messages": [HumanMessage("charge o-1", id="h-1")]}, config)

    told = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(told) == 1 and "unknown" in str(told[0].content).lower()
    [action] = store.actions("a-doubt", open_only=True)
    assert action.tool == "charge" and action.status == "open"
    # Re-running the step (a resume, a sibling re-run) must not send the charge again.
    graph.invoke(None, config)
    assert len(read_effects(effects)) == 1
    assert [a.status for a in store.actions("a-doubt")] == ["open"]
