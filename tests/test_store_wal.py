"""SQLite: the write-ahead log is checkpointed on a thread of its own, and stays small.

SQLite's default copies the log back into the database inside the commit that fills it past
1000 pages, so one commit in a few hundred waits milliseconds for the copy and two syncs. The
store turns that off on every connection it opens (and on the same-database saver's), and a
daemon thread checkpoints instead. These tests check the settings, that the log is still
copied back and starts over (its file does not grow for as long as writes go on), that the
saver's commits count too, and that closing the store stops the thread.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_recall import RecallStore
from langgraph_recall.store import _wal

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _wal_bytes(path: Path) -> int:
    wal = Path(str(path) + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _claim(store: RecallStore, n: int) -> None:
    for i in range(n):
        store.claim(
            "agent",
            f"act-{i}-{uuid.uuid4().hex}",
            tool="send",
            args={"to": "x" * 200, "i": i},
            args_digest="d" * 64,
            klass="external",
        )


def _wal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "langgraph-recall-wal" and t.is_alive()]


def test_store_connections_never_checkpoint_inside_a_commit(tmp_path: Path) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        with store._db.tx() as tx:
            assert tx.one("PRAGMA wal_autocheckpoint") == (0,)
        saver = store.checkpointer()
        try:
            assert saver.inner.conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        finally:
            saver.close()


def test_a_long_run_of_commits_keeps_the_log_small(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    # 3000 claims write about 6 pages each: some 70 MB of log if it were never started over.
    with RecallStore.open(path) as store:
        _claim(store, 3000)
        size = _wal_bytes(path)
        ran = store._db.wal.checkpoints
        # 30 wake-ups; a thread still busy with one when the next comes takes both in one pass,
        # so a slow disk runs fewer passes. A few show it ran at all; the size, that it worked.
        assert ran >= 3, ran
        # Started over, the log holds the bound (2000 pages, 8 MB) plus what writers append
        # while the thread waits its turn: 9 to 12 MB here, 17 MB once on a loaded CI machine
        # (before the thread went straight to its locked pass). Never started over: 67 MB.
        assert size < 32 * 1024 * 1024, f"the log grew to {size} bytes"
        # And what was checkpointed is in the database file: a fresh reader sees every claim.
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM recall_actions").fetchone() == (3000,)


def test_the_same_database_savers_commits_count_too(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with RecallStore.open(path) as store:
        saver = store.checkpointer()
        try:
            inner = saver.inner
            before = store._db.wal.checkpoints
            for i in range(3 * _wal.COMMITS_PER_CHECKPOINT):
                config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
                cp = empty_checkpoint()
                cp["id"] = str(uuid.UUID(int=i + 1))
                inner.put(config, cp, {"source": "loop", "step": i}, {})
            _wait_for(lambda: store._db.wal.checkpoints > before)
        finally:
            saver.close()


def test_closing_the_store_stops_the_checkpoint_thread(tmp_path: Path) -> None:
    store = RecallStore.open(tmp_path / "r.db")
    _claim(store, _wal.COMMITS_PER_CHECKPOINT + 1)
    thread = store._db.wal._thread
    assert thread is not None and thread.is_alive()
    store.close()
    assert not thread.is_alive()


def test_the_checkpoint_thread_never_creates_a_deleted_database(tmp_path: Path) -> None:
    # Its connection, opened at its first wake, created an empty file where the database had
    # been deleted, and checkpointed the log's pages into it.
    path = tmp_path / "r.db"
    store = RecallStore.open(path)
    try:
        wal = store._db.wal
        connect, tried = wal._connect, threading.Event()

        def connect_once() -> sqlite3.Connection:
            try:
                return connect()
            finally:
                tried.set()

        wal._connect = connect_once  # type: ignore[method-assign]
        path.unlink()
        _claim(store, _wal.COMMITS_PER_CHECKPOINT)  # on the open writers' connection
        assert tried.wait(60), "the checkpoint thread did not wake"
        assert not path.exists()
        assert wal.checkpoints == 0
    finally:
        store.close()
    assert not path.exists()


def _wait_for(cond: object, timeout: float = 60.0, raise_: bool = True) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    if raise_:
        raise AssertionError("the background checkpoint did not run")
    return False


def test_a_finished_read_leaves_no_snapshot_that_stops_a_checkpoint(tmp_path: Path) -> None:
    # A read that fetches one row of several keeps its statement (and a snapshot of the log)
    # open for as long as its cursor lives. The store's transactions close their cursor on the
    # way out, so a pooled connection back in the pool holds nothing: a checkpoint from
    # another connection copies every frame written since.
    path = tmp_path / "r.db"
    with RecallStore.open(path) as store:
        _claim(store, 5)
        with store._db.tx() as tx:
            assert tx.one("SELECT action_id FROM recall_actions") is not None  # 1 row of 5
        # ``tx`` (and so its cursor) is still referenced here, as in the store's own methods.
        _claim(store, 5)
        with sqlite3.connect(path) as other:
            busy, logged, copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, copied) == (0, logged), (busy, logged, copied)
        del tx


def test_opening_waits_while_another_process_writes_a_fresh_file(tmp_path: Path) -> None:
    # A file still in rollback-journal mode, with a write in progress elsewhere: switching to
    # WAL answers "database is locked" at once (SQLite does not call the busy handler there).
    # Several processes opening a fresh database at once meet exactly this.
    path = str(tmp_path / "fresh.db")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (x)")
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM t").fetchall()
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")

    def finish() -> None:
        reader.execute("COMMIT")
        other.execute("COMMIT")

    timer = threading.Timer(0.3, finish)
    timer.start()
    try:
        with RecallStore.open(path) as store:  # waits, as for any other lock
            store.put(("ns",), "k", {"v": 1})
            assert store.get(("ns",), "k") is not None
    finally:
        timer.join()
        reader.close()
        other.close()
