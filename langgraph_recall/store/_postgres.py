"""The PostgreSQL driver: a psycopg pool in autocommit mode, explicit transactions for writes,
and the learned read plans of ``_prefetch`` sent in one round trip."""

from __future__ import annotations

import functools
import select
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import RecallError
from ._db import Database, Row, Tx, _cause, _redact, _scrub, postgres_extra_missing
from ._dberrors import postgres_error
from ._prefetch import MAX_PLANS, Learned, Plans, Read, Step, combined, split
from ._schema import Dialect

# PostgreSQL: seconds a session of ours may sit inside a transaction without a statement
# before the server ends it (see PostgresDatabase.configure).
IDLE_IN_TRANSACTION_TIMEOUT = 10.0

_TUPLES_OK = 2  # libpq's PGRES_TUPLES_OK (psycopg.pq.ExecStatus.TUPLES_OK), without importing it


class PostgresDatabase(Database):
    """A psycopg connection pool in autocommit mode; writes run in an explicit transaction."""

    dialect: Dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
        synchronous_commit: str | None = None,
    ) -> None:
        super().__init__()
        # Seconds a call waits for a pooled connection (the server restarting, unreachable).
        self.timeout = timeout
        # None: the server's own setting. "off": a commit returns once it is in the server's
        # memory (it survives any client process dying, not the server crashing).
        self.synchronous_commit = synchronous_commit
        self.plans = Plans()
        self._combined: dict[tuple[tuple[str, int], ...], str] = {}  # a plan's shape -> its SQL
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise postgres_extra_missing() from exc
        self.target = _redact(dsn)
        self.dsn = dsn
        try:
            # One direct connection first: a wrong DSN or a server that is down fails at once,
            # with the server's own message, instead of after the pool's retry loop.
            psycopg.connect(dsn, connect_timeout=10).close()
            self.pool = fresh_pool()(
                dsn,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=self.configure,
                timeout=timeout,
                # A pool that lost its server retries with a growing delay for this long, then
                # starts again on demand: the first call after the server is back then waits
                # for that delay (bounded by the timeout), not for minutes.
                reconnect_timeout=timeout,
                open=True,
                name="langgraph-recall",
            )
            self.pool.wait(timeout=10.0)
        except Exception as exc:
            err = RecallError(
                f"cannot reach PostgreSQL at {self.target}: "
                f"{_scrub(str(exc).strip().splitlines()[0], dsn)}. "
                "Check the DSN and that the server is running.",
                code="database",
            )
            raise err from _cause(exc, dsn)

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
        except psycopg.Error as exc:
            # Every driver error but a constraint's or a trigger's refusal leaves as a
            # RecallError; the pool has dropped a connection whose session ended.
            err = postgres_error(exc, self.target, self.dsn)
            if err is None:
                raise
            raise err from err.__cause__

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


@functools.cache
def fresh_pool() -> type[Any]:
    """psycopg's ``ConnectionPool``, whose checkout never lends a connection the server ended.

    A pooled connection idles between our transactions; when the server ends its session
    (``pg_terminate_backend``, a restart, ``idle_session_timeout``) nothing tells the pool,
    and the next transaction on it failed, then the next on the following idle one: after a
    server restart each pooled connection failed one call of the process. The server says
    goodbye before it closes (an error message, then end of file), so an idle connection
    with something to read has been ended: checked at checkout with a zero-timeout poll of
    its socket, a system call, not a round trip (psycopg_pool's own ``check`` is a query,
    and a failed one sleeps a second before the next try). Such a connection is closed and
    given back (the pool replaces it), and another is taken. The store's pool and the
    same-database saver's are both this class. Made once, on first use: psycopg is optional.
    """
    from psycopg_pool import ConnectionPool

    class FreshPool(ConnectionPool):
        def getconn(self, timeout: float | None = None) -> Any:
            for _ in range(self.max_size):
                conn = super().getconn(timeout)
                if not ended_by_server(conn):
                    return conn
                conn.close()
                self.putconn(conn)
            return super().getconn(timeout)

    return FreshPool


def ended_by_server(conn: Any) -> bool:
    """Whether an idle connection's session was ended by the server (see ``fresh_pool``)."""
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed already
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - Windows


def _drop_results(conn: Any, cur: Any) -> None:
    """Let go of the last result a reused cursor holds (a 10 MB output read, say), so an idle
    pooled connection does not keep it in memory until its next statement."""
    reset = getattr(cur, "_reset", None)  # what psycopg's execute() itself starts with
    if reset is not None:
        reset()
    else:  # pragma: no cover - another psycopg: drop the cursor instead
        cur.close()
        conn.__dict__.pop("_recall_cursor", None)
