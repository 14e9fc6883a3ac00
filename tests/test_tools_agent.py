"""The same durable calls under ``create_agent``, through ``wrap_tool_call`` middleware
(``create_agent`` builds its own ToolNode, one ``Send`` task per call)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from fix_tools import call, read_effects, record_effect, reply
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command, interrupt

from langgraph_recall._errors import UnclassifiedTool
from langgraph_recall.testing import ScriptedChatModel
from langgraph_recall.tools import DurableTools, IdempotencyKey, current_idempotency_key


class _Durable(AgentMiddleware):  # type: ignore[type-arg]
    """What RecallMiddleware does with tool calls: hand them to DurableTools."""

    def __init__(self, durable: DurableTools) -> None:
        super().__init__()
        self.durable = durable

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self.durable.wrap_tool_call(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await self.durable.awrap_tool_call(request, handler)


def _tools(effects: str) -> list[Any]:
    @tool
    def notify(who: str, key: IdempotencyKey, runtime: ToolRuntime) -> str:
        """Notify someone."""
        cfg = runtime.config["configurable"].get("recall_idempotency_key")
        record_effect(effects, what="notify", key=key, ctx=current_idempotency_key(), cfg=cfg)
        return f"notified {who}"

    @tool
    def ask(question: str, key: IdempotencyKey) -> str:
        """Ask a person."""
        record_effect(effects, what="asked", key=key)
        answer = interrupt({"question": question})
        record_effect(effects, what="answered", key=key)
        return f"answer: {answer}"

    return [notify, ask]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_create_agent_calls_get_the_key_and_run_once(store, saver, tmp_path, mode) -> None:
    effects = str(tmp_path / "e.log")
    durable = DurableTools(classes={"notify": "external", "ask": "external"})
    script = [
        reply("", call("notify", who="ops", key="FORGED"), call("ask", question="go?")),
        reply("done"),
    ]
    agent = create_agent(
        ScriptedChatModel(script),
        _tools(effects),
        middleware=[_Durable(durable)],
        checkpointer=saver,
        store=store,
    )
    config = {"configurable": {"thread_id": f"agent-{mode}"}}
    if mode == "sync":
        agent.invoke({"messages": [HumanMessage("go")]}, config)
        out = agent.invoke(Command(resume="yes"), config)
    else:
        await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
        out = await agent.ainvoke(Command(resume="yes"), config)
    effects_seen = read_effects(effects)
    assert Counter(e["what"] for e in effects_seen) == {"notify": 1, "asked": 2, "answered": 1}
    actions = {a.tool: a for a in store.actions(f"agent-{mode}")}
    [notify] = [e for e in effects_seen if e["what"] == "notify"]
    assert notify["key"] == notify["ctx"] == notify["cfg"] == actions["notify"].idempotency_key
    assert {e["key"] for e in effects_seen if e["what"] != "notify"} == {
        actions["ask"].idempotency_key
    }
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [
        "notified ops",
        "answer: yes",
    ]


def test_create_agent_refuses_a_tool_without_a_class_when_called(store, saver, tmp_path) -> None:
    durable = DurableTools(classes={"notify": "external"})
    agent = create_agent(
        ScriptedChatModel([reply("", call("ask", question="?")), reply("ok")]),
        _tools(str(tmp_path / "e.log")),
        middleware=[_Durable(durable)],
        checkpointer=saver,
        store=store,
    )
    with pytest.raises(UnclassifiedTool):
        agent.invoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "unclassified"}}
        )
    assert read_effects(str(tmp_path / "e.log")) == []
