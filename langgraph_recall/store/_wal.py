"""SQLite WAL checkpoints on a thread of their own, not inside a writer's commit.

By default SQLite copies the write-ahead log back into the database file from whichever COMMIT
pushes the log past 1000 pages: that commit copies the pages and waits for two fdatasyncs,
paid by a tool call, a checkpoint write or the recorder, whichever is unlucky. Measured on this
project's machine (ext4, virtio disk; 6000 claims each way, interleaved in one process): the
slowest claim in a thousand took 5.3 ms that way and 2.3 ms this way, the mean 125 and 108 µs.

Here every connection of the store (and the same-database ``SqliteSaver``) runs with
``wal_autocheckpoint=0``; the writers count their commits, and every ``COMMITS_PER_CHECKPOINT``
commits wake a daemon thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own
connection. A passive checkpoint takes no write lock: writers keep appending to the log while
it copies, and the sqlite3 module releases the GIL for the copy and the syncs.

Durability does not change. A commit is in the log before COMMIT returns, whoever checkpoints
later; with ``synchronous=NORMAL`` the log is synced at each checkpoint, as before, and with
``FULL`` at every commit. A process killed during a checkpoint leaves a log that the next
opener replays (SQLite's own recovery). A forked child cannot commit on the store (``_process``),
so only the parent's thread ever runs.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("langgraph_recall")

# About 3 to 11 pages a commit in a tool loop: one checkpoint per 300 to 1100 pages, close to
# SQLite's own 1000-page default, so the log stays the same size on disk and is reused.
COMMITS_PER_CHECKPOINT = 100
# Frames (pages) in the log past which a checkpoint makes sure the next writer starts it over.
RESTART_AFTER_FRAMES = 2000


class WalCheckpointer:
    """Runs passive checkpoints of one SQLite file on a daemon thread when writers ask."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], write_lock: Any) -> None:
        self._connect = connect
        self._write_lock = write_lock
        self._commits = 0
        self._wake = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.checkpoints = 0  # catch-ups run (the tests read it)

    def committed(self) -> None:
        """A writer committed. Cheap: an add and a compare; every Nth call wakes the thread."""
        # Unlocked on purpose: two writers racing here can lose one count, which delays the
        # next checkpoint by one commit. Only the store's write lock holders and the saver call
        # this, so the race is rare anyway.
        self._commits += 1
        if self._commits >= COMMITS_PER_CHECKPOINT:
            self._commits = 0
            self._kick()

    def _kick(self) -> None:
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._start_lock:
                thread = self._thread
                if self._closed:
                    return
                if thread is None or not thread.is_alive():  # first time, or if it died
                    self._wake = threading.Event()
                    self._thread = threading.Thread(
                        target=self._loop, name="langgraph-recall-wal", daemon=True
                    )
                    self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        wake = self._wake
        conn: sqlite3.Connection | None = None
        try:
            while True:
                wake.wait()
                wake.clear()
                if self._closed:
                    return
                try:
                    if conn is None:
                        conn = self._connect()
                    self._catch_up(conn)
                    self.checkpoints += 1
                except sqlite3.Error as exc:  # a locked or vanished file: try at the next kick
                    log.debug("background WAL checkpoint failed: %s", exc)
                    if conn is not None:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        # SQLite starts the log again from its beginning (overwriting its pages: less than half the
        # cost of appending new ones on ext4 here) only when a writer begins with every frame
        # already copied back. Passes without any lock until one finds nothing new (writers
        # keep committing meanwhile; the passes shrink fast). After an idle moment the next
        # writer then starts the log over; in a busy tool loop it rarely does (measured: the
        # log reached the bound below every ~30 tool calls, then the locked pass reset it).
        logged = 0
        for _ in range(8):
            busy, logged, copied = _passive(conn)
            if busy:
                return
            # Past the bound, go straight to the locked pass: every further unlocked pass lets
            # the writers append more (under a loaded disk a pass takes milliseconds, and the
            # log reached 1.7 to 2.1 times the bound waiting here).
            if copied >= logged or logged >= RESTART_AFTER_FRAMES:
                break
        # Writers that never pause (a bulk import, a tight loop) would grow the file for as long
        # as they last: past a bound, one pass under this process's write lock, so none of them
        # adds a frame meanwhile. It waits for the syncs the copied frames need (a millisecond
        # or two here), which is why it is not done every time.
        if logged >= RESTART_AFTER_FRAMES and self._write_lock.acquire(timeout=1.0):
            try:
                _passive(conn)
            finally:
                self._write_lock.release()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (after the checkpoint it may be running)."""
        with self._start_lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)


def _passive(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """One passive checkpoint: (busy, frames in the log, frames copied back)."""
    busy, logged, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
    return int(busy), int(logged), int(copied)


class CountingLock:
    """A lock that tells the checkpointer about each release: what the same-database
    ``SqliteSaver`` holds around each of its commits (and reads, which only count a little
    early)."""

    __slots__ = ("_lock", "_committed")

    def __init__(self, lock: Any, committed: Callable[[], None]) -> None:
        self._lock = lock
        self._committed = committed

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._lock.acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()
        self._committed()

    def __enter__(self) -> bool:
        return bool(self._lock.acquire())

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        self._committed()
