"""The SQLite driver: a WAL file, one writers' connection under a process-wide lock, pooled
readers, and SQLite's errors turned into ``RecallError`` with what to do."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

from .._errors import RecallError, RecordsMissing
from ._db import Database, Tx
from ._dberrors import sqlite_error as _sqlite_error
from ._schema import Dialect
from ._wal import WalCheckpointer


class SqliteDatabase(Database):
    """Connections on a WAL file: every write of this process on one connection, under
    ``write_lock``, with ``BEGIN IMMEDIATE``; reads on pooled connections, each lent to one
    transaction at a time.

    Why one writers' connection: SQLite keeps a page cache per connection and drops all of it
    when a transaction starts after another connection changed the file. With the store, its
    recorder and the same-database ``SqliteSaver`` each on a connection of their own, every
    durable call would start cold twice (the claim after the saver's checkpoint, the saver's
    next write after the call's end): measured, about 60 µs per claim and end. On one
    connection the pages of the last write are still in the cache for the next.
    """

    dialect: Dialect = "sqlite"

    def __init__(
        self, path: str, *, synchronous: str = "NORMAL", busy_timeout: float = 30.0
    ) -> None:
        super().__init__()
        self.target = path  # as given, for messages
        # Every connection is opened on the absolute path: a relative one is resolved at each
        # connect, so after an os.chdir (a notebook's %cd, a tool, a library) a new connection
        # opened (created) another file there while the first ones kept the records.
        self.path = os.path.abspath(path)
        # (device, inode) of the file the first connection opened (at open): every later
        # connection must open that same file, not one put in its place (see ``_connect``).
        self._identity: tuple[int, int] | None = None
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._conns: list[sqlite3.Connection] = []
        # Connections not inside a transaction right now. A transaction borrows one and gives
        # it back, so there are never more connections than concurrent transactions. (One per
        # thread leaked: every asyncio.run() in a notebook has fresh executor threads, and
        # SQLite defers closing a file while other connections of the process hold locks.)
        self._idle: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        # This process's writers to the file take turns here before BEGIN IMMEDIATE. SQLite's
        # own busy handler makes a writer that finds the file locked sleep 1, 2, 5... ms, and
        # the recorder thread, the tool calls' claims and LangGraph's checkpoint writes collide
        # on every step of a run; a lock wakes the next writer the moment the last one commits.
        # Other processes still meet at SQLite's lock (busy_timeout). Re-entrant, so a saver on
        # the same file can share it (``same_database_saver``) and nest without deadlock.
        self.write_lock = threading.RLock()
        # The connection every write goes through (and the same-database saver's), opened on
        # first use; only ever used by the thread holding ``write_lock``.
        self._writer: sqlite3.Connection | None = None
        # Checkpoints of the log run on their own thread, not in the commit that fills it.
        self.wal = WalCheckpointer(self._connect_checkpointer, self.write_lock)

    def writer(self) -> sqlite3.Connection:
        """The writers' connection; the caller holds ``write_lock``.

        Its ``isolation_level`` is sqlite3's default behaviour (a DML statement outside a
        transaction opens one): what ``SqliteSaver`` expects of the connection it is given.
        The store's own writes never rely on that; they open theirs with ``BEGIN IMMEDIATE``.
        """
        conn = self._writer
        if conn is None:
            with self._conns_lock:
                if self._closed:
                    raise RecallError("this RecallStore is closed; open it again", code="closed")
            conn = self._writer = self._connect(isolation_level="DEFERRED")
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _checkout(self) -> sqlite3.Connection:
        with self._conns_lock:
            if self._closed:
                raise RecallError("this RecallStore is closed; open it again", code="closed")
            if self._idle:
                return self._idle.pop()
        conn = self._connect()
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _checkin(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:  # a failed COMMIT: never hand out a half-open transaction
                conn.rollback()
        except sqlite3.Error:
            return
        with self._conns_lock:
            if not self._closed:
                self._idle.append(conn)

    def _connect(self, isolation_level: Literal["DEFERRED"] | None = None) -> sqlite3.Connection:
        first = self._identity is None
        try:
            # After the first, never create the file: one deleted under the store is refused
            # below, not replaced by an empty database.
            conn = sqlite3.connect(
                self.path if first else self._uri("rw"),
                uri=not first,
                isolation_level=isolation_level,
                timeout=self.busy_timeout,
                check_same_thread=False,
            )
        except sqlite3.DatabaseError as exc:
            if not first and not os.path.exists(self.path):
                raise self._replaced("was deleted") from exc
            raise _sqlite_error(exc, self.path) from exc
        try:
            self._check_identity(conn)
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            # Never checkpoint inside this connection's commits: ``self.wal`` does it (_wal).
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise _sqlite_error(exc, self.path) from exc
            raise
        return conn

    def _uri(self, mode: str) -> str:
        return Path(self.path).as_uri() + f"?mode={mode}"

    def _check_identity(self, conn: sqlite3.Connection) -> None:
        """Refuse a connection that opened another file than the store's first one did.

        The store keeps its connections for its whole life, and a new one is opened whenever a
        thread needs one. A database deleted and created again, or swapped for another file
        (a restore, a copy, ``mv``), while the store is open would otherwise be read and
        written by the new connections, while the old ones kept the records: an empty store,
        or another store's, with nothing said. Compared after the connect, so the file checked
        is the one the connection opened (or a newer one: refused just the same).
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise self._replaced("was deleted") from None
        found = (st.st_dev, st.st_ino)
        if self._identity is None:
            self._identity = found
        elif found != self._identity:
            raise self._replaced("was replaced by another file")

    def _replaced(self, what: str) -> RecordsMissing:
        return RecordsMissing(
            f"{self.target} {what} while this store had it open: its records are not in the "
            "file there now. Nothing was written to it. Restore the database from a backup "
            "and open the store again.",
            path=self.target,
        )

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        # On a file still in rollback-journal mode (a fresh database that several processes
        # open at once), switching to WAL can answer "database is locked" at once, without
        # the busy handler: SQLite refuses to wait where waiting could deadlock. Retry until
        # busy_timeout, as the busy handler would have.
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _connect_checkpointer(self) -> sqlite3.Connection:
        # A passive checkpoint never waits on the busy handler; the timeout is for opening.
        # mode=rw: the checkpoint thread's connection, opened at its first wake, must never
        # create the file (a database deleted under the store came back empty, with the
        # log's pages checkpointed into it), nor checkpoint a file put in its place.
        conn = sqlite3.connect(
            self._uri("rw"), uri=True, isolation_level=None, check_same_thread=False, timeout=1.0
        )
        try:
            self._check_identity(conn)
        except RecordsMissing as exc:
            conn.close()
            raise sqlite3.OperationalError(str(exc)) from exc  # the thread logs it, tries later
        return conn

    @property
    def flushes_each_commit(self) -> bool:
        return self.synchronous in ("FULL", "EXTRA")

    def _open(
        self, write: bool, warm: bool, flush_later: bool, learn: Hashable | None
    ) -> _SqliteTx:
        return _SqliteTx(self, write, warm, flush_later)

    def _let_go(self) -> Any:
        # Not under _conns_lock: a parent's thread may have held it at the fork, and in the
        # child nothing else can reach these connections (every transaction is refused).
        held = (self._conns, self._idle, self._writer)
        self._conns, self._idle, self._writer = [], [], None
        return held

    def close(self) -> None:
        self._closed = True
        self.wal.close()
        with self._conns_lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.ProgrammingError:  # pragma: no cover - closed from its own thread
                    pass
            self._conns.clear()
            self._idle.clear()
            self._writer = None


class _SqliteTx:
    """One SQLite transaction: a write on the writers' connection under ``write_lock``; a read
    without BEGIN on a borrowed connection, or on the writers' when ``warm`` and it is free."""

    __slots__ = ("_db", "_write", "_locked", "_conn", "_cur", "_relaxed")

    @property
    def writes(self) -> bool:
        """Whether this is a write transaction (one from the start, or a promoted read)."""
        return self._write

    def __init__(self, db: SqliteDatabase, write: bool, warm: bool, flush_later: bool) -> None:
        self._db = db
        self._write = write
        self._locked = warm  # for a read: whether to try the writers' connection
        # Only a write has a commit to relax (a read has none; a promoted read is a claim).
        self._relaxed = flush_later and write

    def __enter__(self) -> Tx:
        db = self._db
        if self._write:
            if not db.write_lock.acquire(timeout=db.busy_timeout):
                raise _sqlite_error(sqlite3.OperationalError("database is locked"), db.path)
            self._locked = True
        elif self._locked:
            # A warm read never waits: when a write holds the connection, a pooled one serves.
            self._locked = db.write_lock.acquire(blocking=False)
        try:
            conn = self._conn = db.writer() if self._locked else db._checkout()
        except BaseException:
            if self._locked:
                db.write_lock.release()
            raise
        try:
            cur = self._cur = conn.cursor()
            if self._relaxed:
                # SQLite refuses to change this inside a transaction: set before BEGIN, put
                # back in _give_back, before any other writer can have the connection.
                cur.execute("PRAGMA synchronous=NORMAL")
            if self._write:
                cur.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._give_back(conn)
            _raise_translated(exc, db.path)
            raise
        return Tx(db, cur, self, self._relaxed)

    def promote(self) -> bool:
        if not self._write and self._locked:
            # The read before ran in autocommit (no BEGIN), so no snapshot is upgraded here:
            # the write starts fresh, and another process's write since the read is met by
            # the caller's insert as any race is (its primary key).
            try:
                self._cur.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                _raise_translated(exc, self._db.path)
                raise
            self._write = True
        return self._write

    def _give_back(self, conn: sqlite3.Connection) -> None:
        if not self._locked:
            self._db._checkin(conn)
            return
        try:
            if conn.in_transaction:  # a failed COMMIT: the next writer must start clean
                conn.rollback()
        except sqlite3.Error:
            pass
        try:
            if self._relaxed:
                # Every other commit on this connection (the saver's included) flushes again.
                conn.execute(f"PRAGMA synchronous={self._db.synchronous}")
        finally:
            self._db.write_lock.release()

    def __exit__(self, et: Any, exc: Any, tb: Any) -> None:
        conn = self._conn
        try:
            # A read whose last row was never fetched keeps its statement, and so a snapshot of
            # the log, open until the cursor goes: an idle connection would then stop
            # checkpoints from copying past that snapshot and the log from starting over.
            self._cur.close()
            if self._write:
                if et is None:
                    conn.execute("COMMIT")
                    self._db.wal.committed()
                else:
                    conn.rollback()
        except BaseException as err:
            _raise_translated(err, self._db.path)
            raise
        finally:
            self._give_back(conn)
        if exc is not None:
            _raise_translated(exc, self._db.path)


def _raise_translated(exc: BaseException, path: str) -> None:
    """SQLite errors become RecallError; IntegrityError (a refused write) passes through."""
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
        raise _sqlite_error(exc, path) from exc
