"""Intents written ahead: a durable call's intent commits with its AI message's checkpoint.

With ``store.checkpointer()`` the intent of each durable call in a new AI message is written in
the transaction of the checkpoint holding that message (``checkpoint/_plans.py``). These tests
pin down what that must keep: the tool node then claims nothing itself; a planned call the run
never started is closed as never started when the run ends (never left in doubt), and may then
run with edited arguments; a plan for other arguments is closed and the call claims anew; a
process killed between that checkpoint and the tool leaves the call open, as any crash after
an intent does (in doubt for an external tool, re-run under its key for an idempotent one).
On SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from fix_tools import (
    build_graph,
    call,
    read_effects,
    record_effect,
    reply,
    run_faulted,
    run_to_end,
)
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from langgraph_recall import RecallStore
from langgraph_recall.store._actions import NOT_STARTED
from langgraph_recall.tools import DurableToolNode, IdempotencyKey
from langgraph_recall.tools._durable import DurableTools


def _send_tool(effects: str) -> Any:
    @tool
    def send(to: str, key: IdempotencyKey) -> str:
        """Send a message."""
        record_effect(effects, what="send", to=to, key=key)
        return f"sent to {to}"

    return send


def _graph(
    store: RecallStore,
    saver: Any,
    effects: str,
    script: list[Any],
    klass: str = "external",
    layout: str = "node",
    **kw: Any,
) -> Any:
    node = DurableToolNode([_send_tool(effects)], classes={"send": klass})
    graph = build_graph(
        node, [*script, reply("all sent")], store=store, checkpointer=saver, layout=layout
    )
    if kw:
        graph = graph.builder.compile(store=store, checkpointer=saver, **kw)
    return graph


def _sends(n: int) -> list[Any]:
    return [reply("", call("send", to=f"u{i}@example.com")) for i in range(n)]


def _sent(effects: str) -> list[str]:
    return [e["to"] for e in read_effects(effects, "send")]


def _run_sends(store: RecallStore, saver: Any, effects: str, thread: str, n: int) -> list[str]:
    """Run a graph whose model asks for ``n`` sends, one per message, to its end; who was sent to."""
    graph = _graph(store, saver, effects, _sends(n))
    config = {"configurable": {"thread_id": thread}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")
    return _sent(effects)


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every action id the tool node claimed through the store itself."""
    seen: list[str] = []
    real = RecallStore.claim

    def spy(self: RecallStore, agent_id: str, action_id: str, **kw: Any) -> Any:
        seen.append(action_id)
        return real(self, agent_id, action_id, **kw)

    monkeypatch.setattr(RecallStore, "claim", spy)
    return seen


def test_every_call_even_the_first_is_claimed_with_its_checkpoint(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str]
) -> None:
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-plan"}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")

    actions = store.actions("t-plan")
    assert [a.status for a in actions] == ["done"] * 3
    assert [a.attempt for a in actions] == [1, 1, 1]
    assert _sent(effects) == ["u0@example.com", "u1@example.com", "u2@example.com"]
    # The checkpointer found the tool node in the graph when the run started: every call,
    # the process's first included, was claimed by its AI message's checkpoint.
    assert claims == []


def test_two_graphs_naming_their_tool_node_alike_each_plan_with_their_own(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str]
) -> None:
    # One checkpointer, two compiled graphs, both with a tool node called "tools". A run of
    # the second, started while a run of the first is going, used to put its node in the
    # first's place: the first run's later calls were then planned by a node that does not
    # have their tool, and each claimed on its own.
    import threading

    effects = str(tmp_path / "effects")
    sends = _graph(store, saver, effects, _sends(3))

    @tool
    def note(text: str) -> str:
        """Write a note."""
        return f"noted {text}"

    notes = build_graph(
        DurableToolNode([note], classes={"note": "external"}),
        [reply("", call("note", text="a")), reply("", call("note", text="b")), reply("done")],
        store=store,
        checkpointer=saver,
        name_prefix="notes",
    )
    steps = sends.stream(
        {"messages": [HumanMessage("go")]},
        {"configurable": {"thread_id": "t-sends"}},
        durability="sync",
        stream_mode="updates",
    )
    next(steps)  # the first run is going: its lease is held, its first call planned
    next(steps)  # and its first call has run: the next put plans the second
    other = threading.Thread(
        target=notes.invoke,
        args=({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-notes"}}),
        kwargs={"durability": "sync"},
    )
    other.start()
    other.join(60)
    for _ in steps:
        pass
    assert _sent(effects) == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert [a.attempt for a in store.actions("t-sends")] == [1, 1, 1]
    assert [(a.tool, a.status) for a in store.actions("t-notes")] == [("note", "done")] * 2
    assert claims == [], "every call of both graphs was claimed with its checkpoint"


def _paused_before_a_planned_call(
    store: RecallStore, saver: Any, effects: str, thread: str
) -> tuple[Any, dict[str, Any]]:
    """A graph paused before its tool node, whose second call was planned; and its config."""
    graph = _graph(store, saver, effects, _sends(2), interrupt_before=["tools"])
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)  # paused before the first call
    graph.invoke(None, config)  # first call runs; paused before the second (planned)
    return graph, config


def test_a_run_paused_before_the_tools_closes_its_planned_call_as_never_started(
    store: RecallStore, saver: Any, tmp_path: Any
) -> None:
    effects = str(tmp_path / "effects")
    graph, config = _paused_before_a_planned_call(store, saver, effects, "t-pause")

    assert store.actions("t-pause", open_only=True) == []  # nothing left in doubt
    second = store.actions("t-pause")[-1]
    assert (second.status, second.resolved_by, second.attempt) == ("not_done", NOT_STARTED, 1)
    assert _sent(effects) == ["u0@example.com"]

    graph.invoke(None, config)  # the resume runs it: once, as a new attempt under its key
    assert _sent(effects) == ["u0@example.com", "u1@example.com"]
    again = store.action(second.action_id)
    assert (again.status, again.attempt) == ("done", 2)
    assert again.idempotency_key == second.idempotency_key


def test_a_call_edited_while_paused_runs_with_its_new_arguments(
    store: RecallStore, saver: Any, tmp_path: Any
) -> None:
    effects = str(tmp_path / "effects")
    graph, config = _paused_before_a_planned_call(store, saver, effects, "t-edit")

    last = graph.get_state(config).values["messages"][-1]
    assert isinstance(last, AIMessage)
    edited = {**last.tool_calls[0], "args": {"to": "boss@example.com"}}
    graph.update_state(config, {"messages": [AIMessage("", id=last.id, tool_calls=[edited])]})
    graph.invoke(None, config)

    assert _sent(effects) == ["u0@example.com", "boss@example.com"]
    done = store.actions("t-edit")[-1]
    assert (done.status, done.args) == ("done", {"to": "boss@example.com"})


def test_a_plan_for_other_arguments_is_closed_and_the_call_claims_anew(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = DurableTools.plan

    def skewed(self: DurableTools, *args: Any) -> Any:
        from dataclasses import replace

        return [
            replace(i, args={"to": "x@evil.com"}, args_digest="0" * 64) for i in real(self, *args)
        ]

    monkeypatch.setattr(DurableTools, "plan", skewed)
    sent = _run_sends(store, saver, str(tmp_path / "effects"), "t-skew", 2)

    assert sent == ["u0@example.com", "u1@example.com"]
    second = store.actions("t-skew")[-1]
    assert (second.status, second.attempt, second.args) == ("done", 2, {"to": "u1@example.com"})
    assert store.actions("t-skew", open_only=True) == []


def test_a_planned_call_reuses_the_canonical_arguments_of_its_plan(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import langgraph_recall.tools._durable as durable

    made: list[Any] = []
    real = durable.canonical_args

    def counting(*args: Any, **kw: Any) -> Any:
        made.append(args[1])
        return real(*args, **kw)

    monkeypatch.setattr(durable, "canonical_args", counting)
    sent = _run_sends(store, saver, str(tmp_path / "effects"), "t-canon", 3)

    assert sent == ["u0@example.com", "u1@example.com", "u2@example.com"]
    # Once per call, by its plan only; the node reused those.
    assert [a["to"] for a in made] == ["u0@example.com", "u1@example.com", "u2@example.com"]


def test_arguments_changed_after_their_plan_are_made_canonical_again(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The very same arguments object, changed in place between the plan and the call: what
    # runs is what gets recorded, never the plan's digest of what no longer is.
    real = DurableTools.plan

    def then_changed(self: DurableTools, message: AIMessage, *args: Any) -> Any:
        intents = real(self, message, *args)
        for tc in message.tool_calls:
            tc["args"]["to"] = "changed@example.com"
        return intents

    monkeypatch.setattr(DurableTools, "plan", then_changed)
    sent = _run_sends(store, saver, str(tmp_path / "effects"), "t-changed", 2)

    assert sent == ["changed@example.com"] * 2
    for ran in store.actions("t-changed"):
        assert (ran.status, ran.args) == ("done", {"to": "changed@example.com"})
        assert ran.attempt == 2  # the plan's attempt 1 closed as never started
    assert store.actions("t-changed", open_only=True) == []


@pytest.mark.parametrize("layout", ["send", "send-first"])
def test_calls_sent_to_the_tool_node_are_claimed_with_their_checkpoint(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str], layout: str
) -> None:
    # The checkpoint's pending sends trigger the node; only the calls they carry are planned
    # (with "send-first", the second call of the two-call message is sent nowhere).
    effects = str(tmp_path / "effects")
    two = reply("", call("send", to="a@example.com"), call("send", to="b@example.com"))
    script = [*_sends(2), two, reply("all sent")]
    node = DurableToolNode([_send_tool(effects)], classes={"send": "external"})
    graph = build_graph(node, script, store=store, checkpointer=saver, layout=layout)
    config = {"configurable": {"thread_id": "t-sent"}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")

    sent = ["u0@example.com", "u1@example.com", "a@example.com", "b@example.com"]
    if layout == "send-first":
        sent.remove("b@example.com")
    assert sorted(_sent(effects)) == sorted(sent)
    actions = store.actions("t-sent")
    assert [(a.status, a.attempt) for a in actions] == [("done", 1)] * len(sent)
    assert claims == []  # every call rode its checkpoint


def test_the_first_call_of_another_tool_is_planned_too(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str]
) -> None:
    effects = str(tmp_path / "effects")

    @tool
    def notify(to: str) -> str:
        """Notify someone."""
        record_effect(effects, what="notify", to=to)
        return f"notified {to}"

    node = DurableToolNode(
        [_send_tool(effects), notify], classes={"send": "external", "notify": "external"}
    )
    script = [*_sends(1), reply("", call("notify", to="boss")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "t-other"}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")

    assert [e["to"] for e in read_effects(effects, "notify")] == ["boss"]
    assert [(a.tool, a.status, a.attempt) for a in store.actions("t-other")] == [
        ("send", "done", 1),
        ("notify", "done", 1),
    ]
    assert claims == []  # notify's first call rode its checkpoint: the node knew it


def test_create_agent_with_recall_middleware_claims_with_the_checkpoint(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str]
) -> None:
    from langchain.agents import create_agent

    from langgraph_recall import RecallMiddleware
    from langgraph_recall.testing import ScriptedChatModel

    effects = str(tmp_path / "effects")
    agent = create_agent(
        ScriptedChatModel([*_sends(3), reply("all sent")]),
        [_send_tool(effects)],
        middleware=[RecallMiddleware(classes={"send": "external"})],
        checkpointer=saver,
        store=store,
    )
    config = {"configurable": {"thread_id": "t-agent"}}
    agent.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")

    assert _sent(effects) == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert [(a.status, a.attempt) for a in store.actions("t-agent")] == [("done", 1)] * 3
    # The checkpointer found the middleware and create_agent's tool node in the graph at the
    # run's start: even the first call's intent rode its checkpoint.
    assert claims == []


async def test_async_runs_claim_with_the_checkpoint_too(
    store: RecallStore, saver: Any, tmp_path: Any, claims: list[str]
) -> None:
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-async"}}
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config)  # durability="async"
    assert [a.status for a in await store.aactions("t-async")] == ["done"] * 3
    assert len(_sent(effects)) == 3
    assert claims == []


# --- a process killed between the AI message's checkpoint and the tool ------------------------


def planned_worker(
    target: str, agent_id: str, effects: str, klass: str, layout: str = "node"
) -> int:
    """Run the agent (three sends) to its end; with faults armed, die where they say."""
    store = RecallStore.open(target)
    try:
        saver = store.checkpointer(lease_ttl=30.0, wait=60.0, holder=f"worker-{agent_id}")
        graph = _graph(store, saver, effects, _sends(3), klass=klass, layout=layout)
        config = {"configurable": {"thread_id": agent_id}}
        ok = run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")
        return 0 if ok else 3
    finally:
        store.close()


def run_worker(
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    agent_id: str,
    effects: str,
    klass: str = "external",
    faults: str = "",
    layout: str = "node",
) -> int | None:
    """``planned_worker`` in a fresh interpreter, with ``faults`` armed there; its exit code."""
    return run_faulted(
        monkeypatch,
        faults,
        "test_tools_planned:planned_worker",
        target=target,
        agent_id=agent_id,
        effects=effects,
        klass=klass,
        layout=layout,
    )


@pytest.mark.parametrize(
    ("klass", "layout"), [("external", "node"), ("idempotent", "node"), ("external", "send")]
)
def test_killed_after_the_checkpoint_that_holds_the_intent(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, klass: str, layout: str
) -> None:
    # "send": the calls reach the tool node through Send, as create_agent's do; the checkpoint
    # holding the sends carries the intent.
    effects = str(tmp_path / "effects")
    # Checkpoints: the input, the human message, the first AI message, its tool's answer, the
    # second AI message (5th): its call is planned there. Exit right after that commit.
    exit_code = run_worker(
        monkeypatch, store_target, "k", effects, klass, "after_put=5:exit", layout
    )
    assert exit_code == 99
    assert _sent(effects) == ["u0@example.com"]
    with RecallStore.open(store_target) as store:
        (open_call,) = store.actions("k", open_only=True)  # the intent is there, not run
        assert open_call.args == {"to": "u1@example.com"}
        assert not open_call.started and not open_call.in_doubt  # planned, never started

    assert run_worker(monkeypatch, store_target, "k", effects, klass, layout=layout) == 0
    sent = [e for e in read_effects(effects, "send")]
    with RecallStore.open(store_target) as store:
        # Never started, so not in doubt, whatever its class: the resume's pending tool task
        # runs it once, under the key (and as the attempt) the intent was written with.
        assert [e["to"] for e in sent] == ["u0@example.com", "u1@example.com", "u2@example.com"]
        assert sent[1]["key"] == open_call.idempotency_key
        assert store.actions("k", open_only=True) == []
        assert store.action(open_call.action_id).attempt == 1


def test_a_new_processs_first_call_is_open_after_a_kill_at_its_checkpoint(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh process whose node has not run yet: the checkpointer found the node in the graph
    # when the run started, so even the first call's intent is in its AI message's checkpoint.
    # Killed right after that commit (the 3rd: the input, the human message, the AI message),
    # the call is open, never started, and the resume runs it once.
    effects = str(tmp_path / "effects")
    assert run_worker(monkeypatch, store_target, "k1", effects, faults="after_put=3:exit") == 99
    assert _sent(effects) == []
    with RecallStore.open(store_target) as store:
        (open_call,) = store.actions("k1", open_only=True)
        assert open_call.args == {"to": "u0@example.com"}
    assert run_worker(monkeypatch, store_target, "k1", effects) == 0
    assert _sent(effects) == ["u0@example.com", "u1@example.com", "u2@example.com"]
    with RecallStore.open(store_target) as store:
        assert store.actions("k1", open_only=True) == []


def test_another_saver_never_plans(store: RecallStore, tmp_path: Any, claims: list[str]) -> None:
    """Only the same-database saver can carry an intent in its transaction."""
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_recall import RecallCheckpointer

    saver = RecallCheckpointer(InMemorySaver(), store=store)
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-other"}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")
    assert len(claims) == 3
    assert [a.status for a in store.actions("t-other")] == ["done"] * 3
    saver.close()


# --- a checkpoint and the intents it carries commit together or not at all -----------------------


def _checkpoint() -> tuple[dict[str, Any], Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    return {"configurable": {"thread_id": "t-atomic", "checkpoint_ns": ""}}, empty_checkpoint()


def _rider(store: RecallStore) -> Any:
    from langgraph_recall.checkpoint._plans import PlanRider
    from langgraph_recall.store._actions import Intent, planned_insert

    intent = Intent(
        agent_id="t-atomic",
        action_id="a" * 32,
        tool="send",
        klass="external",
        args={"to": "u@example.com"},
        args_digest="d" * 64,
        idempotency_key="a" * 32,
        thread_id="t-atomic",
        epoch=None,
    )
    db: Any = store._db
    return PlanRider([planned_insert(db.sql, db.dialect, intent)], db.dialect)


def test_a_fenced_out_checkpoint_takes_its_intents_with_it(store: RecallStore, inner: Any) -> None:
    from langgraph_recall.checkpoint._fence import is_fence_error
    from langgraph_recall.checkpoint._same_db import put_with

    saver = store.checkpointer()
    epoch = saver._shared.keeper.acquire("t-atomic").epoch  # the lease row the fence compares
    config, checkpoint = _checkpoint()
    stale = {"recall_agent": "t-atomic", "recall_epoch": epoch - 1}
    with pytest.raises(Exception) as refused:
        put_with(inner, _rider(store), config, checkpoint, stale, {})
    assert is_fence_error(refused.value)
    assert store.actions("t-atomic") == []
    assert inner.get_tuple(config) is None

    put_with(inner, (ok := _rider(store)), config, checkpoint, {**stale, "recall_epoch": epoch}, {})
    assert [c.action.action_id for c in ok.claims()] == ["a" * 32]
    assert [a.status for a in store.actions("t-atomic")] == ["open"]
    saver.close()


def test_a_failed_intent_takes_its_checkpoint_with_it(store: RecallStore, inner: Any) -> None:
    from langgraph_recall.checkpoint._same_db import put_with

    class Broken:
        def send(self, cur: Any) -> None:
            cur.execute("INSERT INTO no_such_table VALUES (1)")

    config, checkpoint = _checkpoint()
    with pytest.raises(Exception, match="no_such_table"):
        put_with(inner, Broken(), config, checkpoint, {}, {})
    assert inner.get_tuple(config) is None
    put_with(inner, _rider(store), config, checkpoint, {}, {})  # the saver still works
    assert inner.get_tuple(config) is not None


def test_a_subgraphs_tool_node_plans_nothing_for_a_root_node_of_its_name(
    store: RecallStore, saver: Any, tmp_path: Any
) -> None:
    """Plans follow root checkpoints, whose triggers name root nodes: a durable node inside a
    subgraph must not answer for the root's own node of the same name (a plain ToolNode
    here), or each of the root's calls would leave a planned attempt behind."""
    from fix_tools import State
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langgraph_recall.testing import ScriptedChatModel

    effects = str(tmp_path / "effects")
    inner = _graph(store, None, effects, _sends(1))  # agent -> tools (durable) -> agent
    # The scripted model answers by the number of AI messages it is shown: the subgraph's two
    # come first.
    model = ScriptedChatModel(
        [reply("-"), reply("-"), *_sends(2), reply("done")], name_prefix="root"
    )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(State)
    g.add_node("sub", inner)
    g.add_node("agent", agent)

    @tool
    def send(to: str) -> str:
        """Send a message."""
        record_effect(effects, what="send", to=to)
        return f"sent to {to}"

    g.add_node("tools", ToolNode([send]))
    g.add_edge(START, "sub")
    g.add_edge("sub", "agent")
    g.add_conditional_edges("agent", tools_condition, ["tools", "__end__"])
    g.add_edge("tools", "agent")
    graph = g.compile(store=store, checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-sub"}})

    assert len(_sent(effects)) == 3  # one by the subgraph's durable node, two by the root's
    assert [a.status for a in store.actions("t-sub")] == ["done"]  # only the durable call


def test_a_plan_that_fails_costs_no_checkpoint(
    store: RecallStore,
    saver: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    claims: list[str],
) -> None:
    """Planning is an optimisation: if it raises, the checkpoint is written without it and
    the node claims its calls itself."""

    def broken(self: DurableTools, *args: Any) -> Any:
        raise ValueError("cannot plan this")

    monkeypatch.setattr(DurableTools, "plan", broken)
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-noplan"}}
    assert run_to_end(graph, config, {"messages": [HumanMessage("go")]}, durability="sync")
    assert [a.status for a in store.actions("t-noplan")] == ["done"] * 3
    assert len(claims) == 3


def test_a_planned_claim_is_handed_over_once(store: RecallStore, saver: Any, tmp_path: Any) -> None:
    """A node retried in the same run (LangGraph's RetryPolicy) must not find the planned
    claim again: its call raised, was recorded failed, and is not run a second time."""
    from fix_tools import State
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import tools_condition
    from langgraph.types import RetryPolicy

    from langgraph_recall.testing import ScriptedChatModel

    effects = str(tmp_path / "effects")

    @tool
    def send(to: str, key: IdempotencyKey) -> str:
        """Send a message."""
        record_effect(effects, what="send", to=to, key=key)
        if to == "boom@example.com":
            raise RuntimeError("the mail server hung up")
        return f"sent to {to}"

    model = ScriptedChatModel(
        [
            reply("", call("send", to="u0@example.com")),
            reply("", call("send", to="boom@example.com")),
            reply("done"),
        ]
    )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    node = DurableToolNode([send], classes={"send": "external"}, handle_tool_errors=False)
    g.add_node(
        "tools",
        node,
        retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=RuntimeError),
    )
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, ["tools", "__end__"])
    g.add_edge("tools", "agent")
    graph = g.compile(store=store, checkpointer=saver)
    # The retry finds the call recorded failed and answers with that, without running it.
    out = graph.invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-retry"}}
    )
    assert "hung up" in str(out["messages"][-2].content)

    assert _sent(effects) == ["u0@example.com", "boom@example.com"]  # not run again
    assert [a.status for a in store.actions("t-retry")] == ["done", "failed"]


def test_a_run_that_lost_its_lease_leaves_its_planned_calls_open(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run pauses before its tool node with a call planned, and finds at its end that
    # another process took the lease over: closing the call as never started could close one
    # the new holder has started meanwhile. It stays open (in doubt to the new holder: the
    # safe side), and nothing ran here.
    from langgraph_recall import LeaseLost
    from langgraph_recall.checkpoint import _runs

    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(1), interrupt_before=["tools"])

    def taken_over(name: str, hold: Any = None) -> None:
        if name == "before_release":
            saver._shared.keeper.mark_lost("t-lost", "another process took it over")

    monkeypatch.setattr(_runs, "fault_point", taken_over)
    with pytest.raises(LeaseLost):
        graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-lost"}})
    (planned,) = store.actions("t-lost")
    assert (planned.status, planned.attempt) == ("open", 1)
    assert _sent(effects) == []


# --- planned vs started: SIGKILL right before and right after the start mark ------------------


@pytest.mark.parametrize("klass", ["external", "idempotent"])
def test_killed_before_the_start_mark_the_call_runs_once_on_resume(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, klass: str
) -> None:
    # The second call's intent committed with its AI message; SIGKILL in the tool node, right
    # before the start mark: its tool never began, so it is not in doubt, and the same
    # thread's resume (its pending tool task) runs it exactly once, as attempt 1.
    effects = str(tmp_path / "effects")
    assert run_worker(monkeypatch, store_target, "s1", effects, klass, "before_start=2:kill") == -9
    assert _sent(effects) == ["u0@example.com"]
    with RecallStore.open(store_target) as store:
        (planned,) = store.actions("s1", open_only=True)
        assert (planned.args, planned.started, planned.in_doubt) == (
            {"to": "u1@example.com"},
            False,
            False,
        )
    assert run_worker(monkeypatch, store_target, "s1", effects, klass) == 0
    sent = read_effects(effects, "send")
    assert [e["to"] for e in sent] == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert sent[1]["key"] == planned.idempotency_key
    with RecallStore.open(store_target) as store:
        assert store.actions("s1", open_only=True) == []
        assert store.action(planned.action_id).attempt == 1


def test_killed_after_the_start_mark_the_call_is_in_doubt(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGKILL right after the start mark committed: the tool may have begun, so the call is in
    # doubt, and an external one is never run again blindly on resume.
    effects = str(tmp_path / "effects")
    assert (
        run_worker(monkeypatch, store_target, "s2", effects, "external", "after_start=2:kill") == -9
    )
    with RecallStore.open(store_target) as store:
        (doubt,) = store.actions("s2", open_only=True)
        assert (doubt.started, doubt.in_doubt) == (True, True)
    assert run_worker(monkeypatch, store_target, "s2", effects, "external") == 0
    assert _sent(effects) == ["u0@example.com", "u2@example.com"]
    with RecallStore.open(store_target) as store:
        assert [a.action_id for a in store.actions("s2", open_only=True)] == [doubt.action_id]
