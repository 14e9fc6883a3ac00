"""Thin sync drivers for the two engines: connections, transactions, statement dialect.

Everything above this module writes SQL once, with ``?`` placeholders (``{b}`` for one sent in
binary on PostgreSQL) and a ``{now}`` token for the database clock; ``Database.sql`` renders it
for the engine. The async API runs these sync drivers in a worker thread (see
``RecallStore._run``), so each piece of logic exists once.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

from .._errors import RecallError, RecordsMissing
from .._process import Birth
from ._due import DueEnds
from ._finished import FinishedActions
from ._prefetch import MAX_PLANS, Learned, Plans, Read, Step, combined, split
from ._schema import MIGRATIONS, SCHEMA_VERSION, TABLES, Dialect, render
from ._wal import WalCheckpointer

Row = tuple[Any, ...]

# PostgreSQL: seconds a session of ours may sit inside a transaction without a statement
# before the server ends it (see PostgresDatabase.configure).
IDLE_IN_TRANSACTION_TIMEOUT = 10.0

# What a forked child let go of (``Database.abandon``): kept, so that nothing closes it before
# the child exits. Even then it is harmless: psycopg does not end a session from a process
# that did not open it, and SQLite cannot checkpoint or delete the log while the parent still
# has the file open.
_ABANDONED: list[Any] = []
_TUPLES_OK = 2  # libpq's PGRES_TUPLES_OK (psycopg.pq.ExecStatus.TUPLES_OK), without importing it

# The database's own clock, in seconds since the epoch, so that several machines sharing one
# PostgreSQL server agree on lease expiry even when their clocks drift.
_NOW: dict[Dialect, str] = {
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "postgres": "extract(epoch from clock_timestamp())::double precision",
}


class Tx:
    """One open transaction (or autocommit read) on one connection."""

    __slots__ = ("_cur", "_db", "_owner", "flush_later", "learned", "later")

    def __init__(
        self,
        db: Database,
        cur: Any,
        owner: _SqliteTx | None = None,
        flush_later: bool = False,
        learned: Learned | None = None,
    ) -> None:
        self._db = db
        self._cur = cur
        self._owner = owner
        # PostgreSQL, a transaction opened with ``learn=``: its reads, some answered ahead.
        self.learned = learned
        # Whether this transaction's commit may return before it is on disk (see Database.tx);
        # on PostgreSQL the statement itself must ask the server (``_actions.end``).
        self.flush_later = flush_later
        # SQLite, a read: writes it asked for (``run_write``), run once it has ended. None
        # until one is asked for: most transactions never do.
        self.later: list[tuple[str, Sequence[Any]]] | None = None

    def promote(self) -> bool:
        """Turn this read into a write transaction, if that costs no wait; True when it is one.

        SQLite: a warm read that got the writers' connection holds the write lock already, so
        it can go on writing there (``BEGIN IMMEDIATE`` now, COMMIT when it ends) instead of
        giving the lock back and taking it again. Anything else answers whether it already is
        a write; the caller then opens its own write transaction.
        """
        return self._owner is not None and self._owner.promote()

    def all(self, sql: str, params: Sequence[Any] = (), *, fresh_plan: bool = False) -> list[Row]:
        """Every row.

        ``fresh_plan`` (PostgreSQL): plan this statement anew each time instead of letting
        psycopg prepare it. A prepared statement's generic plan is made once, from the
        statistics of that moment, and kept for the connection's life; for a statement that
        can pick between two indexes, one made while a table was small can stay wrong as the
        table grows (``_records.record``'s read of the ids already recorded).
        """
        if self.learned is not None:
            rows = self.learned.take(sql, params)
            if rows is not None:
                return rows
        cur = self._execute(sql, params, fresh_plan)
        return list(cur.fetchall()) if self._has_rows(cur) else []

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The first row, or None."""
        if self.learned is not None:
            rows = self.learned.take(sql, params)
            if rows is not None:
                return rows[0] if rows else None
        cur = self._execute(sql, params, False)
        return cur.fetchone() if self._has_rows(cur) else None

    def _has_rows(self, cur: Any) -> bool:
        if self.learned is not None:  # the plan's combined statement needs each read's width
            self.learned.ran(self._db.width(cur))
        return self._db.has_rows(cur)

    def _execute(self, sql: str, params: Sequence[Any], fresh_plan: bool) -> Any:
        if fresh_plan and self._db.dialect == "postgres":
            return self._cur.execute(self._db.sql(sql), self._p(params), prepare=False)
        return self._cur.execute(self._db.sql(sql), self._p(params))

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        if self.learned is not None:
            self.learned.forget()
        return int(self._cur.execute(self._db.sql(sql), self._p(params)).rowcount)

    def run_write(self, sql: str, params: Sequence[Any] = ()) -> None:
        """A write that a read may ask for (a TTL's refresh): run now in a write transaction
        or on PostgreSQL; in a SQLite read, run once the read has ended, in a write transaction
        of its own, which queues at the store's write lock. Run here, on the read's pooled
        connection, it would meet this process's writers inside SQLite, whose busy handler
        sleeps milliseconds between tries (see ``RecallStore._lease_write``)."""
        owner = self._owner
        if owner is None or owner.writes:
            self.run(sql, params)
        elif self.later is None:
            self.later = [(sql, params)]
        else:
            self.later.append((sql, params))

    def _p(self, params: Sequence[Any]) -> Sequence[Any] | None:
        # psycopg parses %-placeholders whenever params is not None, even when empty.
        return params if params or self._db.dialect == "sqlite" else None

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.learned is not None:
            self.learned.forget()
        if rows:
            self._cur.executemany(self._db.sql(sql), rows)

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect


class Database(ABC):
    dialect: Dialect
    target: str

    def __init__(self) -> None:
        self.due = DueEnds()
        self.finished = FinishedActions()
        self._sql_cache: dict[str, str] = {}
        self._local = threading.local()
        self._closed = False
        self.birth = Birth()  # a forked child refuses to use it (``_process``)

    def sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql.replace("{now}", _NOW[self.dialect])
            if self.dialect == "postgres":
                # "{b}": a parameter sent in binary (an array of bytes or strings, say, which
                # the text format would quote element by element).
                out = out.replace("?", "%s").replace("{b}", "%b")
            else:
                out = out.replace("{b}", "?")
            self._sql_cache[sql] = out
        return out

    @property
    @abstractmethod
    def flushes_each_commit(self) -> bool:
        """Whether a commit waits for the disk (durability "power"; PostgreSQL's default)."""

    def tx(
        self,
        write: bool = False,
        *,
        warm: bool = False,
        flush_later: bool = False,
        learn: Hashable | None = None,
        land: bool = True,
    ) -> AbstractContextManager[Tx]:
        """A transaction; ``write=True`` takes the write lock up front (no read-then-write race).

        ``warm=True``: a short read on the hot path of a write (SQLite: run it on the writers'
        connection when no write is in progress; see ``SqliteDatabase``). Re-entrant per
        thread: an inner ``tx`` joins the outer one (and its ``flush_later``).

        ``flush_later=True``: the commit may return before it reaches the disk, because the
        caller knows a write to this same database follows at once (a tool call's end, then
        the task's own write by the same-database saver). A log is flushed in order, so that
        write's flush carries this commit too; until then it survives any process being killed,
        and a power loss (or a PostgreSQL server crash) takes both. SQLite: this commit runs
        with synchronous=NORMAL. PostgreSQL: ``Tx.flush_later`` tells the statement to ask for
        ``synchronous_commit=off`` for its own transaction only.

        ``learn=key`` (a read): PostgreSQL sends the reads the last transaction with this key
        made as one statement before this one starts, and answers them from there (``_prefetch``);
        SQLite, whose reads make no round trip, ignores it.

        ``land=False`` (a read): the caller leaves the calls of ``due.finished()``, taken
        before this call, out of what it reports open, so the ends still due need not be
        written first (the briefing: under ``durability="async"`` the next model call's
        briefing starts before the task's write has taken the ends it carries).
        """
        self.birth.check("RecallStore")
        current: Tx | None = getattr(self._local, "tx", None)
        if current is not None:
            return _Joined(current)
        if self._closed:
            raise RecallError("this RecallStore is closed; open it again", code="closed")
        if land and self.due.pending and not self.due.landing():
            # Finished calls whose end rides their task's write (``_due``): no transaction in
            # this process may read them as open, so they are written before it starts.
            self.due.land(self)
        return _Outermost(self, write, warm, flush_later and self.flushes_each_commit, learn)

    def outermost(self) -> bool:
        """Whether a ``tx()`` opened now would be this thread's own (it commits on exit)."""
        return getattr(self._local, "tx", None) is None

    @abstractmethod
    def _open(self, write: bool, warm: bool, flush_later: bool, learn: Hashable | None) -> Any: ...

    @staticmethod
    def has_rows(cur: Any) -> bool:
        """Whether the statement just run returns rows (SELECT, RETURNING), not a count."""
        return cur.description is not None

    @staticmethod
    def width(cur: Any) -> int:
        """How many columns the statement just run answers (0 when unknown)."""
        return 0

    @abstractmethod
    def close(self) -> None: ...

    def abandon(self) -> None:
        """Close this copy in a forked child without touching what the parent still uses:
        closing a psycopg connection ends the server's session (the parent's too), and SQLite
        may checkpoint and delete the log when it believes its connection is the last one."""
        self._closed = True
        _ABANDONED.append(self._let_go())

    @abstractmethod
    def _let_go(self) -> Any:
        """Forget the connections without closing them; returns them (to be kept)."""

    def migrate(self) -> int:
        """Create or upgrade the schema; returns the version now in force."""
        # Fast path for every open after the first: two reads, no write lock, no DDL.
        if self._schema_version() == SCHEMA_VERSION:
            self._check_tables()
            return SCHEMA_VERSION
        with self.tx(write=True) as tx:
            if self.dialect == "postgres":
                # Several workers may open a fresh database at once: serialise the DDL.
                tx.run("SELECT pg_advisory_xact_lock(7260031122)")
            self._create_meta(tx)
            row = tx.one("SELECT value FROM recall_meta WHERE key = 'schema_version'")
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                raise RecallError(
                    f"{self.target} holds langgraph-recall schema v{current}, newer than this "
                    f"version understands (v{SCHEMA_VERSION}). Upgrade langgraph-recall "
                    "(pip install -U langgraph-recall) before opening it.",
                    code="schema_too_new",
                    found=current,
                    supported=SCHEMA_VERSION,
                )
            for version in range(current, SCHEMA_VERSION):
                for stmt in render(MIGRATIONS[version], self.dialect):
                    tx.run(stmt)
            if current != SCHEMA_VERSION:
                tx.run(
                    "INSERT INTO recall_meta(key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )
            return SCHEMA_VERSION

    def _schema_version(self) -> int | None:
        """The version on record, or None when there is no schema (or no readable one) yet."""
        try:
            with self.tx() as tx:
                if self.dialect == "sqlite":
                    exists = tx.one(
                        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'recall_meta'"
                    )
                else:
                    exists = tx.one("SELECT to_regclass('recall_meta')")
                    exists = exists if exists and exists[0] else None
                if not exists:
                    return None
                row = tx.one("SELECT value FROM recall_meta WHERE key = 'schema_version'")
        except RecallError as exc:
            if exc.code == "database":
                return None  # let the locked path below report it properly
            raise
        return int(row[0]) if row else None

    def _check_tables(self) -> None:
        """Refuse a database whose schema is on record but some of whose tables are gone (a
        table dropped by hand, a partial restore): each later call would fail on its own, with
        nothing to say that records were lost."""
        with self.tx() as tx:
            if self.dialect == "sqlite":
                present = {
                    r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                missing = [t for t in TABLES if t not in present]
            else:
                missing = [
                    r[0]
                    for r in tx.all(
                        "SELECT t FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS u(t, n) "
                        "WHERE to_regclass(t) IS NULL ORDER BY n",
                        (list(TABLES),),
                    )
                ]
        if missing:
            raise RecordsMissing(
                f"{self.target} holds langgraph-recall's schema v{SCHEMA_VERSION} but not its "
                f"tables {', '.join(missing)}: they were dropped, or the database was restored "
                "only in part. Nothing was written. Restore the database from a backup.",
                path=self.target,
                missing=missing,
            )

    def _create_meta(self, tx: Tx) -> None:
        tx.run(
            "CREATE TABLE IF NOT EXISTS recall_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL)"
        )


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
        self.target = path
        self.path = path
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
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=isolation_level,
                timeout=self.busy_timeout,
                check_same_thread=False,
            )
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            # Never checkpoint inside this connection's commits: ``self.wal`` does it (_wal).
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.DatabaseError as exc:
            raise _sqlite_error(exc, self.path) from exc
        return conn

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
        return sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=1.0
        )

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


class _Joined:
    """An inner ``tx()``: the transaction already open on this thread."""

    __slots__ = ("_tx",)

    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    def __enter__(self) -> Tx:
        return self._tx

    def __exit__(self, *exc: object) -> None:
        return None


class _Outermost:
    """A thread's outermost ``tx()``: the engine's transaction, marked as this thread's own.

    Classes rather than generator context managers: every store call goes through here, and
    two nested ``@contextmanager`` layers cost more than the SQLite statement they wrap.
    """

    __slots__ = ("_db", "_inner", "_tx")

    def __init__(
        self, db: Database, write: bool, warm: bool, flush_later: bool, learn: Hashable | None
    ) -> None:
        self._db = db
        self._inner: AbstractContextManager[Tx] = db._open(write, warm, flush_later, learn)

    def __enter__(self) -> Tx:
        tx = self._tx = self._inner.__enter__()
        self._db._local.tx = tx
        return tx

    def __exit__(self, et: Any, exc: Any, tb: Any) -> bool | None:
        self._db._local.tx = None
        out = self._inner.__exit__(et, exc, tb)
        later = self._tx.later
        if later and et is None:
            with self._db.tx(write=True) as tx:
                for sql, params in later:
                    tx.run(sql, params)
        return out


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


def _sqlite_error(exc: sqlite3.DatabaseError, path: str) -> RecallError:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return RecallError(
            f"{path} is not a readable SQLite database ({text}). Nothing was changed. Restore it "
            "from a backup, or open a different path to start fresh.",
            code="database",
        )
    if "locked" in text or "busy" in text:
        return RecallError(
            f"{path} stayed locked by another process for too long ({text}); retry, or raise "
            "busy_timeout in RecallStore.open.",
            code="database",
        )
    if "unable to open" in text or "readonly" in text:
        return RecallError(
            f"SQLite error on {path}: {text}. {_why_not_writable(path)}", code="database"
        )
    return RecallError(f"SQLite error on {path}: {text}", code="database")


def _why_not_writable(path: str) -> str:
    """What to do when SQLite cannot open or write ``path`` (its own message names no cause)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return "That path is a folder: give a file path inside it, such as its recall.db."
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"The folder {folder} is not writable by this process, and SQLite in WAL mode needs "
            f"to create {os.path.basename(path)}-wal and -shm beside the file: open a path in a "
            "writable folder, or make this one writable."
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "The file is not readable and writable by this process: check its permissions."
    return "Check that the path is a file this process can create, read and write."


class PostgresDatabase(Database):
    """A psycopg connection pool in autocommit mode; writes run in an explicit transaction."""

    dialect: Dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        synchronous_commit: str | None = None,
    ) -> None:
        super().__init__()
        # None: the server's own setting. "off": a commit returns once it is in the server's
        # memory (it survives any client process dying, not the server crashing).
        self.synchronous_commit = synchronous_commit
        self.plans = Plans()
        self._combined: dict[tuple[tuple[str, int], ...], str] = {}  # a plan's shape -> its SQL
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RecallError(
                "PostgreSQL needs the postgres extra: pip install 'langgraph-recall[postgres]'",
                code="database",
            ) from exc
        self.target = _redact(dsn)
        self.dsn = dsn
        try:
            # One direct connection first: a wrong DSN or a server that is down fails at once,
            # with the server's own message, instead of after the pool's retry loop.
            psycopg.connect(dsn, connect_timeout=10).close()
            self.pool = ConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=self.configure,
                open=True,
                name="langgraph-recall",
            )
            self.pool.wait(timeout=10.0)
        except Exception as exc:
            raise RecallError(
                f"cannot reach PostgreSQL at {self.target}: {str(exc).strip().splitlines()[0]}. "
                "Check the DSN and that the server is running.",
                code="database",
            ) from exc

    def configure(self, conn: Any) -> None:
        """Session settings of every connection langgraph-recall opens on this database (the
        store's pool and the same-database saver's)."""
        # A process frozen inside one of our transactions (SIGSTOP, a suspended VM, a long GC
        # pause) keeps its row locks: the fencing trigger's share lock on the agent's lease row
        # would make the next holder's takeover wait for as long as the freeze lasts. None of
        # our transactions idles between statements while its process runs, so the server
        # ends such a session after a while; the frozen holder's late commit then fails.
        conn.execute(
            f"SET idle_in_transaction_session_timeout = {int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)}"
        )
        if self.synchronous_commit is not None:
            # Session settings, not the DSN's ``options``: those stay the user's.
            conn.execute(f"SET synchronous_commit = {self.synchronous_commit}")

    @staticmethod
    def has_rows(cur: Any) -> bool:
        # Not ``cur.description``: psycopg builds a Column object per column on every access,
        # about 40 µs for a RETURNING of an action's columns, twice per durable call.
        result = cur.pgresult
        return result is not None and result.status == _TUPLES_OK

    @staticmethod
    def width(cur: Any) -> int:
        result = cur.pgresult
        return result.nfields if result is not None and result.status == _TUPLES_OK else 0

    @property
    def flushes_each_commit(self) -> bool:
        # None: the server's setting, on unless an administrator turned it off.
        return self.synchronous_commit != "off"

    @contextmanager
    def _open(
        self, write: bool, warm: bool, flush_later: bool, learn: Hashable | None
    ) -> Iterator[Tx]:
        import psycopg

        try:
            with self.pool.connection() as conn:
                # One cursor per connection, reused: building a psycopg cursor costs about as
                # much client CPU as running a short statement (~25 µs here).
                cur = conn.__dict__.get("_recall_cursor")
                if cur is None or cur.closed:
                    cur = conn.__dict__["_recall_cursor"] = conn.cursor()
                learned = None
                if learn is not None and not write:
                    plan = self.plans.get(learn)
                    learned = Learned(self._prefetch(cur, plan), plan)
                try:
                    if write:
                        with conn.transaction():
                            yield Tx(self, cur, flush_later=flush_later)
                    else:
                        yield Tx(self, cur, flush_later=flush_later, learned=learned)
                finally:
                    _drop_results(conn, cur)
                if learned is not None:
                    self.plans.put(learn, learned.made)
        except psycopg.errors.IntegrityError:
            raise
        except psycopg.errors.RaiseException:
            raise
        except psycopg.DataError as exc:
            raise RecallError(
                f"PostgreSQL cannot store a value given: {exc}. Remove NUL characters and "
                "out-of-range numbers from ids and keys.",
                code="invalid_value",
            ) from exc
        except psycopg.OperationalError as exc:
            raise RecallError(
                f"PostgreSQL at {self.target} failed: {exc}", code="database"
            ) from exc

    def _prefetch(self, cur: Any, plan: list[Step]) -> dict[Read, list[list[Row]]]:
        """Run ``plan``'s reads as one statement; their rows by read (nothing, on any error)."""
        import psycopg

        if not plan or any(width <= 0 for _, width in plan):
            return {}
        widths = [width for _, width in plan]
        # A read's parameters are there or not by its SQL alone (its placeholders), so the
        # SQL and widths name the statement.
        shape = tuple((sql, width) for (sql, _), width in plan)
        sql = self._combined.get(shape)
        if sql is None:
            # Sent with the other reads' parameters, a read without any must escape its "%".
            sql = combined(
                [(self.sql(s) if ps else self.sql(s).replace("%", "%%"), w) for (s, ps), w in plan]
            )
            if len(self._combined) >= MAX_PLANS:
                self._combined.clear()
            self._combined[shape] = sql
        params = [p for (_, ps), _ in plan for p in ps]
        answers: dict[Read, list[list[Row]]] = {}
        try:
            row = cur.execute(sql, params or None).fetchone()
        except psycopg.Error:
            # A read that cannot run now (a table gone, a type changed): run each on its own,
            # where its error, if it still has one, reaches the caller as usual.
            return {}
        finally:
            _drop_results(cur.connection, cur)
        for (read, _), rows in zip(plan, split(row, widths), strict=True):
            answers.setdefault(read, []).append(rows)
        return answers

    def _let_go(self) -> Any:
        return self.pool

    def close(self) -> None:
        self._closed = True
        self.pool.close()


def _drop_results(conn: Any, cur: Any) -> None:
    """Let go of the last result a reused cursor holds (a 10 MB output read, say), so an idle
    pooled connection does not keep it in memory until its next statement."""
    reset = getattr(cur, "_reset", None)  # what psycopg's execute() itself starts with
    if reset is not None:
        reset()
    else:  # pragma: no cover - another psycopg: drop the cursor instead
        cur.close()
        conn.__dict__.pop("_recall_cursor", None)


def _redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    if "@" in dsn and "://" in dsn:
        scheme, rest = dsn.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}@{host}"
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


def is_postgres_target(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://")) or (
        "=" in target and ("host=" in target or "dbname=" in target)
    )


def check_scheme(target: str) -> None:
    """Refuse a URL for an engine this store does not run on (it was taken for a file path)."""
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", target)
    if m and not is_postgres_target(target) and not target.startswith("sqlite:///"):
        raise RecallError(
            f"{m.group(1)}:// databases are not supported: give a SQLite file path (or "
            "sqlite:///path) or a postgresql:// DSN",
            code="invalid_value",
        )


def sqlite_path(target: str | os.PathLike[str]) -> str:
    text = os.fspath(target)
    return text[len("sqlite:///") :] if text.startswith("sqlite:///") else text
