"""Each message of the messages channel is recorded into the agent's turns once, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fix_checkpoint import (
    Worker,
    chain,
    config,
    history,
    recorded_ids,
    step_graph,
    turn_input,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage

from langgraph_recall.store import RecallStore


@pytest.fixture
def handed(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The message ids of every ``store.record`` call (an observation, not a stand-in)."""
    calls: list[list[str]] = []
    real = store.record

    def record(agent_id: str, messages: Sequence[BaseMessage], **kw: Any) -> int:
        calls.append([str(m.id) for m in messages])
        return real(agent_id, messages, **kw)

    monkeypatch.setattr(store, "record", record)
    return calls


def head_ids(saver: Any, thread: str) -> list[str]:
    return [m.id for m in history(saver, thread)[-1].checkpoint["channel_values"]["messages"]]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_every_message_is_recorded_once_in_order(
    store: RecallStore, inner: Any, durability: str, mode: str
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    for turn in ("first", "second", "third"):
        if mode == "invoke":
            graph.invoke(turn_input(turn, 2), cfg, durability=durability)
        else:
            asyncio.run(graph.ainvoke(turn_input(turn, 2), cfg, durability=durability))
        # Recorded by the time the call returns, not eventually.
        assert recorded_ids(store, "agent-1") == head_ids(inner, "t1")
    assert len(recorded_ids(store, "agent-1")) == 9
    cp.close()


def test_restored_history_is_never_handed_to_the_store_again(
    store: RecallStore, handed: list[list[str]]
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    for i in range(4):
        graph.invoke(turn_input(f"turn{i}", 3), cfg)
    before = len(recorded_ids(store, "agent-1"))
    handed.clear()
    graph.invoke(turn_input("last", 3), cfg)
    # 1 human + 3 AI messages are new; the 16 restored ones are not sent again.
    assert before == 16
    assert sorted(i for call in handed for i in call) == sorted(
        ["h-last", "m-t1-17", "m-t1-18", "m-t1-19"]
    )
    cp.close()


def test_update_state_messages_are_recorded_once(store: RecallStore, inner: Any) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    graph.invoke(turn_input("hello", 1), cfg)
    graph.update_state(cfg, {"messages": [HumanMessage("an edit", id="edit-1")]})
    graph.update_state(cfg, {"target": 3})
    assert recorded_ids(store, "agent-1") == head_ids(inner, "t1")
    assert recorded_ids(store, "agent-1")[-1] == "edit-1"
    cp.close()


def test_removed_and_replaced_messages_do_not_record_again(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    graph.invoke(turn_input("hello", 2), cfg)
    graph.update_state(cfg, {"messages": [RemoveMessage(id="m-t1-1")]})
    graph.update_state(cfg, {"messages": [AIMessage("edited", id="m-t1-2")]})  # same id
    graph.invoke(turn_input("again", 2), cfg)
    # Records are append-only: the removed message stays, the edit is not a new turn.
    assert recorded_ids(store, "agent-1") == [
        "h-hello",
        "m-t1-1",
        "m-t1-2",
        "h-again",
        "m-t1-3",
        "m-t1-4",
    ]
    cp.close()


@pytest.mark.slow
@pytest.mark.parametrize("resume_on", ["same thread", "new thread"])
def test_crash_between_steps_then_resume_records_each_message_once(
    attach: Callable[..., list[Worker]], store: RecallStore, inner: Any, resume_on: str
) -> None:
    # A dies right after writing step 2's checkpoint, before recording its messages.
    (a,) = attach("A", ttl=1, faults="after_put=4:exit")
    (b,) = attach("B", ttl=30)
    a.invoke("t1", "agent-1", "go", target=4)
    assert a.exit_code() == 99
    if resume_on == "same thread":
        b.invoke("t1", "agent-1", None, wait=60)
        assert b.result()["n"] == 4
        assert recorded_ids(store, "agent-1") == head_ids(inner, "t1")
    else:
        b.invoke("t2", "agent-1", "elsewhere", target=2, wait=60)
        assert b.result()["n"] == 2
        # What t1 checkpointed before the crash is recorded (once, first), then t2's turn.
        assert recorded_ids(store, "agent-1") == head_ids(inner, "t1") + head_ids(inner, "t2")
    ids = recorded_ids(store, "agent-1")
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("next_run_on", ["same thread", "new thread"])
def test_unrecorded_turns_are_recorded_before_the_next_runs_first_node(
    store: RecallStore, inner: Any, next_run_on: str
) -> None:
    # Checkpoints written but never recorded, as a crash between the two leaves them: here by
    # running the agent once through the bare saver, after the store noted its thread.
    from langgraph_recall.checkpoint._recording import switch_thread

    switch_thread(store, "agent-1", "t1")
    step_graph().compile(checkpointer=inner).invoke(
        turn_input("before", 2), config("t1", "agent-1")
    )
    assert recorded_ids(store, "agent-1") == []
    unrecorded = head_ids(inner, "t1")
    seen_first: list[list[str]] = []

    def first_node_reads_records(k: int, cfg: Any) -> None:
        if not seen_first:
            seen_first.append(recorded_ids(store, "agent-1"))  # what a briefing would read

    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(on_step=first_node_reads_records).compile(checkpointer=cp, store=store)
    thread = "t1" if next_run_on == "same thread" else "t2"
    graph.invoke(turn_input("after", 1), config(thread, "agent-1"))
    assert seen_first == [unrecorded]
    cp.close()


def _remove_then_add_graph() -> Any:
    """START -> draft (adds "draft") -> final (removes "draft", adds "final") -> END."""
    from langgraph.graph import MessagesState

    def draft(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("a draft", id="draft")]}

    def final(state: MessagesState) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id="draft"), AIMessage("the answer", id="final")]}

    return chain(MessagesState, ("draft", draft), ("final", final))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_message_checkpointed_then_removed_in_the_same_run_is_recorded(
    store: RecallStore, durability: str
) -> None:
    # The run hands its messages to the recorder in batches; a checkpoint whose list was
    # rewritten must not hide what the previous checkpoint held.
    cp = store.checkpointer(lease_ttl=30)
    graph = _remove_then_add_graph().compile(checkpointer=cp, store=store)
    out = graph.invoke(
        {"messages": [HumanMessage("go", id="h-go")]},
        config("t1", "agent-1"),
        durability=durability,
    )
    assert [m.id for m in out["messages"]] == ["h-go", "final"]
    assert recorded_ids(store, "agent-1") == ["h-go", "draft", "final"]
    cp.close()


@pytest.mark.parametrize(("every", "expect_mid_run"), [(0.0, True), (60.0, False)])
def test_turns_are_handed_over_mid_run_only_after_record_every(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, every: float, expect_mid_run: bool
) -> None:
    # Steps slower than RECORD_EVERY are recorded as the run goes (others can watch it); a
    # fast loop's checkpoints wait for the run's end and are written together.
    from langgraph_recall._context import checkpointer_of
    from langgraph_recall.checkpoint import _recording

    monkeypatch.setattr(_recording, "RECORD_EVERY", every)
    seen: dict[int, list[str]] = {}

    def look(k: int, cfg: Any) -> None:
        checkpointer_of(cfg)._shared.recorder.flush(timeout=30)
        seen[k] = recorded_ids(store, "agent-1")

    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(on_step=look).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("go", 3), config("t1", "agent-1"), durability="sync")
    if expect_mid_run:
        assert seen[3] == ["h-go", "m-t1-1", "m-t1-2"]
    else:
        assert seen[3] == []
    assert recorded_ids(store, "agent-1") == ["h-go", "m-t1-1", "m-t1-2", "m-t1-3"]
    cp.close()


def test_a_run_fenced_out_records_nothing_and_the_next_holder_records_its_checkpoints(
    store: RecallStore, inner: Any
) -> None:
    # Mid-run another holder takes the lease over (as after a long freeze): the run's next
    # checkpoint is refused by the database. Its unrecorded messages must not be written by it
    # at its end, after the new holder may already have recorded turns of its own; the new
    # holder records them from the checkpoints, once and in order.
    from langgraph_recall import LeaseLost

    def take_over(k: int, cfg: Any) -> None:
        if k == 2:
            with store._db.tx(write=True) as tx:
                tx.run("UPDATE recall_leases SET expires_at = 0 WHERE agent_id = 'agent-1'")
            store.acquire_lease("agent-1", "another-process", 30.0)

    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(on_step=take_over).compile(checkpointer=cp, store=store)
    with pytest.raises(LeaseLost):
        graph.invoke(turn_input("go", 3), config("t1", "agent-1"), durability="sync")
    assert recorded_ids(store, "agent-1") == []
    assert head_ids(inner, "t1") == ["h-go", "m-t1-1"]  # step 2's checkpoint was refused

    lease = store.lease("agent-1")
    assert lease is not None
    store.release_lease("agent-1", "another-process", lease.epoch)
    cp2 = store.checkpointer(lease_ttl=30)
    out = step_graph().compile(checkpointer=cp2, store=store).invoke(None, config("t1", "agent-1"))
    assert out["n"] == 3
    assert recorded_ids(store, "agent-1") == head_ids(inner, "t1")
    assert recorded_ids(store, "agent-1")[:2] == ["h-go", "m-t1-1"]
    cp.close()
    cp2.close()
