"""LangGraph's own saver on the store's database, with the fencing trigger installed.

``same_database_saver(store)`` returns a ``SqliteSaver`` (on the store's own writers'
connection, see ``SqliteDatabase``) or a ``PostgresSaver`` (its own small psycopg pool on the
store's DSN, so the same schema). Because ``checkpoints`` and ``recall_leases`` then share one
database, the trigger in ``_fence`` refuses a stale holder's write inside the write's own
transaction: this is what makes ``store.checkpointer()`` exact. A PostgreSQL saver's pool
belongs to it; close it with ``close_same_database_saver`` (``RecallCheckpointer.close()``
does).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import RecallError
from ..store._db import postgres_extra_missing
from ..store._postgres import fresh_pool
from ..store._wal import CountingLock
from ._fence import PG_FENCE_LOCK, install_pg_fence, install_sqlite_fence

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

    from ..store import RecallStore

# Savers built here -> how to close their connections. Weak, so a dropped saver is forgotten.
_OWNED: weakref.WeakKeyDictionary[Any, Callable[[], None]] = weakref.WeakKeyDictionary()


class Rider(Protocol):
    """Statements that commit in the same transaction as one checkpoint (``put_with``)."""

    def send(self, cur: Any) -> None:
        """Run the statements on the saver's cursor, after the checkpoint's own."""


class _Riding(threading.local):
    rider: Rider | None = None


_RIDING = _Riding()


@contextmanager
def _riding(rider: Rider) -> Iterator[None]:
    _RIDING.rider = rider
    try:
        yield
    finally:
        _RIDING.rider = None


def put_with(
    saver: Any, rider: Rider, config: Any, checkpoint: Any, metadata: Any, new_versions: Any
) -> Any:
    """``saver.put(...)`` (a saver built here) with ``rider``'s statements in its transaction:
    both commit, or neither does (a fenced-out checkpoint takes the rider's rows with it)."""
    with _riding(rider):
        return saver.put(config, checkpoint, metadata, new_versions)


def put_writes_with(
    saver: Any, rider: Rider, config: Any, writes: Any, task_id: str, task_path: str
) -> None:
    """``saver.put_writes(...)`` with ``rider``'s statements in its transaction (as above)."""
    with _riding(rider):
        saver.put_writes(config, writes, task_id, task_path)


def can_carry(saver: Any) -> bool:
    """Whether ``saver`` takes riders (``put_with``): the savers built here do."""
    return isinstance(saver, (_store_sqlite_saver(), _store_postgres_saver()))


def _take_rider() -> Rider | None:
    rider, _RIDING.rider = _RIDING.rider, None
    return rider


def same_database_saver(store: RecallStore) -> BaseCheckpointSaver:
    """A LangGraph saver on ``store``'s database, set up, with the fencing trigger installed.

    Raises:
        RecallError: ``database`` when the saver's tables or the trigger cannot be created.
    """
    db: Any = store._db
    if db.dialect == "sqlite":
        return _sqlite_saver(db)
    return _postgres_saver(db.dsn, db.configure, db.timeout)


def is_fenced(saver: Any) -> bool:
    """Whether ``saver`` was built by ``same_database_saver`` (its writes are fenced exactly)."""
    try:
        return saver in _OWNED
    except TypeError:  # unhashable saver: not ours
        return False


def close_same_database_saver(saver: Any) -> bool:
    """Close the connections of a saver built here (nothing for any other saver); whether it
    was one."""
    try:
        closer = _OWNED.pop(saver, None)
    except TypeError:
        closer = None
    if closer is not None:
        closer()
    return closer is not None


def forget_same_database_saver(saver: Any) -> None:
    """Forget a saver built here without closing it (a forked child's copy: its connections
    are the parent's)."""
    try:
        _OWNED.pop(saver, None)
    except TypeError:
        pass


@functools.cache
def _store_sqlite_saver() -> type[Any]:
    """The class, made once (a class per saver would defeat the wrapper's per-class cache)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    class StoreSqliteSaver(SqliteSaver):
        """``SqliteSaver`` on the store's writers' connection; its listings read elsewhere."""

        db: Any  # the store's SqliteDatabase

        def cursor(self, transaction: bool = True) -> Any:
            # Called for every read and write the saver makes: without a rider, SqliteSaver's
            # own context manager as it is (no second layer of generator around it).
            if _RIDING.rider is None or not transaction:
                return SqliteSaver.cursor(self, transaction)
            return self._carrying(_take_rider())

        @contextmanager
        def _carrying(self, rider: Any) -> Iterator[sqlite3.Cursor]:
            # SqliteSaver's own cursor commits in its ``finally``, even when the statement
            # failed (a fence trigger's abort ends the statement, not the transaction): the
            # rider's rows would land without their checkpoint. Here a failure rolls back both.
            with self.lock:
                cur = self.conn.cursor()
                try:
                    yield cur
                    rider.send(cur)
                except BaseException:
                    if self.conn.in_transaction:
                        self.conn.rollback()
                    raise
                else:
                    self.conn.commit()
                finally:
                    cur.close()

        def list(
            self,
            config: Any,
            *,
            filter: dict[str, Any] | None = None,
            before: Any = None,
            limit: int | None = None,
        ) -> Iterator[CheckpointTuple]:
            # SqliteSaver holds its lock while a listing is open, and here that lock is the
            # store's write lock: a history left half-read (``next(get_state_history(...))``
            # kept in a variable) stalled every other thread's writes, the lease renewal
            # included. A listing reads on a pooled connection instead, through a saver of its
            # own (so its own lock), and gives the connection back when it ends or is closed.
            conn = self.db._checkout()
            try:
                reader = SqliteSaver(conn, serde=self.serde)
                reader.is_setup = True  # the tables exist: set up on the writers' connection
                reader._has_task_path = self._has_task_path
                yield from reader.list(config, filter=filter, before=before, limit=limit)
            finally:
                self.db._checkin(conn)

    return StoreSqliteSaver


def _sqlite_saver(db: Any) -> BaseCheckpointSaver:
    # The saver writes on the store's writers' connection, under the store's write lock (see
    # ``SqliteDatabase``): one writer at a time in this process, saver and store alike, and the
    # pages one of them just wrote still cached for the other. SqliteSaver holds its lock
    # around every use of its connection, reads included, which is what sharing it needs
    # (its listings excepted: they read on a pooled connection, see ``StoreSqliteSaver``).
    # Re-entrant, so a store call made while the saver holds it (or the reverse, on one
    # thread) cannot deadlock. Its commits count towards the store's background WAL
    # checkpoints (``_wal``). The connection stays the store's: ``store.close()`` closes it.
    lock = CountingLock(db.write_lock, db.wal.committed)
    with lock:
        conn = db.writer()
        try:
            saver = _store_sqlite_saver()(conn)
            saver.db = db
            saver.setup()
            install_sqlite_fence(conn)
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.rollback()
            raise RecallError(
                f"cannot prepare LangGraph's checkpoint tables in {db.path}: {exc}",
                code="database",
            ) from exc
    saver.lock = lock  # type: ignore[assignment]
    _OWNED[saver] = _nothing_to_close
    return saver


def _nothing_to_close() -> None:
    """A SQLite saver's connection is the store's: closed with the store."""


def _pg_ready(conn: Any, migrations: int) -> bool:
    """Tables at the saver's latest migration and the fence trigger present: nothing to do."""
    row = conn.execute(
        "SELECT to_regclass('checkpoint_migrations') IS NOT NULL AS has_table, "
        "EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'recall_fence_checkpoints' "
        "AND tgrelid = to_regclass('checkpoints')) AS fenced"
    ).fetchone()
    if not (row["has_table"] and row["fenced"]):
        return False
    top = conn.execute("SELECT max(v) AS v FROM checkpoint_migrations").fetchone()
    return top["v"] is not None and top["v"] >= migrations - 1


def _pg_setup_once(conn: Any, saver: Any) -> None:
    """Run PostgresSaver.setup() and install the fence, one process at a time.

    Two processes setting up a fresh database at once both insert the same migration version.
    The lock is taken by polling, never by waiting inside a statement: setup() runs CREATE INDEX
    CONCURRENTLY, which waits for every open transaction, including another process's
    statement blocked on the lock, and that would be a deadlock nobody detects.
    """
    while not conn.execute(f"SELECT pg_try_advisory_lock({PG_FENCE_LOCK}) AS ok").fetchone()["ok"]:
        time.sleep(0.05)
    try:
        saver.setup()
        install_pg_fence(conn)
    finally:
        conn.execute(f"SELECT pg_advisory_unlock({PG_FENCE_LOCK})")


@functools.cache
def _store_postgres_saver() -> type[Any]:
    """``PostgresSaver`` whose checkpoint writes can carry riders (made once, see above)."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:  # pragma: no cover - depends on the install
        return type("NoPostgresSaver", (), {})

    class StorePostgresSaver(PostgresSaver):
        def _cursor(self, *, pipeline: bool = False) -> Any:
            if _RIDING.rider is None or not pipeline:
                return PostgresSaver._cursor(self, pipeline=pipeline)
            return self._carrying(_take_rider())

        @contextmanager
        def _carrying(self, rider: Any) -> Iterator[Any]:
            with PostgresSaver._cursor(self, pipeline=True) as cur:
                yield cur
                # Queued in the same pipeline, before its one Sync: PostgreSQL runs every
                # statement up to a Sync as one implicit transaction, so the rider commits with
                # the checkpoint, and an error in either skips the rest.
                rider.send(cur)

    return StorePostgresSaver


def _postgres_saver(
    dsn: str, configure: Callable[[Any], None], timeout: float
) -> BaseCheckpointSaver:
    try:
        from psycopg.rows import dict_row
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise postgres_extra_missing() from exc
    # PostgresSaver holds its own lock around every cursor, so two connections are plenty: the
    # pool is here to replace a broken connection, not for parallelism.
    # The store's pool class: a connection the server ended is replaced at checkout.
    pool: Any = fresh_pool()(
        dsn,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        configure=configure,  # the store's session settings (its durability)
        timeout=timeout,  # the store's wait for a connection, and its reconnecting
        reconnect_timeout=timeout,
        open=True,
        name="langgraph-recall-checkpoints",
    )
    try:
        saver = _store_postgres_saver()(pool)
        with pool.connection() as conn:
            if not _pg_ready(conn, len(saver.MIGRATIONS)):
                _pg_setup_once(conn, saver)
    except Exception as exc:
        pool.close()
        raise RecallError(
            f"cannot prepare LangGraph's checkpoint tables on PostgreSQL: {exc}", code="database"
        ) from exc
    _OWNED[saver] = pool.close
    return saver
