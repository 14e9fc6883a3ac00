"""A lone call's end commits in its task's own write (``store/_due.py``), on both databases.

With ``store.checkpointer()`` the end of a call that is its AI message's only one is held in
memory until the saver writes the task's answer, and committed in that transaction. What must
hold: the end lands with the task's write (a process killed right after it finds the call
done); no transaction of this process reads a finished call as open meanwhile; a call among
several still ends on its own (its node's write waits for the slowest); and an end never
written by a task is written by the next transaction, or when the store closes.
"""

from __future__ import annotations

from typing import Any

import pytest
from fix_tools import read_effects
from langchain_core.messages import HumanMessage
from test_tools_planned import _graph, _sends, _sent, run_worker

from langgraph_recall import RecallStore
from langgraph_recall.store._due import EndRider
from langgraph_recall.testing import call, reply
from langgraph_recall.tools import _steps
from langgraph_recall.tools._steps import due_end


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many ends were written on their own (``_steps.finish``), and how many rode a task write."""
    seen = {"own": 0, "rode": 0}
    finish, send = _steps.finish, EndRider.send

    def own(*args: Any, **kwargs: Any) -> Any:
        seen["own"] += 1
        return finish(*args, **kwargs)

    def rode(self: EndRider, cur: Any) -> None:
        seen["rode"] += len(self.ends)
        send(self, cur)

    monkeypatch.setattr(_steps, "finish", own)
    monkeypatch.setattr(EndRider, "send", rode)
    return seen


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_lone_call_ends_in_its_tasks_write(
    store: RecallStore, saver: Any, tmp_path: Any, counted: dict[str, int], durability: str
) -> None:
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-ride"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability=durability)
    assert [a.status for a in store.actions("t-ride")] == ["done"] * 3
    assert [a.result.content for a in store.actions("t-ride")] == [
        f"sent to u{i}@example.com" for i in range(3)
    ]
    assert counted == {"own": 0, "rode": 3}
    assert not store._db.due


def test_a_call_among_several_ends_on_its_own(
    store: RecallStore, saver: Any, tmp_path: Any, counted: dict[str, int]
) -> None:
    effects = str(tmp_path / "effects")
    script = [reply("", call("send", to="a@example.com"), call("send", to="b@example.com"))]
    graph = _graph(store, saver, effects, script)
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-two"}})
    assert sorted(_sent(effects)) == ["a@example.com", "b@example.com"]
    assert [a.status for a in store.actions("t-two")] == ["done", "done"]
    assert counted == {"own": 2, "rode": 0}


def _open_call(store: RecallStore, agent: str) -> Any:
    claim = store.claim(agent, "a" * 32, tool="send", args={"to": "x"}, args_digest="d" * 64)
    assert claim.claimed
    return claim.action


def test_no_transaction_reads_a_due_end_as_open(store: RecallStore) -> None:
    action = _open_call(store, "t-due")
    store._db.due.add(due_end(store, action, "sent to x", "task-1"))
    assert store.actions("t-due", open_only=True) == []  # this read wrote it first
    found = store.action(action.action_id)
    assert (found.status, found.result) == ("done", "sent to x")
    assert not store._db.due


async def test_async_readers_see_due_ends_too(store: RecallStore) -> None:
    action = _open_call(store, "t-due-async")
    store._db.due.add(due_end(store, action, "sent", "task-2"))
    assert await store.aactions("t-due-async", open_only=True) == []


def test_a_briefing_leaves_due_ends_out_without_writing_them(store: RecallStore) -> None:
    """The briefing reads around a finished call whose end is still due: not reported in
    doubt, and not written by the briefing (the task's write is to carry it)."""
    finished = _open_call(store, "t-brief")
    other = store.claim("t-brief", "b" * 32, tool="send", args={"to": "y"}, args_digest="e" * 64)
    store._db.due.add(due_end(store, finished, "sent to x", "task-6"))

    text = store.briefing("t-brief").text
    assert f"[action {'b' * 16}]" in text  # the call with no end is in doubt
    assert f"[action {'a' * 16}]" not in text
    assert store._db.due.pending == 1  # still due: the briefing wrote nothing

    assert [a.status for a in store.actions("t-brief")] == ["done", "open"]  # this read lands it
    assert other.action.status == "open"


def test_a_briefing_takes_the_due_ends_before_it_reads(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An end that commits while the briefing reads: the briefing saw it either committed or
    due, never neither (read open, then gone from the due ends)."""
    import threading

    finished = _open_call(store, "t-race")
    store._db.due.add(due_end(store, finished, "sent to x", "task-7"))
    real = RecallStore.actions

    def then_committed(self: RecallStore, *args: Any, **kw: Any) -> Any:
        found = real(self, *args, **kw)  # read while the end was due
        lander = threading.Thread(target=self._db.due.land, args=(self._db,))
        lander.start()  # the end commits now, from another thread, before the briefing goes on
        lander.join()
        return found

    monkeypatch.setattr(RecallStore, "actions", then_committed)
    text = store.briefing("t-race").text
    assert not store._db.due
    assert f"[action {'a' * 16}]" not in text


def test_closing_the_store_writes_what_is_still_due(store_target: str) -> None:
    with RecallStore.open(store_target) as store:
        action = _open_call(store, "t-close")
        store._db.due.add(due_end(store, action, "sent", "task-3"))
    with RecallStore.open(store_target) as store:
        assert store.action(action.action_id).status == "done"


def test_an_end_already_recorded_is_kept(store: RecallStore) -> None:
    """A person (or resolver) who settled the call first wins: an end is written once."""
    action = _open_call(store, "t-first")
    store.end(action.action_id, action.attempt, "not_done", resolved_by="person")
    store._db.due.add(due_end(store, action, "sent", "task-4"))
    assert store.action(action.action_id).status == "not_done"


# --- a process killed right after its task's write -------------------------------------------


def test_killed_right_after_the_tasks_write_the_call_reads_done(
    store_target: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = str(tmp_path / "effects")
    # put_writes: the input, the first AI message, then the first tool's answer (3rd), which
    # carries that call's end. Exit right after it commits, before anything else is written.
    assert run_worker(monkeypatch, store_target, "w", effects, faults="after_writes=3:exit") == 99
    with RecallStore.open(store_target) as store:
        (ended,) = store.actions("w")
        assert (ended.status, ended.result.content) == ("done", "sent to u0@example.com")

    assert run_worker(monkeypatch, store_target, "w", effects) == 0
    assert [e["to"] for e in read_effects(effects, "send")] == [
        f"u{i}@example.com" for i in range(3)
    ]
    with RecallStore.open(store_target) as store:
        assert store.actions("w", open_only=True) == []
        assert [a.status for a in store.actions("w")] == ["done"] * 3


def test_an_end_no_task_write_carried_is_written_before_the_lease_goes(
    store: RecallStore, saver: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_recall.store._due import DueEnds

    monkeypatch.setattr(DueEnds, "take", lambda self, task_id: [])  # no task write carries
    released: list[list[str]] = []

    def spy(name: str) -> None:
        real = getattr(RecallStore, name)

        def release(self: RecallStore, agent_id: str, *args: Any, **kw: Any) -> Any:
            out = real(self, agent_id, *args, **kw)
            # What another process taking over would read, right after the lease went.
            with RecallStore.open(self._db.target) as other:
                released.append([a.status for a in other.actions(agent_id)])
            return out

        monkeypatch.setattr(RecallStore, name, release)

    spy("release_lease")
    spy("_end_run")  # a run's end gives the lease up with its last turns
    graph = _graph(store, saver, str(tmp_path / "effects"), _sends(2))
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-late"}})
    assert released and all(seen == ["done", "done"] for seen in released), released


def test_a_transaction_waits_for_the_write_carrying_an_end(store: RecallStore, inner: Any) -> None:
    """A reader finding an end on its way in a task's write waits for that commit, instead of
    reading the call as open or writing the end a second time."""
    import threading
    import time

    from langgraph_recall.checkpoint._same_db import put_writes_with

    action = _open_call(store, "t-wait")
    due = store._db.due
    due.add(due_end(store, action, "sent", "task-5"))
    ends = due.take("task-5")  # the task's write has them now

    def task_write() -> None:
        time.sleep(0.3)
        config = {
            "configurable": {"thread_id": "t-wait", "checkpoint_ns": "", "checkpoint_id": "c"}
        }
        try:
            put_writes_with(inner, EndRider(ends, store._db.sql), config, [("x", 1)], "task-5", "")
        finally:
            due.rode(ends, True)

    writer = threading.Thread(target=task_write)
    writer.start()
    try:
        found = store.action(action.action_id)
    finally:
        writer.join()
    assert found.status == "done"
    assert not due


async def test_ainvoke_carries_lone_ends_too(
    store: RecallStore, saver: Any, tmp_path: Any, counted: dict[str, int]
) -> None:
    effects = str(tmp_path / "effects")
    graph = _graph(store, saver, effects, _sends(3))
    config = {"configurable": {"thread_id": "t-aride"}}
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert [a.status for a in await store.aactions("t-aride")] == ["done"] * 3
    assert counted == {"own": 0, "rode": 3}  # aput_writes carried each one
    assert not store._db.due
