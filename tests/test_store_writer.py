"""SQLite: every write of the process on one connection, the same-database saver's included.

SQLite drops a connection's whole page cache when a transaction starts after another
connection changed the file, so the store and the saver used to start each other's writes
cold. These tests pin down what sharing one connection must not break: the saver writes on the
store's connection, a read on the hot path never waits for a write in progress (it falls back
to a pooled connection) and never sees that write before it commits, and a write that fails
leaves the connection clean for the next writer.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from fix_store import queued_at_write_lock
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_recall import RecallStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _claim(store: RecallStore, action_id: str) -> str:
    return store.claim(
        "agent", action_id, tool="send", args={"to": "a"}, args_digest="d" * 64
    ).status


def test_the_same_database_saver_writes_on_the_stores_connection(tmp_path: Path) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        saver = store.checkpointer()
        try:
            writer = store._db.writer()
            assert saver.inner.conn is writer
            # Interleaved, the two leave no transaction open on it.
            assert _claim(store, "a1") == "claimed"
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            saver.inner.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
            assert not writer.in_transaction
            store.end("a1", 1, "done", result="sent")
            assert not writer.in_transaction
            assert saver.inner.get_tuple(config) is not None
            assert store.action("a1").status == "done"
        finally:
            saver.close()
        # The checkpointer's close leaves the store's connection to the store.
        assert _claim(store, "a2") == "claimed"


def test_a_warm_read_does_not_wait_for_a_write_in_progress(tmp_path: Path) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        assert _claim(store, "done-before") == "claimed"
        store.end("done-before", 1, "done", result="ok")
        inside, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def hold_a_write() -> None:
            try:
                with store._db.tx(write=True) as tx:
                    tx.run("INSERT INTO recall_meta (key, value) VALUES ('uncommitted', 'x')")
                    inside.set()
                    assert release.wait(30)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                inside.set()

        holder = threading.Thread(target=hold_a_write)
        holder.start()
        try:
            assert inside.wait(10)
            # The repeat lookup of a finished call reads while the other thread's write
            # transaction is open on the writers' connection: it is answered from a pooled
            # connection, and it does not see the uncommitted row.
            assert _claim(store, "done-before") == "done"
            with store._db.tx(warm=True) as tx:
                assert tx.one("SELECT value FROM recall_meta WHERE key = 'uncommitted'") is None
            assert holder.is_alive() and not release.is_set()  # it was still writing
        finally:
            release.set()
            holder.join(30)
        assert not errors
        with store._db.tx(warm=True) as tx:
            assert tx.one("SELECT value FROM recall_meta WHERE key = 'uncommitted'") == ("x",)


def test_a_failed_write_leaves_the_connection_clean_for_the_next(tmp_path: Path) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        with pytest.raises(RuntimeError, match="boom"):
            with store._db.tx(write=True) as tx:
                tx.run("INSERT INTO recall_meta (key, value) VALUES ('rolled-back', 'x')")
                raise RuntimeError("boom")
        assert not store._db.writer().in_transaction
        # A write refused by the database itself (the action tables are append-only).
        assert _claim(store, "a1") == "claimed"
        with pytest.raises(Exception, match="append-only"):
            with store._db.tx(write=True) as tx:
                tx.run("DELETE FROM recall_actions WHERE action_id = 'a1'")
        assert not store._db.writer().in_transaction
        assert _claim(store, f"a-{uuid.uuid4().hex}") == "claimed"
        with store._db.tx() as tx:
            assert tx.one("SELECT 1 FROM recall_meta WHERE key = 'rolled-back'") is None
            assert tx.one("SELECT count(*) FROM recall_actions") == (2,)


def test_a_commit_that_fails_leaves_no_transaction_open_for_the_next_writer(
    tmp_path: Path,
) -> None:
    # A COMMIT can fail and leave its transaction open (here: a deferred foreign key still
    # violated at commit time). On the one writers' connection that would hand the next writer,
    # the saver included, a half-done transaction it would then commit as its own.
    with RecallStore.open(tmp_path / "r.db") as store:
        db = store._db
        with db.write_lock:
            writer = db.writer()
            writer.execute("PRAGMA foreign_keys = ON")
            writer.execute("CREATE TABLE t_parent (id INTEGER PRIMARY KEY)")
            writer.execute("CREATE TABLE t_child (parent INTEGER REFERENCES t_parent (id))")
        with pytest.raises(Exception, match="FOREIGN KEY"):
            with db.tx(write=True) as tx:
                tx.run("PRAGMA defer_foreign_keys = ON")
                tx.run("INSERT INTO t_child (parent) VALUES (42)")
        assert not db.writer().in_transaction
        assert _claim(store, "after") == "claimed"
        with db.tx() as tx:
            assert tx.one("SELECT count(*) FROM t_child") == (0,)
            assert tx.one("SELECT count(*) FROM recall_actions") == (1,)


def test_a_half_read_history_does_not_hold_up_other_threads_writes(tmp_path: Path) -> None:
    # SqliteSaver keeps its lock while a listing is open, and the same-database saver's lock
    # is the store's write lock: a listing must read somewhere else, or one `next()` on a
    # history kept in a variable stops every writer of the process (lease renewal included).
    with RecallStore.open(tmp_path / "r.db") as store:
        saver = store.checkpointer()
        try:
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            for step in range(3):
                cp = empty_checkpoint()
                config = saver.inner.put(config, cp, {"source": "loop", "step": step}, {})
            history = saver.list({"configurable": {"thread_id": "t"}})
            first = next(history)
            assert first.metadata["step"] == 2

            outcome: list[str] = []
            writer = threading.Thread(target=lambda: outcome.append(_claim(store, "a-w")))
            writer.start()
            writer.join(10)
            assert outcome == ["claimed"], "a store write waited for the half-read listing"
            # The listing goes on where it was, and a checkpoint written meanwhile commits.
            saver.inner.put(config, empty_checkpoint(), {"source": "loop", "step": 3}, {})
            assert [t.metadata["step"] for t in history] == [1, 0]
            assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 4
            # One saver class for every checkpointer (the wrapper caches its class per inner).
            other = store.checkpointer()
            assert type(other.inner) is type(saver.inner)
            assert type(other) is type(saver)
            other.close()
        finally:
            saver.close()


def test_a_new_claim_reads_and_writes_in_one_hold_of_the_writers_connection(
    tmp_path: Path,
) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        assert _claim(store, "a0") == "claimed"  # the agent's row exists from here on
        writer = store._db.writer()
        statements: list[str] = []
        writer.set_trace_callback(statements.append)
        try:
            assert _claim(store, "a1") == "claimed"
            assert _claim(store, "a1") == "in_doubt"  # a repeat: read only, nothing begun
        finally:
            writer.set_trace_callback(None)
        # (SQLite traces a statement again for each trigger program it runs: count it once.)
        sent = [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
        kinds = [s.split()[0].upper() for s in sent]
        # The read, then the write, on the writers' connection; a repeat only reads.
        assert kinds == ["SELECT", "BEGIN", "INSERT", "COMMIT", "SELECT"], statements
        assert not writer.in_transaction
        # ... and without letting go of the write lock between the read and the write.
        lock = _CountingRLock(store._db.write_lock)
        store._db.write_lock = lock  # type: ignore[assignment]
        assert _claim(store, "a2") == "claimed"
        assert lock.acquired == 1
        assert _claim(store, "a2") == "in_doubt"
        assert lock.acquired == 2


class _CountingRLock:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.acquired = 0

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        got = bool(self.inner.acquire(*args, **kwargs))
        self.acquired += got
        return got

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_claim_that_fails_after_taking_the_write_leaves_nothing_open(tmp_path: Path) -> None:
    with RecallStore.open(tmp_path / "r.db") as store:
        with store._db.tx(write=True) as tx:
            tx.run(
                "CREATE TRIGGER refuse_x BEFORE INSERT ON recall_actions "
                "WHEN NEW.action_id = 'x' BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
            )
        with pytest.raises(Exception, match="refused by test"):
            _claim(store, "x")
        writer = store._db.writer()
        assert not writer.in_transaction
        # The lock was given back: another thread writes at once, and its claim is not lost.
        done: list[str] = []
        t = threading.Thread(target=lambda: done.append(_claim(store, "y")))
        t.start()
        t.join(10)
        assert done == ["claimed"]
        assert [a.action_id for a in store.actions("agent")] == ["y"]


def test_a_claim_whose_read_found_a_write_in_progress_still_writes_on_the_writers_connection(
    tmp_path: Path,
) -> None:
    # The claim's read then ran on a pooled connection, which must never be promoted to a
    # write: every write of the process goes through the writers' connection, under the lock.
    with RecallStore.open(tmp_path / "r.db") as store:
        assert _claim(store, "a0") == "claimed"
        writer = store._db.writer()
        seen: list[str] = []
        out: list[str] = []
        claimer = threading.Thread(target=lambda: out.append(_claim(store, "a1")))
        with store._db.tx(write=True):  # a write in progress on this thread
            writer.set_trace_callback(seen.append)
            claimer.start()
            claimer.join(0.5)
            assert out == [], "the claim wrote while another write was in progress"
        claimer.join(10)
        writer.set_trace_callback(None)
        assert out == ["claimed"]
        assert any(s.startswith("INSERT INTO recall_actions") for s in seen), seen


@pytest.mark.parametrize("write", ["release", "renew"])
def test_a_lease_write_queues_at_the_stores_write_lock(tmp_path: Path, write: str) -> None:
    # On its own pooled connection a lease's release or renewal met this process's writers
    # inside SQLite, whose busy handler sleeps 1, 2, 5... ms between tries and can lose every
    # race to a busy writer thread (a release beside a recording loop waited 1.3 s). Queued at
    # the write lock, it waits for the write in progress, no longer.
    with RecallStore.open(str(tmp_path / "r.db")) as store:
        lease = store.acquire_lease("ag", "worker-a", 30.0)
        if write == "release":
            answer = queued_at_write_lock(
                store, lambda: store.release_lease("ag", "worker-a", lease.epoch)
            )
        else:
            answer = queued_at_write_lock(
                store, lambda: store.renew_lease("ag", "worker-a", lease.epoch, 60.0)
            )
        assert answer is True
        expires = store.lease("ag").expires_at
        assert expires == 0 if write == "release" else expires > lease.expires_at
