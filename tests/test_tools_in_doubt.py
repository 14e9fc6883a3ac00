"""A tool that cannot tell whether its effect happened says so, and the call stays in doubt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fix_tools import build_graph, call, read_effects, record_effect, reply
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_recall import ActionEnd, InDoubt
from langgraph_recall.tools import DurableToolNode, IdempotencyKey


def _doubtful_charge(effects: str, *, only_first: bool = False) -> Any:
    """A charge tool whose request reaches the payment API (an effect recorded) and whose
    answer is lost: it raises InDoubt (with ``only_first``, on the first request only)."""

    @tool
    def charge(order: str, key: IdempotencyKey) -> str:
        """Charge an order."""
        record_effect(effects, order=order, key=key)
        if not only_first or len(read_effects(effects)) == 1:
            raise InDoubt("the payment API closed the connection before answering")
        return f"charged {order}"

    return charge


def test_a_tool_raising_in_doubt_leaves_the_action_open_and_is_not_retried(
    store: Any, saver: Any, tmp_path: Any
) -> None:
    effects = str(tmp_path / "charges")

    charge = _doubtful_charge(effects)

    node = DurableToolNode([charge], classes={"charge": "external"})
    script = [reply("", call("charge", order="o-1")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "t-doubt", "agent_id": "a-doubt"}}
    out = graph.invoke({"messages": [HumanMessage("charge o-1", id="h-1")]}, config)

    told = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(told) == 1 and "unknown" in str(told[0].content).lower()
    # The tool's own reason, not a crash story ("never reported back"): it did report back.
    text = str(told[0].content)
    assert "the payment API closed the connection before answering" in text
    assert "never reported back" not in text
    [action] = store.actions("a-doubt", open_only=True)
    assert action.tool == "charge" and action.status == "open"
    # Re-running the step (a resume, a sibling re-run) must not send the charge again.
    graph.invoke(None, config)
    assert len(read_effects(effects)) == 1
    assert [a.status for a in store.actions("a-doubt")] == ["open"]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("found", ["done", "not_done"])
def test_a_tool_raising_in_doubt_is_shown_to_the_resolver_in_the_same_run(
    store: Any, saver: Any, tmp_path: Any, found: str, use_async: bool
) -> None:
    effects = str(tmp_path / "charges")
    asked: list[tuple[str, str]] = []

    charge = _doubtful_charge(effects, only_first=True)

    def check_ledger(action: Any) -> ActionEnd:
        asked.append((action.tool, action.status))
        return ActionEnd(found, result="charge ch_1 found", resolution="looked it up by key")

    node = DurableToolNode([charge], classes={"charge": "external"}, resolver=check_ledger)
    script = [reply("", call("charge", order="o-1")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    agent = f"a-doubt-{found}-{use_async}"
    config = {"configurable": {"thread_id": agent, "agent_id": agent}}
    inputs = {"messages": [HumanMessage("charge o-1", id="h-1")]}
    if use_async:
        out = asyncio.run(graph.ainvoke(inputs, config))
    else:
        out = graph.invoke(inputs, config)

    # Asked at once, in this run: not left open until some later resume.
    assert asked == [("charge", "open")]
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    [action] = store.actions(agent)
    if found == "done":  # it happened: the resolver's result is the answer; not charged again
        assert told.content == "charge ch_1 found" and len(read_effects(effects)) == 1
        assert (action.status, action.resolved_by) == ("done", "resolver")
    else:  # it did not happen: charged again now, under the same key
        assert told.content == "charged o-1" and (action.status, action.attempt) == ("done", 2)
        keys = {e["key"] for e in read_effects(effects)}
        assert keys == {action.action_id} and len(read_effects(effects)) == 2


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_in_doubt_stays_in_doubt_with_handle_tool_errors(
    store: Any, saver: Any, tmp_path: Any, use_async: bool
) -> None:
    # handle_tool_errors=True made ToolNode answer the tool's InDoubt as an error message
    # ("Please fix your mistakes"): the call was recorded failed, a charge that may have gone
    # through read as not made, and the resolver was never asked.
    effects = str(tmp_path / "charges")
    asked: list[str] = []

    charge = _doubtful_charge(effects)

    def cannot_tell(action: Any) -> None:
        asked.append(action.tool)
        return None

    node = DurableToolNode(
        [charge], classes={"charge": "external"}, resolver=cannot_tell, handle_tool_errors=True
    )
    script = [reply("", call("charge", order="o-1")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    agent = f"a-doubt-hte-{use_async}"
    config = {"configurable": {"thread_id": agent}}
    inputs = {"messages": [HumanMessage("charge o-1", id="h-1")]}
    out = asyncio.run(graph.ainvoke(inputs, config)) if use_async else graph.invoke(inputs, config)
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "unknown" in str(told.content).lower() and "fix your mistakes" not in str(told.content)
    assert asked == ["charge"]
    assert [a.status for a in store.actions(agent)] == ["open"]


def test_an_approved_call_the_resolver_finds_not_done_is_not_run_again(
    store: Any, saver: Any, tmp_path: Any
) -> None:
    # "not done" runs a call again at once, but not an approved one: its approval went with
    # the attempt (one approval, one execution), and the model is told to call it again.
    from langgraph.types import Command

    effects = str(tmp_path / "pays")

    @tool
    def pay(amount: int, to: str, key: IdempotencyKey) -> str:
        """Pay someone."""
        record_effect(effects, amount=amount, key=key)
        raise InDoubt("the bank closed the connection before answering")

    def bank(action: Any) -> ActionEnd:
        return ActionEnd("not_done", resolution="no such payment at the bank")

    node = DurableToolNode([pay], classes={"pay": "external"}, approve=("pay",), resolver=bank)
    script = [reply("", call("pay", amount=10, to="alice")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "gated-not-done"}}
    graph.invoke({"messages": [HumanMessage("pay alice 10", id="h-1")]}, config)
    out = graph.invoke(Command(resume={"type": "approve"}), config)
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(read_effects(effects)) == 1
    assert "no such payment at the bank" in str(told.content)
    assert "call the tool again" in str(told.content)
    [action] = store.actions("gated-not-done")
    assert (action.status, action.attempt) == ("not_done", 1)


def test_an_async_resolver_settles_a_tool_in_doubt_under_invoke(
    store: Any, saver: Any, tmp_path: Any
) -> None:
    # The resolver may be sync or async. Under invoke an async one failed the whole run
    # ("the resolver is async but the graph runs synchronously") as soon as a tool raised
    # InDoubt, which before it was asked at once only reached the model as "unknown".
    effects = str(tmp_path / "charges")

    charge = _doubtful_charge(effects)

    async def check_ledger(action: Any) -> ActionEnd:
        await asyncio.sleep(0)
        return ActionEnd("done", result="charge ch_1 found", resolution="looked it up by key")

    node = DurableToolNode([charge], classes={"charge": "external"}, resolver=check_ledger)
    script = [reply("", call("charge", order="o-1")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "async-resolver"}}
    out = graph.invoke({"messages": [HumanMessage("charge o-1", id="h-1")]}, config)
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert told.content == "charge ch_1 found" and len(read_effects(effects)) == 1
    [action] = store.actions("async-resolver")
    assert (action.status, action.resolved_by) == ("done", "resolver")
