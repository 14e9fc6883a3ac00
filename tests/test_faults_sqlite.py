"""SQLite with its disk full: a ``RecallError(code="database")`` saying what to do, raised from
SQLite's own error, the first time and every time; nothing committed is lost, and once there
is room the same process's next run works and records every message.

"Full" two ways: ``PRAGMA max_page_count`` on the connection every write goes through (SQLite
answers SQLITE_FULL exactly as for a full disk; works everywhere), and a real small tmpfs
(where this process may mount one).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fix_checkpoint import config, recorded_ids
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_recall import RecallError, RecallStore


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def big_graph(store: RecallStore, cp: Any, size: int) -> Any:
    """One node that answers with a message of ``size`` characters (each turn its own)."""

    def answer(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(os.urandom(size // 2).hex(), id=f"ai-{n}")]}

    g = StateGraph(State)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    return g.compile(checkpointer=cp, store=store)


def ask(graph: Any, cp: Any, text: str, use_async: bool) -> Any:
    cfg = config("t1", "a1", turn_id=text)
    turn = {"messages": [HumanMessage(text, id=f"h-{text}")]}
    if use_async:
        return asyncio.run(cp.ainvoke(graph, turn, cfg))
    return cp.invoke(graph, turn, cfg)


def pages_left(store: RecallStore, pages: int | None) -> None:
    """Let the store's writes grow the file by ``pages`` more pages (None: no limit)."""
    db: Any = store._db
    with db.write_lock:
        conn = db.writer()
        now = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {2**31 if pages is None else now + pages}")


def assert_full(err: RecallError) -> None:
    assert err.code == "database"
    assert "full" in str(err) and "Free space" in str(err), str(err)
    assert isinstance(err.__cause__, sqlite3.OperationalError)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_full_database_raises_database_every_time_and_the_next_run_records_all(
    tmp_path: Path, use_async: bool
) -> None:
    store = RecallStore.open(str(tmp_path / "recall.db"))
    cp = store.checkpointer()
    graph = big_graph(store, cp, 64_000)
    ask(graph, cp, "first", use_async)
    pages_left(store, 4)
    for attempt in ("second", "third"):  # the first time, and again
        with pytest.raises(RecallError) as failed:
            ask(graph, cp, attempt, use_async)
        assert_full(failed.value)
    pages_left(store, None)
    out = ask(graph, cp, "fourth", use_async)
    held = [m.id for m in out["messages"]]
    # The failed runs' requests were recorded at their starts (a resume must know what was
    # asked), though their checkpoints never landed; everything the thread holds is recorded.
    assert recorded_ids(store, "a1") == held[:2] + ["h-second", "h-third"] + held[2:]
    assert held[:2] == ["h-first", "ai-1"], "nothing committed was lost"
    cp.close()
    store.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs, mounted for the test (skipped where this process may not mount one)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs here (needs root, or a container allowed to mount): "
            f"{done.stderr.strip()}; test_a_full_database_... covers SQLITE_FULL with "
            "max_page_count instead"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_raises_database_and_the_next_run_records_all(small_disk: Path) -> None:
    store = RecallStore.open(str(small_disk / "recall.db"))
    cp = store.checkpointer()
    graph = big_graph(store, cp, 200_000)
    ask(graph, cp, "first", False)
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:  # the rest of the disk
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    with pytest.raises(RecallError) as failed:
        ask(graph, cp, "second", False)
    assert failed.value.code == "database"
    assert "full" in str(failed.value), str(failed.value)
    assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
    filler.unlink()
    out = ask(graph, cp, "third", False)
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    cp.close()
    store.close()
