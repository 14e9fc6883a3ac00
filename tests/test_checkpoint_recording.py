"""Each message of the messages channel is recorded into the agent's turns once, in order."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, TypedDict

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
from fix_store import count_transactions
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
)

from langgraph_recall import RecallError
from langgraph_recall.checkpoint import _recording
from langgraph_recall.store import RecallStore


@pytest.fixture(autouse=True)
def _no_hand_over_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run hands its messages over mid-run at its first checkpoint 0.5 s after the last
    hand-over (``RECORD_EVERY``). These tests count where messages are recorded; a process
    stalled for half a second on a busy CI machine would move them. The tests of that timing
    set it themselves."""
    monkeypatch.setattr(_recording, "RECORD_EVERY", float("inf"))


@pytest.fixture
def handed(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The message ids the store is asked to record (an observation, not a stand-in): by
    ``store.record`` and by a run's final write, which both go through ``_record``."""
    calls: list[list[str]] = []
    real = store._record

    def record(agent_id: str, messages: Sequence[BaseMessage], *args: Any) -> int:
        calls.append([str(m.id) for m in messages])
        return real(agent_id, list(messages), *args)

    monkeypatch.setattr(store, "_record", record)
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
    # What the crash left first, then the run's own request, recorded at its start.
    assert seen_first == [[*unrecorded, "h-after"]]
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


def _summarize_oldest_graph() -> Any:
    """START -> draft (adds "draft") -> summarize (the oldest message replaced by a summary, the
    rest kept) -> final (adds "final") -> END."""
    from langgraph.graph import MessagesState
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    def draft(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("a draft", id="draft")]}

    def summarize(state: MessagesState) -> dict[str, Any]:
        summary = AIMessage("summary of the request", id="summary")
        kept = state["messages"][1:]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, *kept]}

    def final(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("the answer", id="final")]}

    return chain(MessagesState, ("draft", draft), ("summarize", summarize), ("final", final))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_summary_replacing_the_oldest_message_is_recorded_with_what_it_replaced(
    store: RecallStore, durability: str
) -> None:
    # The rewritten list ends as the old one did ("draft" last): only a comparison of every
    # position tells it from an appended-to list.
    cp = store.checkpointer(lease_ttl=30)
    graph = _summarize_oldest_graph().compile(checkpointer=cp, store=store)
    out = graph.invoke(
        {"messages": [HumanMessage("go", id="h-go")]},
        config("t1", "agent-1"),
        durability=durability,
    )
    assert [m.id for m in out["messages"]] == ["summary", "draft", "final"]
    assert recorded_ids(store, "agent-1") == ["h-go", "draft", "summary", "final"]
    cp.close()


def test_a_summary_a_crash_left_unrecorded_is_recorded_by_the_next_run(
    store: RecallStore, inner: Any
) -> None:
    # The summarizing run's checkpoint was written, then the process died before recording
    # it (here: that run went through the bare saver). Its list still ends with the newest
    # recorded turn ("draft"): catching up only what follows that turn missed the summary.
    from langgraph.graph import MessagesState
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    cp = store.checkpointer(lease_ttl=30)
    first = chain(
        MessagesState, ("draft", lambda s: {"messages": [AIMessage("a draft", id="draft")]})
    )
    first.compile(checkpointer=cp, store=store).invoke(
        {"messages": [HumanMessage("go", id="h-go")]}, config("t1", "agent-1")
    )
    assert recorded_ids(store, "agent-1") == ["h-go", "draft"]
    summary = AIMessage("summary of the request", id="summary")
    rewritten = [RemoveMessage(id=REMOVE_ALL_MESSAGES), summary, AIMessage("a draft", id="draft")]
    first.compile(checkpointer=inner).update_state(
        config("t1", "agent-1"), {"messages": rewritten}, as_node="draft"
    )
    assert head_ids(inner, "t1") == ["summary", "draft"]
    last = chain(MessagesState, ("final", lambda s: {"messages": [AIMessage("done", id="final")]}))
    last.compile(checkpointer=cp, store=store).invoke(
        {"messages": [HumanMessage("more", id="h-more")]}, config("t1", "agent-1")
    )
    assert recorded_ids(store, "agent-1") == ["h-go", "draft", "summary", "h-more", "final"]
    cp.close()


class Plain(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]


def test_id_less_messages_are_recorded_once_each_by_their_place_in_the_thread(
    store: RecallStore,
) -> None:
    # A plain list channel (no add_messages) keeps messages without ids. The same reply in
    # two runs is two turns, and neither run records the other's again.
    def reply(state: Plain) -> dict[str, Any]:
        return {"messages": [AIMessage("ok")]}

    cp = store.checkpointer(lease_ttl=30)
    graph = chain(Plain, ("reply", reply)).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    for text in ("first", "second", "third"):
        graph.invoke({"messages": [HumanMessage(text, id=f"h-{text}")]}, cfg)
    turns = store.turns("agent-1")
    assert [t.message.content for t in turns] == ["first", "ok", "second", "ok", "third", "ok"]
    assert len({t.msg_id for t in turns}) == 6
    cp.close()


@pytest.mark.parametrize(("every", "expect_mid_run"), [(0.0, True), (60.0, False)])
def test_turns_are_handed_over_mid_run_only_after_record_every(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, every: float, expect_mid_run: bool
) -> None:
    # Steps slower than RECORD_EVERY are recorded as the run goes (others can watch it); a
    # fast loop's checkpoints wait for the run's end and are written together.
    from langgraph_recall._context import checkpointer_of

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
        assert seen[3] == ["h-go"]  # the request alone: recorded at the run's start
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
    # Only the request, recorded at the run's start while the lease was the run's.
    assert recorded_ids(store, "agent-1") == ["h-go"]
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


# --- a run's end: its last turns ride on the lease's release ------------------------------


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_runs_end_records_its_turns_and_gives_its_lease_up_in_one_transaction(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    opened = count_transactions(store, monkeypatch)
    at_last_step: list[int] = []

    def last(k: int, cfg: Any) -> None:
        if k == 2:
            at_last_step.append(len(opened))

    # A long ttl: no renewal (a transaction of its own) lands in the window counted.
    cp = store.checkpointer(lease_ttl=600)
    graph = step_graph(on_step=last).compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("go", 2), config("t1", "agent-1"), durability=durability)
    assert len(opened) - at_last_step[0] == 1, "the end: one transaction, turns and lease"
    assert recorded_ids(store, "agent-1") == ["h-go", "m-t1-1", "m-t1-2"]
    lease = store.lease("agent-1")
    assert lease is not None and lease.expires_at == 0
    cp.close()


@pytest.fixture
def catch_up_reads(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Agents whose newest turn a run start read to catch up (``_recording.catch_up``)."""
    reads: list[str] = []
    real = store.turns

    def turns(agent_id: str, last: int | None = None) -> Any:
        reads.append(agent_id)
        return real(agent_id, last)

    monkeypatch.setattr(store, "turns", turns)
    return reads


@pytest.fixture
def after_a_run(store: RecallStore) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A graph on ``store.checkpointer()`` whose agent has run once (turn "first", 2 steps) on
    thread t1, and that run's config."""
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")
    graph.invoke(turn_input("first", 2), cfg)
    yield graph, cfg
    cp.close()


def test_the_next_run_in_this_process_reads_no_turns_to_catch_up(
    store: RecallStore, after_a_run: tuple[Any, dict[str, Any]], catch_up_reads: list[str]
) -> None:
    graph, cfg = after_a_run
    catch_up_reads.clear()
    graph.invoke(turn_input("second", 1), cfg)
    graph.invoke(turn_input("third", 1), cfg, durability="async")
    assert catch_up_reads == []
    assert recorded_ids(store, "agent-1") == [
        "h-first", "m-t1-1", "m-t1-2", "h-second", "m-t1-4", "h-third", "m-t1-6"
    ]  # fmt: skip


def test_a_run_after_another_holder_had_the_lease_catches_up(
    store: RecallStore, after_a_run: tuple[Any, dict[str, Any]], catch_up_reads: list[str]
) -> None:
    # Another process held the agent in between (on any thread): the epoch moved, so what
    # this process remembers of its own last run proves nothing any more.
    graph, cfg = after_a_run
    theirs = store.acquire_lease("agent-1", "another-process", 30.0)
    store.release_lease("agent-1", "another-process", theirs.epoch)
    catch_up_reads.clear()
    graph.invoke(turn_input("second", 1), cfg)
    assert catch_up_reads == ["agent-1"]


def test_a_run_from_another_checkpoint_of_the_thread_catches_up(
    inner: Any, after_a_run: tuple[Any, dict[str, Any]], catch_up_reads: list[str]
) -> None:
    # Only the very checkpoint the last run ended at is known to be recorded whole.
    graph, cfg = after_a_run
    earlier = [h for h in history(inner, "t1") if h.metadata["step"] == 1][0].config
    catch_up_reads.clear()
    graph.invoke(None, {"configurable": {**earlier["configurable"], "agent_id": "agent-1"}})
    assert catch_up_reads == ["agent-1"]


def test_a_final_write_that_fails_raises_gives_the_lease_up_and_the_next_run_records_all(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = store.checkpointer(lease_ttl=30)
    seen_first: list[list[str]] = []

    def first_node_reads_records(k: int, cfg: Any) -> None:
        if not seen_first:
            seen_first.append(recorded_ids(store, "agent-1"))

    graph = step_graph(on_step=first_node_reads_records).compile(checkpointer=cp, store=store)
    cfg = config("t1", "agent-1")

    def broken(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("the disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(store, "_end_run", broken)
        with pytest.raises(RecallError, match="safe in the checkpoint") as failed:
            graph.invoke(turn_input("first", 1), cfg)
    assert failed.value.code == "database"
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert recorded_ids(store, "agent-1") == ["h-first"]  # the request, from the run's start
    lease = store.lease("agent-1")
    assert lease is not None and lease.expires_at == 0, "released all the same"
    seen_first.clear()
    graph.invoke(turn_input("second", 1), cfg)
    assert seen_first == [["h-first", "m-t1-1", "h-second"]]
    assert recorded_ids(store, "agent-1") == ["h-first", "m-t1-1", "h-second", "m-t1-3"]
    cp.close()


def test_a_hand_over_that_failed_mid_run_is_recorded_in_order_by_the_runs_end(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Handed over at every checkpoint (RECORD_EVERY 0) and written before the next step
    # (flushed); the first hand-over fails once. The later ones must not be written after the
    # gap it leaves: the run's end fills it, in order.
    from langgraph_recall._context import checkpointer_of

    def written_before_the_step(k: int, cfg: Any) -> None:
        checkpointer_of(cfg)._shared.recorder.flush(timeout=30)

    monkeypatch.setattr(_recording, "RECORD_EVERY", 0.0)
    real = store.record
    failures: list[int] = []

    def flaky(agent_id: str, messages: Sequence[BaseMessage], **kw: Any) -> int:
        if not failures:
            failures.append(1)
            raise RuntimeError("the database went away for a moment")
        return real(agent_id, messages, **kw)

    monkeypatch.setattr(store, "record", flaky)
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(on_step=written_before_the_step).compile(checkpointer=cp, store=store)
    with pytest.warns(RuntimeWarning, match="could not record turns"):
        graph.invoke(turn_input("go", 3), config("t1", "agent-1"), durability="sync")
    assert failures == [1]
    assert recorded_ids(store, "agent-1") == ["h-go", "m-t1-1", "m-t1-2", "m-t1-3"]
    cp.close()


def test_a_run_whose_checkpointer_closed_under_it_stops_and_records_what_it_checkpointed(
    store: RecallStore,
) -> None:
    # close() gives every lease up while a run is still going: the run's next write is refused
    # (unstamped, it would pass the fence while another process may hold the lease), and its
    # end, finding no lease left to give up, records what it checkpointed, alone.
    from langgraph_recall import LeaseLost
    from langgraph_recall._context import checkpointer_of

    def close_at_step_2(k: int, cfg: Any) -> None:
        if k == 2:
            checkpointer_of(cfg)._shared.keeper.close()

    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(on_step=close_at_step_2).compile(checkpointer=cp, store=store)
    with pytest.raises(LeaseLost, match="closed"):
        graph.invoke(turn_input("go", 3), config("t1", "agent-1"), durability="sync")
    assert recorded_ids(store, "agent-1") == ["h-go", "m-t1-1"]
    cp.close()
    cp2 = store.checkpointer(lease_ttl=30)
    out = step_graph().compile(checkpointer=cp2, store=store).invoke(None, config("t1", "agent-1"))
    assert out["n"] == 3
    assert recorded_ids(store, "agent-1") == ["h-go", "m-t1-1", "m-t1-2", "m-t1-3"]
    cp2.close()


def test_a_process_remembers_a_bounded_number_of_agents(
    store: RecallStore, catch_up_reads: list[str]
) -> None:
    # A server's agents are its conversations: what it remembers of each is bounded, and an
    # agent forgotten only pays the read it would have skipped.
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cp._shared.runs.complete.limit = 2
    cp._shared.runs.last_thread.limit = 2
    for agent in ("a1", "a2", "a3"):
        graph.invoke(turn_input(f"to {agent}", 1), config(f"t-{agent}", agent))
    assert set(cp._shared.runs.complete) == {"a2", "a3"}
    assert set(cp._shared.runs.last_thread) == {"a2", "a3"}
    catch_up_reads.clear()
    graph.invoke(turn_input("again", 1), config("t-a3", "a3"))
    assert catch_up_reads == []
    graph.invoke(turn_input("again", 1), config("t-a1", "a1"))
    assert catch_up_reads == ["a1"]
    assert recorded_ids(store, "a1") == ["h-to a1", "m-t-a1-1", "h-again", "m-t-a1-3"]
    cp.close()


def test_a_lease_lost_as_the_run_ends_leaves_its_turns_to_the_new_holder(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The renewer finds another holder just as the run ends (after the end checked its lease,
    # before it gave it up): the run records nothing; the new holder's catch-up does, before
    # its own turns.
    from langgraph_recall import LeaseLost
    from langgraph_recall.checkpoint import _runs

    cp = store.checkpointer(lease_ttl=30)
    real = _runs.close_not_started

    def lost_meanwhile(st: Any, attempts: Any) -> None:
        cp._shared.keeper.mark_lost("agent-1", "another process took it over")
        real(st, attempts)

    monkeypatch.setattr(_runs, "close_not_started", lost_meanwhile)
    graph = step_graph().compile(checkpointer=cp, store=store)
    with pytest.raises(LeaseLost):
        graph.invoke(turn_input("go", 2), config("t1", "agent-1"), durability="sync")
    assert recorded_ids(store, "agent-1") == ["h-go"]  # the request, from the run's start
    cp.close()


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_rewritten_list_hands_over_only_what_the_restored_one_lacked(with_ids: bool) -> None:
    # A run restores [q, a, r]; a node then rewrites the list (a summary in place of the
    # oldest two). Only the summary and the new reply are new: the restored reply, compared
    # by id (its own, or the stable key of an id-less message), is not handed over again.
    def msg(cls: Any, text: str, mid: str) -> Any:
        return cls(text, id=mid) if with_ids else cls(text)

    q, a, r = msg(HumanMessage, "q", "q"), msg(AIMessage, "a", "a"), msg(AIMessage, "r", "r")
    cursor = _recording.MessageCursor([q, a, r], "t")
    summary, reply = msg(AIMessage, "summary", "s"), msg(AIMessage, "next", "n")
    fresh = cursor.new_messages([summary, r, reply])
    # Id-less, the reply's key holds its place in the channel: moved, it is another message.
    expected = ["summary", "next"] if with_ids else ["summary", "r", "next"]
    assert [m.content for m in fresh] == expected
