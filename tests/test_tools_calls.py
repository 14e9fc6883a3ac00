"""DurableToolNode, one behaviour per test, on SQLite and PostgreSQL (DESIGN.md's table)."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from typing import Annotated, Any

import pytest
from fix_tools import (
    State,
    asking_checkpoint,
    build_graph,
    call,
    read_effects,
    record_effect,
    reply,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime

from langgraph_recall import RecallError
from langgraph_recall._errors import UnclassifiedTool
from langgraph_recall.tools import (
    ActionEnd,
    DurableToolNode,
    IdempotencyKey,
    current_idempotency_key,
    recall_class,
)
from langgraph_recall.tools._canonical import action_key, args_digest, canonical_args


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def _effect_tool(effects: str, name: str = "send") -> Any:
    @tool(name)
    def send(to: str, key: IdempotencyKey) -> str:
        """Send something."""
        record_effect(effects, to=to, key=key)
        return f"sent to {to}"

    return send


# --- classes -----------------------------------------------------------------------------------


def test_unclassified_tools_are_refused_at_construction_naming_each(tmp_path) -> None:
    a, b, c = (_effect_tool(str(tmp_path / "e"), n) for n in ("alpha", "beta", "gamma"))
    with pytest.raises(UnclassifiedTool) as err:
        DurableToolNode([a, b, c], classes={"beta": "pure"})
    assert err.value.code == "unclassified_tool"
    assert err.value.details["tools"] == ["alpha", "gamma"]
    assert "alpha" in str(err.value) and "gamma" in str(err.value)


def test_class_can_be_given_on_the_tool_itself(tmp_path) -> None:
    marked = recall_class("external", approve=True)(_effect_tool(str(tmp_path / "e"), "marked"))
    node = DurableToolNode([marked])
    assert node.durable.tool_class("marked") == "external"
    assert node.durable.needs_approval("marked")


def test_a_tool_the_model_made_up_gets_toolnodes_answer(store, saver, tmp_path) -> None:
    node = DurableToolNode([_effect_tool(str(tmp_path / "e"))], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("teleport", to="mars")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("made-up"))
    assert "not a valid tool" in str(_tool_messages(out)[0].content)
    assert store.actions("made-up") == []


def test_unknown_class_is_refused(tmp_path) -> None:
    with pytest.raises(RecallError) as err:
        DurableToolNode([_effect_tool(str(tmp_path / "e"))], classes={"send": "risky"})
    assert err.value.code == "invalid_value"


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "30", True, None])
def test_a_durable_timeout_that_is_not_a_positive_number_is_refused(tmp_path, timeout) -> None:
    # A negative one refused every call at once, a string failed inside the first call, and
    # an infinite one (accepted below) raised OverflowError from the sync wait.
    with pytest.raises(RecallError) as err:
        DurableToolNode(
            [_effect_tool(str(tmp_path / "e"))],
            classes={"send": "external"},
            durable_timeout=timeout,
        )
    assert err.value.code == "invalid_value" and "durable_timeout" in str(err.value)


def test_an_infinite_durable_timeout_waits_as_long_as_it_takes(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode(
        [_effect_tool(effects)], classes={"send": "external"}, durable_timeout=float("inf")
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, _config("inf"), durability="async")
    assert [e["to"] for e in read_effects(effects)] == ["a"]


# --- first call, repeats ---------------------------------------------------------------------------


def test_first_call_records_intent_and_result_and_runs_once(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("first"))
    assert [m.content for m in _tool_messages(out)] == ["sent to a"]
    [action] = store.actions("first")
    assert (action.tool, action.status, action.args) == ("send", "done", {"to": "a"})
    assert action.result.content == "sent to a"
    assert [e["key"] for e in read_effects(effects)] == [action.idempotency_key]


def test_replaying_a_finished_call_returns_its_result_without_running(
    store, saver, tmp_path
) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, _config("replay"))
    # Time travel: run the tools step again from the checkpoint taken before it.
    before_tools = next(
        s for s in graph.get_state_history(_config("replay")) if s.next == ("tools",)
    )
    out = graph.invoke(None, before_tools.config)
    assert len(read_effects(effects)) == 1
    assert _tool_messages(out)[-1].content == "sent to a"


def test_a_finished_call_asked_again_with_other_arguments_answers_its_record_and_says_so(
    store, saver, tmp_path, caplog
) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, _config("edited"))
    before_tools = next(
        s for s in graph.get_state_history(_config("edited")) if s.next == ("tools",)
    )
    # The saved AI message edited after its call ran: same message id and call id (so the
    # same action key), other arguments.
    asked = before_tools.values["messages"][-1]
    edited = asked.model_copy(update={"tool_calls": [{**asked.tool_calls[0], "args": {"to": "b"}}]})
    forked = graph.update_state(before_tools.config, {"messages": [edited]}, as_node="agent")
    with caplog.at_level(logging.WARNING, logger="langgraph_recall"):
        out = graph.invoke(None, forked)
    assert [e["to"] for e in read_effects(effects)] == ["a"]  # not run again, for b or a
    assert _tool_messages(out)[-1].content == "sent to a"
    [warning] = [r for r in caplog.records if "already ran with other arguments" in r.message]
    assert "{'to': 'a'}" in warning.message and "{'to': 'b'}" in warning.message


def test_pure_tools_run_every_time_and_are_not_recorded(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "pure"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, _config("pure"))
    before_tools = next(s for s in graph.get_state_history(_config("pure")) if s.next == ("tools",))
    graph.invoke(None, before_tools.config)
    assert len(read_effects(effects)) == 2
    assert store.actions("pure") == []


def test_a_tool_that_raises_is_recorded_failed_and_not_run_again(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")

    @tool
    def flaky(to: str) -> str:
        """Fails."""
        record_effect(effects, to=to)
        raise ValueError("mail server said no")

    node = DurableToolNode([flaky], classes={"flaky": "external"}, handle_tool_errors=True)
    graph = build_graph(
        node, [reply("", call("flaky", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("fail"))
    assert _tool_messages(out)[0].status == "error"
    [action] = store.actions("fail")
    assert action.status == "failed" and "mail server said no" in (action.error or "")
    before_tools = next(s for s in graph.get_state_history(_config("fail")) if s.next == ("tools",))
    again = graph.invoke(None, before_tools.config)
    assert len(read_effects(effects)) == 1
    assert "already ran and failed" in str(_tool_messages(again)[-1].content)


def test_a_raising_tool_under_default_error_handling_fails_the_run_recorded(store, saver) -> None:
    @tool
    def boom(x: int) -> str:
        """Raises."""
        raise RuntimeError("boom")

    node = DurableToolNode([boom], classes={"boom": "idempotent"})
    graph = build_graph(
        node, [reply("", call("boom", x=1)), reply("ok")], store=store, checkpointer=saver
    )
    with pytest.raises(RuntimeError, match="boom"):
        graph.invoke({"messages": [HumanMessage("go")]}, _config("boom"))
    [action] = store.actions("boom")
    assert action.status == "failed" and action.error == "RuntimeError: boom"


# --- in doubt ------------------------------------------------------------------------------------


def _leave_in_doubt(store, agent: str, tool_name: str, args: dict[str, Any], klass: str) -> str:
    """What a worker killed mid-call leaves behind: an intent with no end (the crash suites
    produce it with real kills; here it is written directly to test what follows). The agent
    runs on the thread of its name, where the scripted model's first reply is ``ai-<thread>-0``."""
    action_id = action_key(agent, f"ai-{agent}-0", "call-0-0", tool_name)
    store.claim(
        agent,
        action_id,
        tool=tool_name,
        args=args,
        args_digest=args_digest(tool_name, args),
        klass=klass,
    )
    return action_id


def test_in_doubt_external_call_is_not_run_and_the_model_is_told(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    action_id = _leave_in_doubt(store, "doubt", "send", {"to": "a"}, "external")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("doubt"))
    message = _tool_messages(out)[0]
    assert read_effects(effects) == []
    assert "UNKNOWN" in str(message.content) and "not finished" in str(message.content)
    assert message.artifact["recall"] == {"code": "in_doubt", "action_id": action_id}
    assert store.action(action_id).status == "open"


@pytest.mark.parametrize("found", ["done", "not_done", None])
def test_resolver_settles_an_external_call_in_doubt(store, saver, tmp_path, found) -> None:
    effects = str(tmp_path / "e.log")
    agent = f"resolve-{found}"
    action_id = _leave_in_doubt(store, agent, "send", {"to": "a"}, "external")
    asked = []

    def resolver(action):
        asked.append(action.action_id)
        if found is None:
            return None
        return ActionEnd(found, result="found it in the outbox", resolution="checked the outbox")

    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"}, resolver=resolver)
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config(agent))
    # Asked at the run's start (every run settles the agent's open calls); a call it cannot
    # tell about stays in doubt, and is asked about again when the model's call comes back.
    assert asked == [action_id] * (2 if found is None else 1)
    content = str(_tool_messages(out)[0].content)
    action = store.action(action_id)
    if found == "done":
        assert content == "found it in the outbox" and read_effects(effects) == []
        assert (action.status, action.resolved_by, action.note) == (
            "done",
            "resolver",
            "checked the outbox",
        )
    elif found == "not_done":  # it did not happen: runs now, under the same key
        assert content == "sent to a"
        assert [e["key"] for e in read_effects(effects)] == [action_id]
        assert (action.status, action.attempt) == ("done", 2)
    else:
        assert "UNKNOWN" in content and action.status == "open" and read_effects(effects) == []


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_resolver_that_raises_leaves_the_call_in_doubt_and_says_so(
    store, saver, tmp_path, caplog, use_async
) -> None:
    effects = str(tmp_path / "e.log")
    agent = f"resolver-raises-{use_async}"
    action_id = _leave_in_doubt(store, agent, "send", {"to": "a"}, "external")

    def check_outbox(action):
        raise ConnectionError("mail API down")

    node = DurableToolNode(
        [_effect_tool(effects)], classes={"send": "external"}, resolver=check_outbox
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    inputs = {"messages": [HumanMessage("go")]}
    # The ConnectionError came out of invoke naming neither the resolver nor the call, and
    # every resume failed the same way until the API was back.
    with caplog.at_level("WARNING", logger="langgraph_recall"):
        if use_async:
            out = asyncio.run(graph.ainvoke(inputs, _config(agent)))
        else:
            out = graph.invoke(inputs, _config(agent))
    assert "UNKNOWN" in str(_tool_messages(out)[0].content)
    assert out["messages"][-1].content == "ok"
    assert store.action(action_id).status == "open" and read_effects(effects) == []
    # Once at the run's start, once when the model's call came back: each names the call.
    warnings = [r for r in caplog.records if "check_outbox raised ConnectionError" in r.message]
    assert len(warnings) == 2 and all(action_id in w.message for w in warnings)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_resolver_answer_that_is_not_an_action_end_is_refused_by_name(
    store, saver, tmp_path, use_async
) -> None:
    effects = str(tmp_path / "e.log")
    agent = f"resolver-str-{use_async}"
    action_id = _leave_in_doubt(store, agent, "send", {"to": "a"}, "external")

    def check_outbox(action):
        return "yes it happened"

    node = DurableToolNode(
        [_effect_tool(effects)], classes={"send": "external"}, resolver=check_outbox
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    inputs = {"messages": [HumanMessage("go")]}
    # It was AttributeError: 'str' object has no attribute 'outcome'.
    with pytest.raises(RecallError) as err:
        if use_async:
            asyncio.run(graph.ainvoke(inputs, _config(agent)))
        else:
            graph.invoke(inputs, _config(agent))
    assert err.value.code == "invalid_value" and err.value.details["action_id"] == action_id
    assert "check_outbox returned str" in str(err.value) and "ActionEnd(" in str(err.value)
    assert store.action(action_id).status == "open" and read_effects(effects) == []


def test_a_resolver_result_that_cannot_be_recorded_is_refused_naming_resolver_and_action(
    store, tmp_path
) -> None:
    agent = "resolver-odd"
    action_id = _leave_in_doubt(store, agent, "send", {"to": "a"}, "external")

    class Receipt:
        pass

    def check_outbox(action):
        return ActionEnd("done", result=Receipt())

    node = DurableToolNode(
        [_effect_tool(str(tmp_path / "e"))], classes={"send": "external"}, resolver=check_outbox
    )
    # It was "cannot record a value of type Receipt", naming neither the resolver nor the call.
    with pytest.raises(RecallError) as err:
        node.settle(store, agent)
    assert err.value.code == "invalid_value" and err.value.details["action_id"] == action_id
    assert "check_outbox" in str(err.value) and action_id in str(err.value)
    assert "Receipt" in str(err.value)
    assert store.action(action_id).status == "open"


def test_in_doubt_idempotent_call_is_run_again_with_the_same_key(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    action_id = _leave_in_doubt(store, "idem", "send", {"to": "a"}, "idempotent")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "idempotent"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("idem"))
    assert _tool_messages(out)[0].content == "sent to a"
    assert [e["key"] for e in read_effects(effects)] == [action_id]
    assert store.action(action_id).status == "done"


def test_settle_closes_what_the_resolver_confirms_and_reports_the_rest(store, tmp_path) -> None:
    confirmed = _leave_in_doubt(store, "settle", "send", {"to": "a"}, "external")
    unknown = action_key("settle", "ai-1", "call-1-0", "send")
    store.claim("settle", unknown, tool="send", args={"to": "b"}, args_digest="d", klass="external")

    def resolver(action):
        return ActionEnd("done", result="delivered") if action.args["to"] == "a" else None

    node = DurableToolNode(
        [_effect_tool(str(tmp_path / "e"))], classes={"send": "external"}, resolver=resolver
    )
    report = node.settle(store, "settle")
    assert [a.action_id for a in report.closed] == [confirmed]
    assert report.closed[0].status == "done"
    assert [a.action_id for a in report.open] == [unknown]
    assert asyncio.run(node.asettle(store, "settle")).closed == []  # nothing left to confirm


# --- the idempotency key -------------------------------------------------------------------------


def test_key_is_hidden_from_the_model_and_a_forged_one_is_dropped(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    seen: list[tuple[str, str | None, str | None]] = []

    @tool
    def charge(
        amount: int, idempotency_key: Annotated[str, InjectedToolArg], runtime: ToolRuntime
    ) -> str:
        """Charge."""
        from_config = runtime.config["configurable"].get("recall_idempotency_key")
        seen.append((idempotency_key, current_idempotency_key(), from_config))
        record_effect(effects, amount=amount)
        return "charged"

    assert list(charge.tool_call_schema.model_fields) == ["amount"]
    node = DurableToolNode([charge], classes={"charge": "external"})
    forged = reply("", call("charge", amount=5, idempotency_key="FORGED"))
    graph = build_graph(node, [forged, reply("ok")], store=store, checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("go")]}, _config("forge"))
    [action] = store.actions("forge")
    assert seen == [(action.idempotency_key,) * 3]
    assert "FORGED" not in seen[0] and action.args == {"amount": 5}


def test_user_wrappers_run_inside_and_retry_under_the_same_key(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    attempts: list[str | None] = []

    def retry_twice(request, execute):
        attempts.append(current_idempotency_key())
        execute(request)
        attempts.append(current_idempotency_key())
        return execute(request)

    node = DurableToolNode(
        [_effect_tool(effects)], classes={"send": "idempotent"}, wrap_tool_call=retry_twice
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, _config("wrap"))
    [action] = store.actions("wrap")
    assert attempts == [action.idempotency_key] * 2
    assert {e["key"] for e in read_effects(effects)} == {action.idempotency_key}
    assert action.status == "done"


def test_a_sync_only_wrapper_works_under_ainvoke(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    seen: list[tuple[str, str | None]] = []

    @tool("send")
    def send(to: str, key: IdempotencyKey) -> str:
        """Send something."""
        seen.append((key, current_idempotency_key()))
        record_effect(effects, to=to, key=key)
        return f"sent to {to}"

    def log_calls(request, execute):
        seen.append(("wrapper", current_idempotency_key()))
        return execute(request)

    # ToolNode ran the sync chain on the event loop's thread: the durable call's wait for its
    # checkpoint blocked the loop that saves it, and the call was refused after the timeout.
    node = DurableToolNode(
        [send], classes={"send": "external"}, wrap_tool_call=log_calls, durable_timeout=3.0
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}, _config("sync-wrap")))
    assert [m.content for m in _tool_messages(out)] == ["sent to a"]
    [action] = store.actions("sync-wrap")
    key = action.idempotency_key
    assert action.status == "done" and seen == [("wrapper", key), (key, key)]


# --- outputs, durability -----------------------------------------------------------------------


def test_a_large_result_is_stored_whole_and_still_given_to_the_model(store, saver) -> None:
    big = "x" * (store.output_threshold * 3)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        return big

    node = DurableToolNode([fetch], classes={"fetch": "idempotent"})
    graph = build_graph(
        node, [reply("", call("fetch", url="u")), reply("ok")], store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("big"))
    assert _tool_messages(out)[0].content == big
    [action] = store.actions("big")
    assert len(action.result.content) < 100  # the record keeps a reference
    before_tools = next(s for s in graph.get_state_history(_config("big")) if s.next == ("tools",))
    assert _tool_messages(graph.invoke(None, before_tools.config))[-1].content == big


def test_durability_exit_is_refused_before_anything_runs(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    with pytest.raises(RecallError) as err:
        graph.invoke({"messages": [HumanMessage("go")]}, _config("exit"), durability="exit")
    assert err.value.code == "durability"
    assert read_effects(effects) == [] and store.actions("exit") == []


class _SlowPutSaver(SqliteSaver):
    """A real SqliteSaver whose checkpoint writes take a while, like a loaded database; on a
    thread named in ``held``, each write waits until that event is set."""

    held: dict[str, threading.Event]

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        gate = self.held.get(config["configurable"]["thread_id"])
        if gate is not None:
            gate.wait(60)
        else:
            time.sleep(0.3)
        return super().put(config, checkpoint, metadata, new_versions)


def test_tool_waits_until_the_ai_message_that_asked_for_it_is_saved(tmp_path) -> None:
    from langgraph_recall import RecallStore

    saved_before_running: list[bool] = []
    slow = _SlowPutSaver(sqlite3.connect(str(tmp_path / "cp.db"), check_same_thread=False))
    # The plain run's checkpoint writes wait for its tool: it runs first by construction.
    slow.held = {"plain": threading.Event()}

    @tool
    def act(x: int, runtime: ToolRuntime) -> str:
        """Acts."""
        thread = runtime.config["configurable"]["thread_id"]
        saved = slow.get_tuple(asking_checkpoint(thread, runtime))
        saved_before_running.append(saved is not None)
        if thread in slow.held:
            slow.held[thread].set()
        return "done"

    with RecallStore.open(str(tmp_path / "r.db")) as store:
        script = [reply("", call("act", x=1)), reply("ok")]
        plain = build_graph(ToolNode([act]), script, store=store, checkpointer=slow)
        plain.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "plain"}})
        durable = build_graph(
            DurableToolNode([act], classes={"act": "external"}),
            script,
            store=store,
            checkpointer=slow,
        )
        durable.invoke({"messages": [HumanMessage("go")]}, _config("barrier"))
    # The plain node ran before its checkpoint existed: that is the window the barrier closes.
    assert saved_before_running == [False, True]


# --- async ---------------------------------------------------------------------------------------


async def test_async_run_records_and_replays_the_same_way(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")

    @tool
    async def send(to: str, key: IdempotencyKey) -> str:
        """Send."""
        record_effect(effects, to=to, key=key, ctx=current_idempotency_key())
        return f"sent to {to}"

    node = DurableToolNode([send], classes={"send": "external"})
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    out = await graph.ainvoke({"messages": [HumanMessage("go")]}, _config("async"))
    assert _tool_messages(out)[0].content == "sent to a"
    [action] = await store.aactions("async")
    [effect] = read_effects(effects)
    assert effect["key"] == effect["ctx"] == action.idempotency_key
    before_tools = next(
        s for s in graph.get_state_history(_config("async")) if s.next == ("tools",)
    )
    await graph.ainvoke(None, before_tools.config)
    assert len(read_effects(effects)) == 1


# --- canonical arguments (unit) ---------------------------------------------------------------------


def test_canonical_arguments_fill_defaults_and_drop_injected_values(tmp_path) -> None:
    @tool
    def pay(
        amount: int, to: str, key: IdempotencyKey, runtime: ToolRuntime, currency: str = "EUR"
    ) -> str:
        """Pay."""
        return "ok"

    schema = pay.tool_call_schema
    assert canonical_args(schema, {"amount": "10", "to": "a", "key": "x"}) == {
        "amount": 10,
        "to": "a",
        "currency": "EUR",
    }
    assert args_digest("pay", canonical_args(schema, {"amount": 10, "to": "a"})) == args_digest(
        "pay", canonical_args(schema, {"amount": 10, "to": "a", "currency": "EUR"})
    )


def test_ai_message_without_an_id_still_gets_a_stable_key(store, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    message = AIMessage(
        "", tool_calls=[{"name": "send", "args": {"to": "a"}, "id": "c1", "type": "tool_call"}]
    )
    config = {"configurable": {"thread_id": "bare"}}
    g = StateGraph(State)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    graph = g.compile(store=store)
    graph.invoke({"messages": [message]}, config)
    graph.invoke({"messages": [message]}, config)
    assert len(read_effects(effects)) == 1


# --- time travel -----------------------------------------------------------------------------


def _sent_twice(store: Any, effects: str, thread: str) -> tuple[Any, Any]:
    """Agent "billing" on ``thread`` sends to a, then to b; the graph and the state before the
    first send, as ``get_state_history`` gives it (its config has no agent_id)."""
    node = DurableToolNode([_effect_tool(effects)], classes={"send": "external"})
    script = [reply("", call("send", to="a")), reply("", call("send", to="b")), reply("done")]
    graph = build_graph(
        node, script, store=store, checkpointer=store.checkpointer(), name_prefix=f"ai-{thread}"
    )
    cfg = {"configurable": {"thread_id": thread, "agent_id": "billing"}}
    graph.invoke({"messages": [HumanMessage("go")]}, cfg)
    assert [e["to"] for e in read_effects(effects)] == ["a", "b"]
    older = [s for s in graph.get_state_history(cfg) if s.next == ("tools",)][-1]
    assert "agent_id" not in older.config["configurable"]
    return graph, older


def test_time_travel_from_a_history_config_refuses_another_agent_and_repeats_nothing(
    store, tmp_path
) -> None:
    effects = str(tmp_path / "e.log")
    graph, older = _sent_twice(store, effects, "tt")
    # The history's config has no agent_id: the replay ran as agent "tt", under new action
    # keys, and sent both emails again.
    with pytest.raises(RecallError) as err:
        graph.invoke(None, older.config)
    assert err.value.code == "invalid_value" and err.value.details["owner"] == "billing"
    assert "agent_id" in str(err.value)
    assert [a.agent_id for a in store.agents()] == ["billing"]
    # Given its agent, the replay answers the finished calls from their records.
    turns = [t.msg_id for t in store.turns("billing")]
    replay = {"configurable": {**older.config["configurable"], "agent_id": "billing"}}
    out = graph.invoke(None, replay)
    assert [e["to"] for e in read_effects(effects)] == ["a", "b"]
    # The recorded answers come back as the same messages: the replay's tool results were
    # recorded again, with fresh ids, after the final answer.
    assert [t.msg_id for t in store.turns("billing")] == turns
    assert all(m.id in turns for m in _tool_messages(out))


def test_update_state_from_a_history_config_writes_for_the_checkpoints_agent(
    store, tmp_path
) -> None:
    effects = str(tmp_path / "e.log")
    graph, older = _sent_twice(store, effects, "up")
    # It took agent "up"'s lease (no bar to billing's runs) and stamped the fork for "up", so
    # a run from it was agent "up"'s and sent both emails again.
    fork = graph.update_state(older.config, {"messages": [HumanMessage("note", id="n1")]})
    assert graph.get_state(fork).metadata["recall_agent"] == "billing"
    graph.invoke(None, {"configurable": {**fork["configurable"], "agent_id": "billing"}})
    assert [e["to"] for e in read_effects(effects)] == ["a", "b"]
    assert [a.agent_id for a in store.agents()] == ["billing"]
    named = {"configurable": {**older.config["configurable"], "agent_id": "someone-else"}}
    with pytest.raises(RecallError) as err:
        graph.update_state(named, {"messages": [HumanMessage("x", id="n2")]})
    assert err.value.code == "invalid_value" and err.value.details["owner"] == "billing"


@pytest.mark.timeout(60)
def test_a_sync_only_wrapper_serves_many_calls_at_once_under_ainvoke(store, saver) -> None:
    @tool("look")
    def look(x: int) -> str:
        """A sync tool."""
        return f"saw {x}"

    def passthrough(request, execute):
        return execute(request)

    # The wrapper waited for its tool on the loop's default executor, which ToolNode runs the
    # sync tool on too: with as many calls as it has workers, every one waited, for good.
    calls = [call("look", x=i) for i in range(12)]
    node = DurableToolNode([look], classes={"look": "external"}, wrap_tool_call=passthrough)
    graph = build_graph(node, [reply("", *calls), reply("ok")], store=store, checkpointer=saver)
    inputs = {"messages": [HumanMessage("go")]}
    out = asyncio.run(graph.ainvoke(inputs, _config("many-wrapped"), durability="sync"))
    assert sorted(m.content for m in _tool_messages(out)) == sorted(f"saw {i}" for i in range(12))
    assert {a.status for a in store.actions("many-wrapped")} == {"done"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", ["node", "send"])
def test_many_parallel_calls_under_ainvoke_wait_for_their_checkpoint_without_a_thread_each(
    store, saver, layout
) -> None:
    @tool("look")
    async def look(x: int) -> str:
        """An async tool."""
        return f"saw {x}"

    # Each call waits for its AI message's checkpoint, which durability="async" puts on the
    # loop's default executor. The waits used to hold a worker each: with as many calls as it
    # has workers (cpu + 4), the put never got one, and the run hung for durable_timeout.
    calls = [call("look", x=i) for i in range((os.cpu_count() or 1) + 8)]
    node = DurableToolNode([look], classes={"look": "external"}, durable_timeout=600)
    graph = build_graph(
        node, [reply("", *calls), reply("ok")], store=store, checkpointer=saver, layout=layout
    )
    inputs = {"messages": [HumanMessage("go")]}
    out = asyncio.run(graph.ainvoke(inputs, _config(f"many-{layout}"), durability="async"))
    assert sorted(m.content for m in _tool_messages(out)) == sorted(
        f"saw {i}" for i in range(len(calls))
    )
    assert [a.status for a in store.actions(f"many-{layout}")] == ["done"] * len(calls)


def _cancel_mid_call(
    graph: Any, thread: str, reached: threading.Event, then: Any, settle: float
) -> None:
    """ainvoke ``graph``, cancel it once ``reached`` is set, then call ``then`` and wait."""

    async def cancelled_run() -> None:
        run = asyncio.ensure_future(
            graph.ainvoke({"messages": [HumanMessage("go")]}, _config(thread))
        )
        await asyncio.to_thread(reached.wait, 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        then()
        await asyncio.sleep(settle)

    asyncio.run(cancelled_run())


def test_a_sync_wrapper_cancelled_under_ainvoke_does_not_start_the_tool_afterwards(
    store, saver, tmp_path
) -> None:
    effects = str(tmp_path / "effects.log")
    asked = threading.Event()
    go_on = threading.Event()

    @tool("send")
    def send(to: str) -> str:
        """Sends something."""
        record_effect(effects, to=to)
        return "sent"

    def slow_wrapper(request, execute):
        asked.set()
        go_on.wait(30)  # the caller is cancelled while the wrapper is here
        return execute(request)

    node = DurableToolNode([send], classes={"send": "external"}, wrap_tool_call=slow_wrapper)
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    # Once cancelled, the wrapper asks for the tool: its caller is gone.
    _cancel_mid_call(graph, "cancelled", asked, then=go_on.set, settle=0.5)
    assert read_effects(effects) == [], "the tool ran after its caller was cancelled"
    assert [a.status for a in store.actions("cancelled")] == ["open"]  # settled on resume


def test_a_tool_started_by_a_sync_wrapper_is_cancelled_with_its_caller(
    store, saver, tmp_path
) -> None:
    effects = str(tmp_path / "effects.log")
    started = threading.Event()

    @tool("send")
    async def send(to: str) -> str:
        """Sends something, slowly."""
        started.set()
        await asyncio.sleep(1.0)
        record_effect(effects, to=to)
        return "sent"

    node = DurableToolNode(
        [send], classes={"send": "external"}, wrap_tool_call=lambda req, execute: execute(req)
    )
    graph = build_graph(
        node, [reply("", call("send", to="a")), reply("ok")], store=store, checkpointer=saver
    )
    # As with a plain ToolNode, cancelling ainvoke cancels the tool it is running (on the
    # loop, as the wrapper's thread asked): it went on unseen, its caller gone.
    _cancel_mid_call(graph, "cancelled-mid", started, then=lambda: None, settle=1.5)
    assert read_effects(effects) == []
    assert [a.status for a in store.actions("cancelled-mid")] == ["open"]
