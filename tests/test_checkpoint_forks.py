"""Finding forks and unfinished runs in a thread's history (for ``langgraph-recall doctor``)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fix_checkpoint import config, step_graph, turn_input
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_recall.checkpoint import find_forks, inspect_thread, inspect_threads, unfinished_runs
from langgraph_recall.store import RecallStore


def put(saver: Any, thread: str, parent: str | None, step: int, source: str = "loop") -> str:
    checkpoint = empty_checkpoint()
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    saver.put(
        {"configurable": conf}, checkpoint, {"source": source, "step": step, "parents": {}}, {}
    )
    return checkpoint["id"]


def test_two_writers_on_one_head_are_a_fork() -> None:
    saver = InMemorySaver()
    root = put(saver, "t", None, -1, "input")
    first = put(saver, "t", root, 0)
    second = put(saver, "t", root, 0)
    report = inspect_thread(saver, "t")
    assert report.status == "forked"
    assert report.forks == ((root, tuple(sorted((first, second)))),)
    assert find_forks(saver, "t") == [(root, tuple(sorted((first, second))))]
    assert "two writers forked it" in report.findings()[0]


def test_two_roots_on_a_new_thread_are_a_fork() -> None:
    saver = InMemorySaver()
    put(saver, "t", None, -1, "input")
    put(saver, "t", None, -1, "input")
    report = inspect_thread(saver, "t")
    assert report.status == "forked" and len(report.roots) == 2
    assert find_forks(saver, "t")[0][0] == "<root>"


def test_two_processes_without_recall_fork_a_thread() -> None:
    # The failure the checkpointer prevents, reproduced with the bare saver: both runs read
    # the same head and both succeed.
    saver = InMemorySaver()
    graph = step_graph().compile(checkpointer=saver)
    graph.invoke(turn_input("first", 1), config("t"))
    both_read = threading.Barrier(2)
    real = saver.get_tuple

    def get_tuple(cfg: Any) -> Any:
        out = real(cfg)
        if "__pregel_runtime" in cfg["configurable"]:
            both_read.wait(30)
        return out

    saver.get_tuple = get_tuple  # type: ignore[method-assign]
    runs = [
        threading.Thread(target=graph.invoke, args=(turn_input(t, 1), config("t"))) for t in "ab"
    ]
    for r in runs:
        r.start()
    for r in runs:
        r.join(60)
    assert inspect_thread(saver, "t").status == "forked"


def test_run_that_died_after_its_tasks_finished_is_unfinished() -> None:
    saver = InMemorySaver()
    root = put(saver, "t", None, -1, "input")
    head = put(saver, "t", root, 0)
    saver.put_writes(
        config("t")
        | {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": head}},
        [("messages", ["x"])],
        "task-1",
    )
    report = inspect_thread(saver, "t")
    assert report.status == "unfinished" and report.head == head
    assert "invoke(None, config)" in report.findings()[0]
    assert [r.thread_id for r in unfinished_runs(saver)] == ["t"]


def test_run_that_saved_only_its_input_is_reported() -> None:
    saver = InMemorySaver()
    put(saver, "t", None, -1, "input")
    assert inspect_thread(saver, "t").status == "started"
    assert [r.thread_id for r in unfinished_runs(saver, ["t"])] == ["t"]


def test_interrupted_and_finished_threads_are_healthy(store: RecallStore) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph(who="p").compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("done", 2), config("t-done"))
    graph.invoke({**turn_input("wait", 2), "plan": {"p": {"interrupt_at": 1}}}, config("t-wait"))
    assert inspect_thread(cp, "t-done").status == "ok"
    assert inspect_thread(cp, "t-wait").status == "interrupted"
    reports = {r.thread_id: r for r in inspect_threads(store)}
    assert set(reports) == {"t-done", "t-wait"}
    assert all(not r.findings() for r in reports.values())
    cp.close()


@pytest.mark.parametrize("how", ["time travel", "update_state"])
def test_deliberate_branches_are_not_forks(store: RecallStore, how: str) -> None:
    cp = store.checkpointer(lease_ttl=30)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t")
    graph.invoke(turn_input("a", 2), cfg)
    old = list(graph.get_state_history(cfg))[2].config
    if how == "time travel":
        graph.invoke(turn_input("b", 1), old)
    else:
        graph.update_state(old, {"target": 7})
    report = inspect_thread(cp, "t")
    assert report.status == "ok" and not report.forks
    assert len(report.branches) == 1
    cp.close()
