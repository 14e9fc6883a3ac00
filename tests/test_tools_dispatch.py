"""How ``DurableToolNode`` dispatches calls: a lone call on the node's own thread (ToolNode
would start and join a thread pool for it), several in parallel as ToolNode does, and each
tool seeing the same ``ToolRuntime`` either way."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Annotated, Any

import pytest
from fix_tools import build_graph, call, reply
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolRuntime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from langgraph_recall.tools import DurableToolNode
from langgraph_recall.tools._node import LoneCallInline


def _capturing(seen: dict[str, Any], meet: threading.Barrier | None = None) -> Any:
    @tool
    def look(x: int, runtime: ToolRuntime) -> str:
        """Remembers where and with what it ran."""
        seen.setdefault("threads", []).append(threading.get_ident())
        seen.setdefault("runtimes", []).append(runtime)
        if meet is not None:
            # Every call of the step waits here for the others: only calls running at the
            # same time get through (run one after another, the first waits out the timeout).
            try:
                meet.wait(timeout=10)
                seen.setdefault("met", []).append(x)
            except threading.BrokenBarrierError:
                pass
        return f"saw {x}"

    return look


def _run(node: Any, script: list[Any], store: Any, saver: Any, thread: str) -> dict[str, Any]:
    graph = build_graph(node, script, store=store, checkpointer=saver)
    node_threads: list[int] = []
    original = type(node)._parse_input  # called on the node's thread, before any dispatch

    def spy(self: Any, *a: Any, **k: Any) -> Any:
        node_threads.append(threading.get_ident())
        return original(self, *a, **k)

    type(node)._parse_input = spy  # type: ignore[method-assign]
    try:
        out = graph.invoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread}}
        )
    finally:
        type(node)._parse_input = original  # type: ignore[method-assign]
    return {"out": out, "node_threads": node_threads}


def test_lone_call_runs_on_the_node_thread(store, saver) -> None:
    seen: dict[str, Any] = {}

    class Node(DurableToolNode):
        pass

    node = Node([_capturing(seen)], classes={"look": "external"})
    ran = _run(node, [reply("", call("look", x=1)), reply("done")], store, saver, "lone")
    assert ran["out"]["messages"][-2].content == "saw 1"
    assert seen["threads"] == ran["node_threads"], "a lone call should not hop to a pool thread"
    [action] = store.actions("lone")
    assert action.status == "done"


def test_several_calls_still_run_in_parallel(store, saver) -> None:
    seen: dict[str, Any] = {}

    class Node(DurableToolNode):
        pass

    node = Node([_capturing(seen, threading.Barrier(2))], classes={"look": "external"})
    script = [reply("", call("look", x=1), call("look", x=2)), reply("done")]
    ran = _run(node, script, store, saver, "pair")
    contents = sorted(m.content for m in ran["out"]["messages"] if m.type == "tool")
    assert contents == ["saw 1", "saw 2"]
    assert len(set(seen["threads"])) == 2
    assert not set(seen["threads"]) & set(ran["node_threads"])
    assert sorted(seen.get("met", [])) == [1, 2], "the two calls did not run at the same time"
    assert sorted(a.status for a in store.actions("pair")) == ["done", "done"]


def test_tool_runtime_matches_toolnode(store, saver) -> None:
    """Every field ToolNode fills for a tool, the inline path fills alike. Fails when LangGraph
    adds a ToolRuntime field that ``_tool_runtime`` does not carry over."""
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    script = [reply("", call("look", x=1)), reply("done")]
    _run(
        DurableToolNode([_capturing(ours)], classes={"look": "external"}),
        script,
        store,
        saver,
        "rt-ours",
    )
    plain = build_graph(ToolNode([_capturing(theirs)]), script, store=store, checkpointer=saver)
    plain.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "rt-theirs"}})
    [a], [b] = ours["runtimes"], theirs["runtimes"]
    for field in dataclasses.fields(ToolRuntime):
        mine, reference = getattr(a, field.name), getattr(b, field.name)
        assert (mine is None) == (reference is None), field.name
        assert type(mine) is type(reference), field.name
    assert a.store is b.store is store
    assert [m.content for m in a.state["messages"]] == [m.content for m in b.state["messages"]]
    assert [t.name for t in a.tools] == [t.name for t in b.tools]
    assert a.tool_call_id == a.state["messages"][-1].tool_calls[0]["id"]
    assert a.config["configurable"]["thread_id"] == "rt-ours"


def test_lone_call_under_a_running_loop_keeps_a_thread_of_its_own(store, saver) -> None:
    """A Jupyter cell runs a sync ``invoke`` on a thread with a running event loop. A sync tool
    that calls ``asyncio.run()`` works there under ToolNode (its pool thread has no loop), so it
    must under DurableToolNode too."""

    async def fetch() -> str:
        return "fetched"

    @tool
    def wrapped_client(x: int) -> str:
        """Calls an async client the sync way."""
        return asyncio.run(fetch())

    node = DurableToolNode([wrapped_client], classes={"wrapped_client": "external"})
    script = [reply("", call("wrapped_client", x=1)), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)

    async def cell() -> dict[str, Any]:
        return graph.invoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "cell"}}
        )

    out = asyncio.run(cell())
    assert [m.content for m in out["messages"] if m.type == "tool"] == ["fetched"]
    [action] = store.actions("cell")
    assert action.status == "done"


# --- the inline path answers as ToolNode does ---------------------------------------------------


class _CmdState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int


@tool
def _add(a: int, b: int) -> int:
    """Adds."""
    return a + b


@tool
def _boom(x: int) -> str:
    """Fails."""
    raise ValueError(f"no {x}")


@tool
def _cmd(x: int, runtime: ToolRuntime) -> Command:
    """Updates the state through a Command."""
    msg = ToolMessage(f"set {x}", tool_call_id=runtime.tool_call_id)
    return Command(update={"messages": [msg], "n": x})


def _outcome(node: Any, call_: dict[str, Any], via_send: bool) -> tuple[Any, ...]:
    ai = AIMessage("", tool_calls=[{**call_, "type": "tool_call"}])

    def route(state: _CmdState) -> Any:
        if not via_send:
            return "tools"
        # create_agent's layout: one Send per call, the call and the state packed together.
        tc = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
        return [
            Send("tools", {"__type": "tool_call_with_context", "tool_call": tc, "state": state})
        ]

    g = StateGraph(_CmdState)
    g.add_node("start", lambda s: {})
    g.add_node("tools", node)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", route, ["tools"])
    g.add_edge("tools", END)
    try:
        out = g.compile().invoke({"messages": [ai], "n": 0})
    except Exception as exc:  # ToolNode lets a tool's own error through by default
        return ("raised", type(exc).__name__, str(exc))
    last = out["messages"][-1]
    return (type(last).__name__, last.content, last.tool_call_id, last.status, out["n"])


@pytest.mark.parametrize("via_send", [False, True], ids=["state", "send"])
@pytest.mark.parametrize(
    "call_",
    [
        {"name": "_add", "args": {"a": 1, "b": 2}, "id": "c-add"},
        {"name": "_boom", "args": {"x": 3}, "id": "c-boom"},
        {"name": "_cmd", "args": {"x": 7}, "id": "c-cmd"},
        {"name": "_nope", "args": {}, "id": "c-unknown"},
    ],
    ids=["value", "error", "command", "unknown_tool"],
)
def test_inline_answers_as_toolnode(call_: dict[str, Any], via_send: bool) -> None:
    tools = [_add, _boom, _cmd]
    ours = _outcome(LoneCallInline(tools), call_, via_send)
    assert ours == _outcome(ToolNode(tools), call_, via_send)
