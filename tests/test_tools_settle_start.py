"""The run-start settle: an agent's open calls are settled when any run of it starts.

With ``store.checkpointer()`` every run of an agent, on any thread, settles the agent's open
durable calls right after it takes the lease, before its first node (so before the briefing
and the first model call): a call planned with its AI message whose tool never began is closed
as not done (never started), so the model may call again; the resolver is asked about each
external call in doubt; an idempotent call in doubt is run again under its own key. Only the
calls the run's own pending tool task runs itself are left to it (the same thread's
``invoke(None)``). For ``DurableToolNode`` and for ``create_agent`` + ``RecallMiddleware``,
with real processes killed by SIGKILL at named fault points, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fix_store import write_planned
from fix_tools import build_graph, call, read_effects, record_effect, reply, run_faulted
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_recall import RecallStore
from langgraph_recall.store._actions import NOT_STARTED
from langgraph_recall.tools import ActionEnd, DurableToolNode, IdempotencyKey

# The first task: two sends, then an answer. A later task on another thread: ``LATER``.
FIRST = [reply("", call("send", to="u0")), reply("", call("send", to="u1")), reply("all sent")]
LATER = {
    "again": [reply("", call("send", to="u1")), reply("sent again")],
    "answer": [reply("nothing to do")],
}


def _send_tool(effects: str) -> Any:
    @tool
    def send(to: str, key: IdempotencyKey) -> str:
        """Send a message."""
        record_effect(effects, what="send", to=to, key=key)
        return f"sent to {to}"

    return send


def _resolver(effects: str) -> Any:
    """Checks the effect log for the call's key, and notes that it was asked."""

    def resolve(action: Any) -> ActionEnd:
        record_effect(effects, what="asked", action=action.action_id)
        for e in read_effects(effects, "send"):
            if e["key"] == action.idempotency_key:
                return ActionEnd("done", result=f"sent to {e['to']} (found in the log)")
        return ActionEnd("not_done")

    return resolve


def _graph(store: Any, effects: str, layout: str, klass: str, script: list[Any]) -> Any:
    saver = store.checkpointer(lease_ttl=30.0, wait=60.0)
    classes = {"send": klass}
    if layout == "node":
        node = DurableToolNode([_send_tool(effects)], classes=classes, resolver=_resolver(effects))
        return build_graph(node, script, store=store, checkpointer=saver)
    from langchain.agents import create_agent

    from langgraph_recall import RecallMiddleware
    from langgraph_recall.testing import ScriptedChatModel

    return create_agent(
        ScriptedChatModel(script),
        [_send_tool(effects)],
        middleware=[RecallMiddleware(classes=classes, resolver=_resolver(effects))],
        checkpointer=saver,
        store=store,
    )


def settle_worker(
    target: str, thread: str, effects: str, layout: str, klass: str, script: str, message: str
) -> int:
    """One run of agent "a" on ``thread``: with ``message`` as its input ("" resumes it)."""
    store = RecallStore.open(target)
    try:
        steps = FIRST if script == "first" else LATER[script]
        graph = _graph(store, effects, layout, klass, steps)
        config = {"configurable": {"thread_id": thread, "agent_id": "a"}}
        given = {"messages": [HumanMessage(message)]} if message else None
        graph.invoke(given, config, durability="sync")
        return 0
    finally:
        store.close()


def run(
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    effects: str,
    *,
    thread: str,
    layout: str,
    klass: str = "external",
    script: str = "first",
    message: str = "go",
    faults: str = "",
) -> int | None:
    return run_faulted(
        monkeypatch,
        faults,
        "test_tools_settle_start:settle_worker",
        target=target,
        thread=thread,
        effects=effects,
        layout=layout,
        klass=klass,
        script=script,
        message=message,
    )


def _sent(effects: str) -> list[str]:
    return [e["to"] for e in read_effects(effects, "send")]


def _asked(effects: str) -> list[str]:
    return [e["action"] for e in read_effects(effects, "asked")]


def _killed_at(
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    effects: str,
    layout: str,
    faults: str,
    klass: str = "external",
) -> Any:
    """The first task on thread "t1", SIGKILLed where ``faults`` say (at u1's call): that call."""
    code = run(monkeypatch, target, effects, thread="t1", layout=layout, klass=klass, faults=faults)
    assert code == -9
    with RecallStore.open(target) as store:
        (found,) = [a for a in store.actions("a") if a.args.get("to") == "u1"][:1]
        return found


LAYOUTS = ["node", "agent"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_call_killed_before_its_start_mark_is_closed_on_a_new_thread(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    effects = str(tmp_path / "effects")
    planned = _killed_at(monkeypatch, store_target, effects, layout, "before_start=2:kill")
    assert _sent(effects) == ["u0"]
    assert (planned.status, planned.started) == ("open", False)
    # A new thread of the agent: its run start closes the call as never started (the model
    # sees it may call again), and the new call, under a new key, runs once.
    assert run(monkeypatch, store_target, effects, thread="t2", layout=layout, script="again") == 0
    assert _sent(effects) == ["u0", "u1"]
    assert _asked(effects) == []  # never started: nothing for a resolver to check
    with RecallStore.open(store_target) as store:
        closed = store.action(planned.action_id)
        assert (closed.status, closed.resolved_by) == ("not_done", NOT_STARTED)
        assert store.actions("a", open_only=True) == []
        assert [a.status for a in store.actions("a")] == ["done", "not_done", "done"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_call_killed_before_its_start_mark_runs_once_on_the_same_threads_resume(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    effects = str(tmp_path / "effects")
    planned = _killed_at(monkeypatch, store_target, effects, layout, "before_start=2:kill")
    # invoke(None): the run-start settle leaves the call to the pending tool task, which runs
    # it once, as the very attempt its intent was written as.
    assert run(monkeypatch, store_target, effects, thread="t1", layout=layout, message="") == 0
    assert _sent(effects) == ["u0", "u1"]
    assert [e["key"] for e in read_effects(effects, "send")][1] == planned.idempotency_key
    with RecallStore.open(store_target) as store:
        done = store.action(planned.action_id)
        assert (done.status, done.attempt) == ("done", 1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("where", ["new_thread", "new_message"])
def test_the_resolver_is_asked_at_the_start_of_the_next_run(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str, where: str
) -> None:
    # Killed after u1's tool answered, its end unrecorded: in doubt. The next run of the
    # agent, on a new thread or with a new user message on the same one (LangGraph drops the
    # pending tool task then), asks the resolver before its first model call.
    effects = str(tmp_path / "effects")
    doubt = _killed_at(monkeypatch, store_target, effects, layout, "tool_ran=2:kill")
    assert _sent(effects) == ["u0", "u1"]
    assert doubt.in_doubt
    thread, message = ("t2", "go") if where == "new_thread" else ("t1", "continue")
    assert (
        run(
            monkeypatch,
            store_target,
            effects,
            thread=thread,
            layout=layout,
            script="answer" if where == "new_thread" else "first",
            message=message,
        )
        == 0
    )
    assert _asked(effects) == [doubt.action_id]
    assert _sent(effects) == ["u0", "u1"]
    with RecallStore.open(store_target) as store:
        done = store.action(doubt.action_id)
        assert (done.status, done.resolved_by) == ("done", "resolver")
        assert "found in the log" in json.dumps(done.result, default=str)
        assert store.actions("a", open_only=True) == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_idempotent_call_in_doubt_is_rerun_under_its_key_on_a_new_thread(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    effects = str(tmp_path / "effects")
    doubt = _killed_at(
        monkeypatch, store_target, effects, layout, "after_start=2:kill", klass="idempotent"
    )
    assert _sent(effects) == ["u0"]
    assert doubt.in_doubt
    assert (
        run(
            monkeypatch,
            store_target,
            effects,
            thread="t2",
            layout=layout,
            klass="idempotent",
            script="answer",
        )
        == 0
    )
    sent = read_effects(effects, "send")
    assert [e["to"] for e in sent] == ["u0", "u1"]
    assert sent[1]["key"] == doubt.idempotency_key  # its own key, not a new call's
    with RecallStore.open(store_target) as store:
        done = store.action(doubt.action_id)
        assert (done.status, done.attempt) == ("done", 1)
        assert "sent to u1" in json.dumps(done.result, default=str)


async def test_an_async_run_settles_at_its_start_with_an_async_resolver(
    store: RecallStore, saver: Any, tmp_path: Any
) -> None:
    # Left by an earlier run of agent "a": a call planned and never started, and one started
    # and in doubt. An ainvoke on a new thread settles both before its first node.
    effects = str(tmp_path / "effects")
    write_planned(store, "a", "never-began", "send", {"to": "u1"})
    store.claim("a", "in-doubt", tool="send", args={"to": "u2"}, args_digest="d2", thread_id="t0")
    asked: list[str] = []

    async def resolver(action: Any) -> ActionEnd:
        asked.append(action.action_id)
        return ActionEnd("done", result="seen in the mail log")

    node = DurableToolNode([_send_tool(effects)], classes={"send": "external"}, resolver=resolver)
    graph = build_graph(node, [reply("nothing left")], store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "t-new", "agent_id": "a"}}
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert asked == ["in-doubt"]  # the one never started is nothing to ask about
    never, doubt = store.action("never-began"), store.action("in-doubt")
    assert (never.status, never.resolved_by) == ("not_done", NOT_STARTED)
    assert (doubt.status, doubt.resolved_by, doubt.result) == (
        "done",
        "resolver",
        "seen in the mail log",
    )
    assert read_effects(effects, "send") == []
