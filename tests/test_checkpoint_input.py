"""A run's request is recorded when the run starts, before its first node.

LangGraph puts the input checkpoint on a background thread and starts the first step without
waiting for it (``checkpoint/_inputs``). A process killed before that put lands left the
request nowhere, and the next input on the thread took its place. Killed there, or inside the
first node, a real process must leave the request among the agent's turns, shown by the next
briefing on a new thread, and kept after a "continue" on the same thread.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
from fix_checkpoint import (
    State,
    Worker,
    chain,
    config,
    history,
    recorded_ids,
    step_graph,
    turn_input,
    wait_until,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_recall import with_briefing
from langgraph_recall.store import RecallStore

REQUEST = "refund order O-4471"


def briefed_graph(briefings: list[str]) -> Any:
    """The workers' one-step graph (same state), its step a model call given a briefing."""

    def step(state: State, config: RunnableConfig) -> dict[str, Any]:
        model_input = with_briefing(state.get("messages", []), config=config)
        briefings.append(str(model_input[0].content))
        thread = config["configurable"]["thread_id"]
        mid = f"m-{thread}-{len(state.get('messages', []))}"
        return {"messages": [AIMessage("on it", id=mid)], "n": state.get("n", 0) + 1}

    return chain(State, ("step", step))


FAULTS = {
    # The input checkpoint's put is the run's first: killed on its way to the database, or
    # right after it landed (nothing recorded from it yet).
    "input checkpoint not yet written": "before_put=1:kill",
    "input checkpoint just written": "after_put=1:kill",
    "inside the first node": "",
}


def kill_during_first_step(a: Worker, where: str, durability: str) -> None:
    if FAULTS[where]:
        a.invoke("t1", "agent-1", REQUEST, durability=durability)
    else:
        # The first node runs (the input checkpoint reported); killed before it finishes.
        a.invoke("t1", "agent-1", REQUEST, plan={"stop_at": 1}, durability=durability)
        wait_until(a.stopped, what="the worker frozen in its first node")
        a.signal(signal.SIGKILL)
    assert a.exit_code() == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["async", "sync"])
@pytest.mark.parametrize("where", list(FAULTS))
def test_a_request_killed_before_its_first_node_finished_is_kept_and_briefed(
    attach: Callable[..., list[Worker]],
    store: RecallStore,
    inner: Any,
    where: str,
    durability: str,
) -> None:
    (a,) = attach("A", ttl=1, faults=FAULTS[where])
    kill_during_first_step(a, where, durability)
    request_id = f"h-{REQUEST}"
    never_landed = where == "input checkpoint not yet written"
    if never_landed:
        assert history(inner, "t1") == [], "the input checkpoint never landed"
    assert recorded_ids(store, "agent-1") == [request_id]

    # A "continue" on the same thread, where the request is pending or was never saved.
    briefings: list[str] = []
    cp = store.checkpointer(lease_ttl=30, wait=60)
    graph = briefed_graph(briefings).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("continue", 1, msg_id="h-continue"), config("t1", "agent-1"))
    ids = recorded_ids(store, "agent-1")
    assert ids[0] == request_id and "h-continue" in ids, "the continue erased nothing"
    if never_landed:
        assert REQUEST in briefings[-1], "not in the thread's messages: the briefing has it"

    # A new thread of the same agent is briefed with the request.
    graph.invoke(turn_input("what was I doing?", 1, msg_id="h-what"), config("t2", "agent-1"))
    assert REQUEST in briefings[-1]
    assert len(ids) == len(set(ids))
    cp.close()


def test_message_likes_are_recorded_at_the_start_under_the_ids_the_checkpoints_hold(
    store: RecallStore, inner: Any
) -> None:
    seen: list[list[str]] = []

    def answer(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        seen.append(recorded_ids(store, "agent-1"))  # what a briefing built here would read
        return {"messages": [AIMessage("done")]}

    g = StateGraph(MessagesState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    cp = store.checkpointer(lease_ttl=30)
    graph = g.compile(checkpointer=cp, store=store)
    given: dict[str, Any] = {
        "messages": [("user", REQUEST), {"role": "user", "content": "by Friday"}, "thanks"]
    }
    out = graph.invoke(given, config("t1", "agent-1"))
    held = [str(m.id) for m in out["messages"]]
    assert seen == [held[:3]], "the three requests, recorded before the first node"
    assert recorded_ids(store, "agent-1") == held == _head(inner, "t1")
    assert given["messages"][0] == ("user", REQUEST), "the caller's input is left as given"
    cp.close()


def _head(saver: Any, thread: str) -> list[str]:
    messages: list[BaseMessage] = history(saver, thread)[-1].checkpoint["channel_values"][
        "messages"
    ]
    return [str(m.id) for m in messages]


def test_a_request_waits_for_the_turns_a_failed_catch_up_still_owes(
    store: RecallStore, inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash left turns unrecorded, and the next run's catch-up of them fails: recorded at
    # the start, the request would come before them. It is recorded with them at the run's
    # end instead, in the thread's order.
    from langgraph_recall.checkpoint import _recording

    _recording.switch_thread(store, "agent-1", "t1")
    step_graph().compile(checkpointer=inner).invoke(
        turn_input("before", 2), config("t1", "agent-1")
    )
    real = _recording.catch_up
    failures = iter([RuntimeError("the disk is full")])

    def fails_once(*args: Any) -> int:
        for exc in failures:
            raise exc
        return real(*args)

    monkeypatch.setattr(_recording, "catch_up", fails_once)
    cp = store.checkpointer(lease_ttl=30)
    with pytest.warns(RuntimeWarning, match="could not record turns"):
        step_graph().compile(checkpointer=cp, store=store).invoke(
            turn_input("after", 1), config("t1", "agent-1")
        )
    assert recorded_ids(store, "agent-1") == _head(inner, "t1")
    cp.close()


def test_a_graph_without_a_messages_channel_records_no_request(store: RecallStore) -> None:
    # A functional entrypoint has no messages channel, so no turn is ever recorded from its
    # checkpoints: its input is not a request to record either.
    from langgraph.func import entrypoint

    cp = store.checkpointer(lease_ttl=30)

    @entrypoint(checkpointer=cp, store=store)
    def task(given: dict[str, Any]) -> dict[str, Any]:
        return {"done": True}

    task.invoke({"messages": [HumanMessage(REQUEST, id="h-1")]}, config("t1", "agent-1"))
    assert recorded_ids(store, "agent-1") == []
    cp.close()
