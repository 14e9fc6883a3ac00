"""What both engines' drivers share: the transaction (``Tx``), the ``Database`` base (nesting,
migrations, statement dialect) and the parsing of a store's target. The drivers themselves
are ``_sqlite`` and ``_postgres``.

Everything above this module writes SQL once, with ``?`` placeholders (``{b}`` for one sent in
binary on PostgreSQL) and a ``{now}`` token for the database clock; ``Database.sql`` renders it
for the engine. The async API runs these sync drivers in a worker thread (see
``StoreBase._run``), so each piece of logic exists once.
"""

from __future__ import annotations

import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .._errors import RecallError, RecordsMissing
from .._process import Birth
from ._due import DueEnds
from ._finished import FinishedActions
from ._prefetch import Learned
from ._schema import MIGRATIONS, SCHEMA_VERSION, TABLES, Dialect, render

if TYPE_CHECKING:
    from ._sqlite import _SqliteTx

Row = tuple[Any, ...]

# What a forked child let go of (``Database.abandon``): kept, so that nothing closes it before
# the child exits. Even then it is harmless: psycopg does not end a session from a process
# that did not open it, and SQLite cannot checkpoint or delete the log while the parent still
# has the file open.
_ABANDONED: list[Any] = []

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
        table grows (``_transcript.record``'s read of the ids already recorded).
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
        sleeps milliseconds between tries (see ``ActionsAPI._lease_write``)."""
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
        found = self._schema_version()
        if found == SCHEMA_VERSION:
            self._check_tables()
            return SCHEMA_VERSION
        try:
            return self._upgrade()
        except RecallError as err:
            # A driver's error is mapped where it leaves the transaction; PostgreSQL's is said
            # as below. (SQLite's, a lock or a file it cannot write, already says what to do.)
            if err.code != "database" or self.dialect != "postgres":
                raise
            raise self._cannot_upgrade(found, err.__cause__ or err) from err.__cause__
        except Exception as exc:
            raise self._cannot_upgrade(found, exc) from exc

    def _cannot_upgrade(self, found: int | None, exc: BaseException) -> RecallError:
        # The DDL of one transaction, rolled back whole: nothing changed. On PostgreSQL the
        # usual cause is a role that uses the tables without owning them (creating a
        # trigger, an index or a table takes the owner): say so, not psycopg's bare
        # "permission denied" from inside open().
        what = (
            "create the langgraph-recall schema in"
            if found is None
            else f"upgrade the langgraph-recall schema from v{found} to v{SCHEMA_VERSION} in"
        )
        return RecallError(
            f"cannot {what} {self.target}: {str(exc).strip().splitlines()[0]}. Nothing was "
            "changed. Open it once as the owner of its tables (on PostgreSQL, the role that "
            "created them, or one with CREATE on the schema for a new store); after that, "
            "every role granted their use can open it.",
            code="database",
            found=found,
            supported=SCHEMA_VERSION,
        )

    def _upgrade(self) -> int:
        with self.tx(write=True) as tx:
            if self.dialect == "postgres":
                # Several workers may open a fresh database at once: serialise the DDL.
                tx.run("SELECT pg_advisory_xact_lock(7260031122)")
            self._refuse_if_meta_lost(tx)
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
            present = set(self._present(tx, TABLES))
        missing = [t for t in TABLES if t not in present]
        if missing:
            raise RecordsMissing(
                f"{self.target} holds langgraph-recall's schema v{SCHEMA_VERSION} but not its "
                f"tables {', '.join(missing)}: they were dropped, or the database was restored "
                "only in part. Nothing was written. Restore the database from a backup.",
                path=self.target,
                missing=missing,
            )

    def _refuse_if_meta_lost(self, tx: Tx) -> None:
        """Refuse a database whose ``recall_meta`` is gone while other recall tables remain (a
        table dropped by hand, a partial restore): creating it afresh would take the records
        for a new store, re-run every migration over them and give them a new store id."""
        if self._present(tx, ("recall_meta",)):
            return
        found = self._present(tx, TABLES)
        if found:
            raise RecordsMissing(
                f"{self.target} holds langgraph-recall's tables {', '.join(found)} but not "
                "recall_meta, which says which store and schema version they are: it was "
                "dropped, or the database was restored only in part. Nothing was written. "
                "Restore the database from a backup.",
                path=self.target,
                missing=["recall_meta"],
            )

    def _present(self, tx: Tx, tables: Sequence[str]) -> list[str]:
        """Which of ``tables`` exist (PostgreSQL: on the search path), in the order given."""
        if self.dialect == "sqlite":
            present = {r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return [t for t in tables if t in present]
        return [
            r[0]
            for r in tx.all(
                "SELECT t FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS u(t, n) "
                "WHERE to_regclass(t) IS NOT NULL ORDER BY n",
                (list(tables),),
            )
        ]

    def _create_meta(self, tx: Tx) -> None:
        tx.run(
            "CREATE TABLE IF NOT EXISTS recall_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL)"
        )


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


# A DSN's password as libpq reads it, for _redact and _dsn_passwords alike: a keyword DSN's
# ``password=`` (a quoted value may hold \', libpq's escape, which does not end it), and a
# URL's query parameter.
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)(?:'((?:[^'\\]|\\.)*)'|(\S+))")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)([^&#]*)")


def _redact(dsn: str) -> str:
    """The DSN without its password, for messages, ``repr`` and the CLI: a URL's userinfo
    password is dropped and a ``password=`` query parameter (libpq takes one there too) shown
    as ``***``; in a keyword DSN, ``password=`` is shown as ``***``."""
    if "://" not in dsn:
        return _KEYWORD_PASSWORD.sub(r"\1***", dsn)
    # The query first: a password there may hold an "@" that looks like the userinfo's end.
    dsn = _QUERY_PASSWORD.sub(r"\1***", dsn)
    if "@" not in dsn:
        return dsn
    # Up to the last "@": a password typed with "@", "/" or "?" unescaped is dropped whole.
    scheme, rest = dsn.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}@{host}"


def _dsn_passwords(dsn: str) -> set[str]:
    """The passwords written in ``dsn`` (as written, and percent-decoded)."""
    found: list[str] = []
    if "://" in dsn:
        found += [m.group(2) for m in _QUERY_PASSWORD.finditer(dsn)]
        rest = _QUERY_PASSWORD.sub(r"\1", dsn.split("://", 1)[1])
        if "@" in rest:
            creds = rest.rsplit("@", 1)[0]
            if ":" in creds:
                found.append(creds.split(":", 1)[1])
    else:
        for m in _KEYWORD_PASSWORD.finditer(dsn):
            quoted = m.group(2)
            found.append(re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else m.group(3))
    return {p for raw in found if raw for p in (raw, unquote(raw)) if p}


def _scrub(message: str, dsn: str) -> str:
    """A driver's message about ``dsn`` without the DSN's password: libpq quotes back a token
    it cannot parse, such as a password holding a raw "%" ('invalid percent-encoded token:
    "hunter%zz2"'), and ``_redact`` only covers the DSN we print ourselves."""
    passwords = _dsn_passwords(dsn)
    if not passwords:
        return message

    def quoted(m: re.Match[str]) -> str:
        return '"***"' if any(p in m.group(1) for p in passwords) else m.group(0)

    message = re.sub(r'"([^"]*)"', quoted, message)
    for p in sorted(passwords, key=len, reverse=True):
        if len(p) >= 4:  # a shorter one would blank out ordinary words of the message
            message = message.replace(p, "***")
    return message


def _cause(exc: BaseException, dsn: str) -> BaseException | None:
    """What a RecallError about ``dsn`` is raised from: the driver's error, unless its own
    message holds the DSN's password (a logged traceback prints the cause whole), then None."""
    return exc if _scrub(str(exc), dsn) == str(exc) else None


def postgres_extra_missing() -> RecallError:
    """Raised (from the ImportError) where psycopg is first needed."""
    return RecallError(
        "PostgreSQL needs the postgres extra: pip install 'langgraph-recall[postgres]'",
        code="database",
    )


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
