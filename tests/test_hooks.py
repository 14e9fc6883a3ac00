"""How the briefing reaches the model, in every graph style, sync and async, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fix_agents import (
    GOAL,
    STEPS,
    STYLES,
    TaskModel,
    build,
    config,
    repeated_turns,
    run_task,
    task_tools,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_recall import _hooks
from langgraph_recall._briefing import BRIEFING_ID
from langgraph_recall._errors import RecallError
from langgraph_recall._hooks import (
    UNSTORED_MARKER,
    awith_briefing,
    briefing_node,
    record_node,
    with_briefing,
)
from langgraph_recall.store import RecallStore

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


def _agent(style: str, store: RecallStore, tmp_path: Any, **kw: Any) -> tuple[Any, TaskModel]:
    model = TaskModel()
    tools = task_tools(str(tmp_path) + "/effects.txt")
    return build(style, model, tools, store=store, checkpointer=InMemorySaver(), **kw), model


def _system(messages: list[Any]) -> str:
    return "\n".join(str(m.content) for m in messages if isinstance(m, SystemMessage))


@pytest.mark.parametrize("use_async", MODES)
@pytest.mark.parametrize("style", STYLES)
def test_each_style_briefs_every_model_call_and_never_shows_a_turn_twice(
    style: str, use_async: bool, store: RecallStore, tmp_path: Any
) -> None:
    graph, model = _agent(style, store, tmp_path)
    out = run_task(graph, "A", "billing", "TASK-0: go.", use_async=use_async)
    assert out["messages"][-1].content == f"All {STEPS} steps done."

    # Refreshed on every call: the goal set by the first reply is in the second call's briefing.
    assert "## Working state" not in _system(model.seen[0])
    assert f"goal: {GOAL}" in _system(model.seen[1])
    assert f"progress: done through step {STEPS - 1}" in _system(model.seen[-2])
    # The briefing reaches the model but never the conversation.
    assert all(not isinstance(m, SystemMessage) or style == "middleware" for m in out["messages"])
    assert not any(m.id == BRIEFING_ID for m in out["messages"])
    # Every message was recorded, once, in order.
    assert [t.msg_id for t in store.turns("billing")] == [m.id for m in out["messages"]]

    # Same thread, later: the conversation holds every turn, so the briefing repeats none.
    model.seen.clear()
    run_task(graph, "A", "billing", "TASK-1: anything left?", use_async=use_async)
    assert model.seen and all(repeated_turns(seen) == [] for seen in model.seen)
    assert "## Earlier turns" not in _system(model.seen[0])

    # A new thread for the same agent carries the last turns.
    model.seen.clear()
    run_task(graph, "B", "billing", "TASK-2: report.", use_async=use_async)
    given = _system(model.seen[0])
    assert "## Earlier turns not in this conversation, oldest first" in given
    assert given.rstrip().endswith("assistant: All 6 steps done.")
    assert "user: TASK-1: anything left?" in given
    assert all(repeated_turns(seen) == [] for seen in model.seen)


def test_react_checkpoints_keep_a_marker_not_the_briefing(
    store: RecallStore, tmp_path: Any
) -> None:
    """LangGraph persists ``llm_input_messages`` in every checkpoint: measure what it keeps."""
    store.update_working_state("billing", notes="context " * 3000)  # a briefing as big as allowed
    serde = JsonPlusSerializer()
    sizes = {}
    for budget in (300, 6000):
        graph, model = _agent("react", store, tmp_path, token_budget=budget)
        cfg = config(f"t{budget}", "billing")
        graph.invoke({"messages": [HumanMessage("TASK-0: go.")]}, cfg)
        briefings = [m for seen in model.seen for m in seen if str(m.content).startswith("# Brief")]
        assert briefings and max(len(str(b.content)) for b in briefings) > budget * 3
        stored = []
        for saved in graph.checkpointer.list(cfg):
            value = saved.checkpoint["channel_values"].get("llm_input_messages")
            if value:
                assert value[0].content == UNSTORED_MARKER  # what a checkpoint holds instead
                stored.append(len(serde.dumps_typed(value[0])[1]))
        assert stored
        sizes[budget] = max(stored)
    # 20 times the budget, the same bytes per checkpoint: briefings do not grow checkpoints.
    assert sizes[300] == sizes[6000] < 300


@pytest.mark.parametrize("checkpointer", ["memory", "recall"])
@pytest.mark.parametrize("use_async", MODES)
def test_briefing_node_puts_one_briefing_in_state_per_thread(
    store: RecallStore, use_async: bool, checkpointer: str
) -> None:
    store.update_working_state("a", goal="write the report")

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])}")]}

    g = StateGraph(MessagesState)
    g.add_node("brief", briefing_node)
    g.add_node("model", reply)
    g.add_node("record", record_node)
    g.add_edge(START, "brief")
    g.add_edge("brief", "model")
    g.add_edge("model", "record")
    g.add_edge("record", END)
    # With store.checkpointer() the recording recorded the briefing as a "system" turn.
    saver = InMemorySaver() if checkpointer == "memory" else store.checkpointer(lease_ttl=10)
    app = g.compile(checkpointer=saver, store=store)
    cfg = config("t1", "a")
    for text in ("first", "second"):
        inputs = {"messages": [SystemMessage("You write reports."), HumanMessage(text)]}
        if use_async:
            out = asyncio.run(
                app.ainvoke(inputs if text == "first" else {"messages": [HumanMessage(text)]}, cfg)
            )
        else:
            out = app.invoke(inputs if text == "first" else {"messages": [HumanMessage(text)]}, cfg)
    kinds = [(type(m).__name__, m.id == BRIEFING_ID) for m in out["messages"]]
    assert kinds[:3] == [("SystemMessage", False), ("SystemMessage", True), ("HumanMessage", False)]
    assert sum(is_b for _, is_b in kinds) == 1
    assert "goal: write the report" in str(out["messages"][1].content)
    # Recorded: every turn but the briefing itself.
    recorded = [t.msg_id for t in store.turns("a")]
    assert BRIEFING_ID not in recorded
    assert recorded == [m.id for m in out["messages"] if m.id != BRIEFING_ID]


async def test_with_briefing_outside_a_graph_takes_store_and_config(store: RecallStore) -> None:
    store.record("a", [HumanMessage("old question", id="h0")])
    messages = [SystemMessage("prompt"), HumanMessage("new question", id="h1")]
    with pytest.raises(RecallError) as err:
        with_briefing(messages)
    assert err.value.code == "invalid_value" and "store=RecallStore.open" in str(err.value)
    with pytest.raises(RecallError) as err:
        with_briefing(messages, store=store)
    assert err.value.code == "invalid_value" and '"agent_id"' in str(err.value)
    cfg = {"configurable": {"thread_id": "t", "agent_id": "a"}}
    out = with_briefing(messages, config=cfg, store=store, token_budget=300)
    assert [type(m).__name__ for m in out] == ["SystemMessage", "SystemMessage", "HumanMessage"]
    assert out[1].id == BRIEFING_ID and "user: old question" in str(out[1].content)
    assert await awith_briefing(messages, config=cfg, store=store, token_budget=300) == out
    # A briefing already in the messages is replaced, never doubled.
    again = with_briefing(out, config=cfg, store=store, token_budget=300)
    assert [m.id for m in again].count(BRIEFING_ID) == 1


@pytest.mark.parametrize("checkpointer", ["memory", "recall"])
def test_hooks_record_only_when_the_checkpointer_does_not(
    store: RecallStore, tmp_path: Any, checkpointer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = _hooks._record_new  # what every hook records through

    def counting(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_hooks, "_record_new", counting)
    saver = InMemorySaver() if checkpointer == "memory" else store.checkpointer(lease_ttl=10)
    model = TaskModel()
    graph = build(
        "react", model, task_tools(str(tmp_path) + "/e.txt"), store=store, checkpointer=saver
    )
    out = graph.invoke({"messages": [HumanMessage("TASK-0: go.")]}, config("t", "a"))
    assert (len(calls) > 0) == (checkpointer == "memory")
    # Either way every message is recorded exactly once.
    assert [t.msg_id for t in store.turns("a")] == [m.id for m in out["messages"]]


def test_hook_options_make_a_new_hook(store: RecallStore) -> None:
    hook = _hooks.pre_model_hook.with_options(token_budget=321, memory_limit=0)
    assert hook.opts.token_budget == 321 and hook.opts.briefing == {"memory_limit": 0}
    assert _hooks.pre_model_hook.opts.token_budget == 2000


def test_each_hook_has_its_own_docstring() -> None:
    hooks = {
        "pre_model_hook": _hooks.pre_model_hook,
        "post_model_hook": _hooks.post_model_hook,
        "record_node": _hooks.record_node,
        "briefing_node": _hooks.briefing_node,
    }
    docs = {name: hook.__doc__ or "" for name, hook in hooks.items()}
    # help() and an IDE showed "A hook or node, with sync and async bodies ..." for all four.
    assert len(set(docs.values())) == 4
    says = {
        "pre_model_hook": "llm_input_messages",
        "post_model_hook": "post_model_hook=",
        "record_node": "records the messages not yet recorded",
        "briefing_node": "once per thread",
    }
    for name, doc in docs.items():
        assert says[name] in doc, name
    made = _hooks.pre_model_hook.with_options(token_budget=500)
    assert made.__doc__ == docs["pre_model_hook"]
    assert (
        type(made).__doc__
        == "A hook or node, with sync and async bodies sharing one implementation."
    )


def test_a_message_put_in_the_middle_of_recorded_history_is_recorded(store: RecallStore) -> None:
    # Same length and same last message as the history recorded before: only the ids of the
    # whole list tell that the middle changed.
    first = [HumanMessage("q", id="h1"), AIMessage("draft", id="a1"), AIMessage("end", id="a2")]
    assert _hooks.record_messages(store, "agent-edit", first, thread_id="t") == 3
    edited = [first[0], AIMessage("a summary of the draft", id="a1-summary"), first[2]]
    assert _hooks.record_messages(store, "agent-edit", edited, thread_id="t") == 1
    assert [t.msg_id for t in store.turns("agent-edit")] == ["h1", "a1", "a2", "a1-summary"]


def _sends(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each ``store.record`` call is given, as they happen."""
    sent: list[int] = []
    real = store.record

    def record(agent_id: str, messages: list, **kwargs: Any) -> int:
        sent.append(len(messages))
        return real(agent_id, messages, **kwargs)

    monkeypatch.setattr(store, "record", record)
    return sent


def test_id_less_messages_are_recorded_once_however_often_the_hook_sees_them(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A channel without add_messages keeps messages without ids: they are known by their
    # stable keys (content, thread, place), named at every call.
    from langgraph_recall.store._transcript import with_stable_ids

    sent = _sends(store, monkeypatch)
    convo: list = [HumanMessage("q"), AIMessage("a")]
    assert _hooks.record_messages(store, "agent-idless", convo, thread_id="t") == 2
    convo = [*convo, HumanMessage("q2")]
    assert _hooks.record_messages(store, "agent-idless", convo, thread_id="t") == 1
    assert _hooks.record_messages(store, "agent-idless", convo, thread_id="t") == 0
    named = [m.id for m in with_stable_ids(convo, "t")]
    assert [t.msg_id for t in store.turns("agent-idless")] == named
    # Known by their names: only the new one was sent, and nothing the third time.
    assert sent == [2, 1]
    # Edited in place (same position, other content): another name, so recorded as new.
    convo = [convo[0], AIMessage("a, corrected"), convo[2]]
    assert _hooks.record_messages(store, "agent-idless", convo, thread_id="t") == 1


def test_the_ids_the_hooks_keep_are_bounded_and_forgetting_loses_nothing(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_hooks, "MAX_IDS", 10)
    sent = _sends(store, monkeypatch)
    a = [HumanMessage(f"a{i}", id=f"a{i}") for i in range(8)]
    b = [HumanMessage(f"b{i}", id=f"b{i}") for i in range(6)]
    assert _hooks.record_messages(store, "ag", a[:6], thread_id="ta") == 6
    assert _hooks.record_messages(store, "ag", a[:7], thread_id="ta") == 1  # 7 ids kept, not 13
    assert _hooks.record_messages(store, "ag", b, thread_id="tb") == 6  # 13 > 10: ta forgotten
    assert _hooks.record_messages(store, "ag", a, thread_id="ta") == 1  # sent whole, one new
    assert sent == [6, 1, 6, 8]
    assert [t.msg_id for t in store.turns("ag")] == [
        *(f"a{i}" for i in range(7)),
        *(f"b{i}" for i in range(6)),
        "a7",
    ]


def test_an_id_assigned_after_the_message_was_made_is_taken_as_its_text(
    store: RecallStore,
) -> None:
    # LangChain turns a number given to the constructor into text, but an id assigned later is
    # not validated (``message.id = 7``, a UUID). The recording keeps it as its text; the
    # briefing must not fail on it, nor show its turn as missing from the input.
    reply = AIMessage("the plan is pineapple", id="r1")
    reply.id = 7  # type: ignore[assignment]
    messages = [SystemMessage("prompt"), HumanMessage("what is the plan", id="h1"), reply]
    assert _hooks.record_messages(store, "agent-int", messages, thread_id="t") == 3
    assert [t.msg_id for t in store.turns("agent-int")][-1] == "7"
    cfg = {"configurable": {"thread_id": "t", "agent_id": "agent-int"}}
    out = with_briefing(messages, config=cfg, store=store, token_budget=300)
    assert [m.id for m in out] == [None, BRIEFING_ID, "h1", 7]
    assert "pineapple" not in str(out[1].content)
    pre = _hooks._pre_model({"messages": messages}, cfg, _hooks._Options(store=store))
    assert [m.id for m in pre["llm_input_messages"]] == [None, BRIEFING_ID, "h1", 7]
    assert "pineapple" not in str(pre["llm_input_messages"][1].content)
