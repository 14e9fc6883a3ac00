"""RecallStore: a full LangGraph ``BaseStore`` plus the agent's typed records.

Sync methods talk to the database directly; every ``a``-prefixed twin runs the same sync method
in a worker thread. That keeps each piece of logic in one place, never blocks the event loop,
and works the same from a script, a thread pool, ``ainvoke`` and a Jupyter cell (whose sync
calls happen while a loop is running, which LangGraph's own async stores refuse).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_core.messages import BaseMessage
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
)

from .._errors import InvalidNamespace, RecallError
from .._process import not_picklable
from . import _actions, _items, _records
from ._db import (
    Database,
    PostgresDatabase,
    SqliteDatabase,
    Tx,
    check_scheme,
    is_postgres_target,
    sqlite_path,
)
from ._models import Action, AgentInfo, Approval, Claim, Lease, Pointer, Turn, TurnView, UndoReport
from ._secret import postgres_secret, postgres_secret_given, refuse_if_deleted, sqlite_secret

log = logging.getLogger("langgraph_recall")

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from .._briefing import Briefing
    from ..checkpoint import RecallCheckpointer

T = TypeVar("T")

ENV_DB = "LANGGRAPH_RECALL_DB"
DEFAULT_DB = "./recall.db"
DEFAULT_OUTPUT_THRESHOLD = 8 * 1024


def default_target() -> str:
    return os.environ.get(ENV_DB) or DEFAULT_DB


class RecallStore(BaseStore):
    """A LangGraph store that also keeps each agent's records: turns, working state, pointers,
    outputs, actions, approvals and leases, on SQLite (default) or PostgreSQL.

    Open it with ``RecallStore.open(path_or_dsn)``; pass it to ``compile(store=...)``.

    ``batch`` applies its operations **in the order given**, in one transaction (LangGraph's
    SQL stores group them by type instead, so a get after a put in the same batch sees the old
    value there; here it sees the new one). A ``query`` without an embedding index is a
    full-text search (SQLite FTS5 ranked by BM25, PostgreSQL ``ts_rank_cd``) where any word
    matches. Expired items (TTL) are never returned, swept or not.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        db: Database,
        *,
        secret: bytes,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        output_threshold: int = DEFAULT_OUTPUT_THRESHOLD,
    ) -> None:
        self._db = db
        self._secret = secret
        self.index_config = index
        self._embeddings = ensure_embeddings(index["embed"]) if index else None
        self.ttl_config = ttl
        self.output_threshold = output_threshold
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._closed = False
        # Opened on ":memory:": removes the store's temporary folder (see ``open``).
        self._scratch: weakref.finalize[Any, Any] | None = None
        # Tool undo functions registered by DurableToolNode / RecallMiddleware (name -> fn).
        self._undo_registry: dict[str, Callable[..., Any]] = {}
        # RecallCheckpointers on this store: close() closes them first (their leases and
        # pending turns need the store; on PostgreSQL store.checkpointer()'s saver has a pool
        # of its own, on SQLite it writes on the store's connection).
        self._checkpointers: weakref.WeakSet[Any] = weakref.WeakSet()
        if ttl and ttl.get("sweep_interval_minutes"):
            self.start_ttl_sweeper()

    # --- opening and closing ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | None = None,
        *,
        secret: str | bytes | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        output_threshold: int = DEFAULT_OUTPUT_THRESHOLD,
        durability: str | None = None,
        busy_timeout: float = 30.0,
        pool_size: int = 8,
    ) -> RecallStore:
        """Open (creating on first use) the store at a SQLite path or a ``postgresql://`` DSN.

        Args:
            target: a file path (default ``./recall.db`` or ``$LANGGRAPH_RECALL_DB``), a DSN,
                or ``":memory:"``: a store for one process (a notebook, a test) whose file
                lives in a temporary folder, removed when the store closes.
            secret: signing secret for approvals; required on PostgreSQL (or
                ``$LANGGRAPH_RECALL_SECRET``); on SQLite a 0600 file beside the database.
            index: an embedding index config, as LangGraph's stores take, for vector search.
            ttl: a ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
                ``sweep_interval_minutes``).
            output_threshold: turns and results longer than this many characters are stored
                whole as outputs and referenced by id from the briefing.
            durability: what a commit of langgraph-recall's (records, leases, and the
                checkpoints of ``store.checkpointer()``) survives once it returns.
                ``"process"``: any process of the application being killed. SQLite: WAL with
                synchronous=NORMAL, the last commits may be lost if the machine loses power.
                PostgreSQL: ``synchronous_commit=off`` on langgraph-recall's connections, the
                last ~0.6 s of commits may be lost if the database server crashes.
                ``"power"``: also power loss (SQLite synchronous=FULL; PostgreSQL
                ``synchronous_commit=on``), at the cost of a disk flush per commit. Under
                ``store.checkpointer()`` a durable call's intent and (for a lone call) its end
                commit inside the saver's own writes, and any other end relies on the task's
                write that follows it for its flush: see the README's "Durability".
                Default: ``"process"`` on SQLite (the file lives with the one machine whose
                processes it guards); on PostgreSQL the server's own ``synchronous_commit``
                (normally on), because a shared server is what several machines rely on.
            busy_timeout: seconds a SQLite write waits for another process's lock (default 30).
            pool_size: the largest PostgreSQL connection pool (default 8).

        Raises:
            RecallError: ``records_missing`` if a SQLite database was deleted or swapped while
                its secret file remained; ``schema_too_new``; ``secret_missing``; ``database``.
        """
        text = os.fspath(target) if target is not None else default_target()
        db: Database
        scratch: str | None = None  # ":memory:": the temporary folder of the store's file
        if durability not in (None, "process", "power"):
            raise RecallError(
                f"durability must be 'process' or 'power', got {durability!r}",
                code="invalid_value",
            )
        check_scheme(text)
        if secret is not None and not isinstance(secret, (str, bytes)):
            raise RecallError(
                f"secret= is the approvals' signing secret as str or bytes (the same in every "
                f"worker), got {type(secret).__name__}; or leave it out and set "
                "LANGGRAPH_RECALL_SECRET",
                code="invalid_value",
            )
        if is_postgres_target(text):
            postgres_secret_given(secret)
            db = PostgresDatabase(
                text,
                max_size=pool_size,
                synchronous_commit={None: None, "process": "off", "power": "on"}[durability],
            )
            try:
                db.migrate()
                key = postgres_secret(db, secret)
            except BaseException:
                db.close()
                raise
        else:
            path = sqlite_path(text)
            if not path.strip():
                raise RecallError(
                    "RecallStore.open() got an empty path: pass a SQLite file path (such as "
                    "'./recall.db'), a postgresql:// DSN, or ':memory:' for a store that is "
                    "thrown away when closed",
                    code="invalid_value",
                )
            if path == ":memory:":
                # SQLite's own ":memory:" is one database per connection, and the store reads on
                # several: a file in a folder of its own, removed when the store closes, instead.
                scratch = tempfile.mkdtemp(prefix="langgraph-recall-")
                path = os.path.join(scratch, "recall.db")
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise RecallError(
                    f"cannot create {path}: the folder {parent} does not exist", code="database"
                )
            refuse_if_deleted(path)
            existed = os.path.exists(path) and os.path.getsize(path) > 0
            db = SqliteDatabase(
                path,
                synchronous="FULL" if durability == "power" else "NORMAL",
                busy_timeout=busy_timeout,
            )
            try:
                db.migrate()
                key = (
                    secret
                    if isinstance(secret, bytes)
                    else secret.encode()
                    if secret
                    else sqlite_secret(db, path, existed)
                )
            except BaseException:
                db.close()
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)
                raise
        store = cls(db, secret=key, index=index, ttl=ttl, output_threshold=output_threshold)
        if scratch is not None:
            # On close, or when the store is dropped unclosed, or at exit.
            store._scratch = weakref.finalize(store, _remove_scratch, scratch, os.getpid())
        return store

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""
        return self._db.dialect

    @property
    def target(self) -> str:
        """The path or (password-free) DSN this store was opened on."""
        return self._db.target

    def close(self) -> None:
        """Close the checkpointers on this store (releasing their leases and writing their
        pending turns), stop the TTL sweeper and close every connection, the same-database
        saver's included. Safe to call twice."""
        if self._closed:
            return
        if self._db.birth.forked():
            # A forked child's copy: its connections, leases and temporary folder are the
            # parent's, still in use there. Let go of them untouched.
            self._closed = True
            self._db.abandon()
            if self._scratch is not None:
                self._scratch.detach()
            return
        for checkpointer in list(self._checkpointers):
            try:
                checkpointer.close()
            except Exception as exc:  # keep closing: the connections must not leak
                log.warning("closing a checkpointer of this store failed: %s", exc)
        if self._db.due:  # ends of finished calls still riding (``_due``): written now
            self._db.due.land(self._db)
        self._closed = True
        self.stop_ttl_sweeper()
        self._db.close()
        self._db.finished.clear()
        if self._scratch is not None:  # opened on ":memory:": its folder goes with it
            self._scratch()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> RecallStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __copy__(self) -> RecallStore:
        # A handle on one database: a copy would share its connections, and close them.
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise not_picklable("RecallStore")

    async def __aenter__(self) -> RecallStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"RecallStore({self.target!r})"

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # --- BaseStore -------------------------------------------------------------------------

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | None | NotProvided = NOT_PROVIDED,
    ) -> None:
        """BaseStore's ``put``; a namespace it cannot take raises ``InvalidNamespace``."""
        # BaseStore.put checks the namespace first with LangGraph's own error, which is not a
        # RecallError; ours is both, so either ``except`` catches it.
        _validate_namespace(namespace)
        super().put(namespace, key, value, index, ttl=ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | None | NotProvided = NOT_PROVIDED,
    ) -> None:
        """Async ``put``."""
        _validate_namespace(namespace)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Apply ``ops`` in the order given, in one transaction."""
        ops = list(ops)
        for op in ops:
            _validate_op(op)
        vectors = self._embed_puts(ops)
        refresh_default = bool((self.ttl_config or {}).get("refresh_on_read", True))
        body_fields = list(self.index_config.get("fields") or []) if self.index_config else None
        if body_fields == ["$"]:
            body_fields = None
        write = any(isinstance(op, PutOp) for op in ops)
        results: list[Result] = []
        with self._db.tx(write=write) as tx:
            for i, op in enumerate(ops):
                if isinstance(op, GetOp):
                    results.append(_items.get(tx, op, refresh_default))
                elif isinstance(op, PutOp):
                    _items.put(tx, op, body_fields=body_fields, vectors=vectors.get(i))
                    results.append(None)
                elif isinstance(op, SearchOp):
                    results.append(self._search(tx, op, refresh_default))
                elif isinstance(op, ListNamespacesOp):
                    results.append(_items.list_namespaces(tx, op))
                else:
                    raise RecallError(f"unknown store operation {op!r}", code="invalid_value")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of ``batch`` (same semantics; runs in a worker thread)."""
        return await self._run(self.batch, list(ops))

    def _search(self, tx: Any, op: SearchOp, refresh_default: bool) -> Any:
        if op.query and self._embeddings is not None:
            vec = self._embeddings.embed_query(op.query)
            return _items.search_vector(tx, op, vec, refresh_default)
        if op.query:
            return _items.search_text(tx, op, refresh_default)
        return _items.search_plain(tx, op, refresh_default)

    def _embed_puts(self, ops: Sequence[Op]) -> dict[int, list[tuple[str, list[float]]]]:
        """Embed texts for indexed puts before the transaction (a slow call holds no lock)."""
        if self._embeddings is None:
            return {}
        todo: list[tuple[int, str, str]] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp) and op.value is not None and isinstance(op.value, dict):
                for field, text in _items.index_texts(op.value, op.index, self.index_config):
                    todo.append((i, field, text))
        out: dict[int, list[tuple[str, list[float]]]] = {
            i: [] for i, op in enumerate(ops) if isinstance(op, PutOp) and op.value is not None
        }
        if todo:
            vecs = self._embeddings.embed_documents([t for _, _, t in todo])
            for (i, field, _), vec in zip(todo, vecs, strict=False):
                out[i].append((field, list(vec)))
        return out

    # --- TTL -------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete expired items now; returns how many. (Expired items are never returned anyway.)"""
        with self._db.tx(write=True) as tx:
            return _items.sweep(tx)

    async def asweep_ttl(self) -> int:
        return await self._run(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items in a background thread every ``sweep_interval_minutes``."""
        if self._sweeper is not None:
            return
        minutes = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(float(minutes) * 60.0):
                try:
                    self.sweep_ttl()
                except Exception:  # the next round tries again; reads filter expiry anyway
                    pass

        self._sweeper = threading.Thread(target=loop, name="recall-ttl-sweeper", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it has stopped."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def _switch_thread(self, agent_id: str, thread_id: str) -> str | None:
        """Note the agent's current thread at a run's start; the thread noted before, if other.

        PostgreSQL: one autocommitted statement (one round trip, not three); SQLite: one write
        transaction.
        """
        with self._db.tx(write=self._db.dialect == "sqlite") as tx:
            return _records.switch_thread(tx, agent_id, thread_id)

    def _remember_turn(self, agent_id: str, turn_id: str, thread_id: str) -> None:
        """Note a submitted ``configurable["turn_id"]`` (the checkpointer's, under the lease)."""
        with self._db.tx(write=True) as tx:
            _records.remember_turn(tx, agent_id, turn_id, thread_id)

    # --- turns -----------------------------------------------------------------------------

    def record(
        self, agent_id: str, messages: Sequence[BaseMessage], *, thread_id: str | None = None
    ) -> int:
        """Append each message not yet recorded for ``agent_id`` (by message id), in order.

        A message without an id gets a stable one derived from its content and how many
        messages of the same content come before it in this call, so recording the whole
        conversation again records nothing new. Recorded a call at a time, an id-less message
        whose text an earlier call already recorded (the user says "yes" twice) counts as that
        one: give such messages ids (LangGraph's ``add_messages`` gives every message in a
        graph's state one). Returns how many were new.
        """
        return self._record(agent_id, _message_list(messages), thread_id, None)

    def _end_run(
        self,
        agent_id: str,
        holder: str,
        epoch: int,
        messages: Sequence[BaseMessage],
        *,
        thread_id: str | None,
    ) -> bool:
        """A run's final write: give its lease up and record its last messages, in one
        transaction (one statement on PostgreSQL) instead of two. Records nothing, and returns
        False, if the lease is no longer ``holder``'s at ``epoch``: the holder that took it
        over records them from the checkpoints, before its own."""
        if not messages:
            return self.release_lease(agent_id, holder, epoch)
        return self._record(agent_id, list(messages), thread_id, (holder, epoch)) >= 0

    def _record(
        self,
        agent_id: str,
        messages: list[BaseMessage],
        thread_id: str | None,
        release: tuple[str, int] | None,
    ) -> int:
        """``record``, and with ``release=(holder, epoch)`` also that lease given up first;
        -1 (nothing written) when the lease was not the holder's any more."""
        if self._db.dialect == "postgres" and len(messages) <= _records.ONE_STATEMENT_MAX:
            # One autocommitted statement in the usual case (see ``record_pg``). A longer list
            # is usually a whole history sent again (a hook's first call in a new process): the
            # locking path reads which ids are new first, and serialises only those.
            with self._db.tx() as tx:
                done = _records.record_pg(
                    tx,
                    agent_id,
                    messages,
                    thread_id=thread_id,
                    output_threshold=self.output_threshold,
                    release=release,
                )
            if done is not None:
                return done
        with self._db.tx(write=True) as tx:
            if release is not None and not _records.release_lease(tx, agent_id, *release):
                return -1
            return _records.record(
                tx,
                agent_id,
                messages,
                thread_id=thread_id,
                output_threshold=self.output_threshold,
            )

    async def arecord(
        self, agent_id: str, messages: Sequence[BaseMessage], *, thread_id: str | None = None
    ) -> int:
        return await self._run(self.record, agent_id, messages, thread_id=thread_id)

    def turns(self, agent_id: str, last: int | None = None) -> list[Turn]:
        """The agent's turns, oldest first; ``last=N`` reads only the newest N (an index scan)."""
        with self._db.tx() as tx:
            return _records.turns(tx, agent_id, last)

    async def aturns(self, agent_id: str, last: int | None = None) -> list[Turn]:
        return await self._run(self.turns, agent_id, last)

    def turn_page(
        self,
        agent_id: str,
        limit: int,
        *,
        before: int | None = None,
        skip_ids: Container[str] = (),
    ) -> tuple[list[TurnView], int | None]:
        """Up to ``limit`` turns older than seq ``before``, newest first, for readers that stop
        early (the briefing): each a ``TurnView`` of the fields as recorded (several times
        cheaper than rebuilding messages), large outputs left as references, turns in
        ``skip_ids`` not decoded. Returns them and the ``before`` of the next page (None at the
        start of the history)."""
        with self._db.tx() as tx:
            return _records.turn_page(tx, agent_id, limit, before=before, skip_ids=skip_ids)

    async def aturn_page(
        self, agent_id: str, limit: int, *, before: int | None = None, skip_ids: Container[str] = ()
    ) -> tuple[list[TurnView], int | None]:
        return await self._run(self.turn_page, agent_id, limit, before=before, skip_ids=skip_ids)

    # --- working state, milestones, pointers -------------------------------------------------

    def working_state(self, agent_id: str) -> dict[str, Any]:
        """The latest merged working state (goal, plan, progress, decisions, last_milestone...)."""
        with self._db.tx() as tx:
            return _records.working_state(tx, agent_id)

    async def aworking_state(self, agent_id: str) -> dict[str, Any]:
        return await self._run(self.working_state, agent_id)

    def update_working_state(self, agent_id: str, **fields: Any) -> dict[str, Any]:
        """Revise working-state fields (each revision kept); ``None`` removes a field.

        Returns the merged view.
        """
        with self._db.tx(write=True) as tx:
            return _records.update_working_state(tx, agent_id, fields)

    async def aupdate_working_state(self, agent_id: str, **fields: Any) -> dict[str, Any]:
        return await self._run(self.update_working_state, agent_id, **fields)

    def milestone(self, agent_id: str, text: str) -> dict[str, Any]:
        """Append a milestone (kept in the history; the latest shows in the working state)."""
        with self._db.tx(write=True) as tx:
            return _records.milestone(tx, agent_id, text)

    async def amilestone(self, agent_id: str, text: str) -> dict[str, Any]:
        return await self._run(self.milestone, agent_id, text)

    def revisions(self, agent_id: str) -> list[tuple[int, str, str | None, dict[str, Any], float]]:
        """Every working-state, milestone and pointer revision: (seq, kind, name, data, time)."""
        with self._db.tx() as tx:
            return _records.revisions(tx, agent_id)

    async def arevisions(
        self, agent_id: str
    ) -> list[tuple[int, str, str | None, dict[str, Any], float]]:
        return await self._run(self.revisions, agent_id)

    def set_pointer(
        self, agent_id: str, name: str, target: str, note: str | None = None
    ) -> Pointer:
        """Point ``name`` at ``target`` (latest wins; every change is kept)."""
        with self._db.tx(write=True) as tx:
            return _records.set_pointer(tx, agent_id, name, target, note)

    async def aset_pointer(
        self, agent_id: str, name: str, target: str, note: str | None = None
    ) -> Pointer:
        return await self._run(self.set_pointer, agent_id, name, target, note)

    def pointers(self, agent_id: str) -> dict[str, Pointer]:
        """The current pointers by name."""
        with self._db.tx() as tx:
            return _records.pointers(tx, agent_id)

    async def apointers(self, agent_id: str) -> dict[str, Pointer]:
        return await self._run(self.pointers, agent_id)

    # --- outputs ---------------------------------------------------------------------------

    def put_output(self, agent_id: str, content: str) -> str:
        """Store ``content`` whole and return its reference (the same content, the same ref)."""
        if not isinstance(content, str):
            raise RecallError(
                "an output is text; str() or json.dumps it first", code="invalid_value"
            )
        with self._db.tx(write=True) as tx:
            _records.touch_agent(tx, agent_id)
            return _records.put_output(tx, agent_id, content)

    async def aput_output(self, agent_id: str, content: str) -> str:
        return await self._run(self.put_output, agent_id, content)

    def fetch_output(self, ref: str, offset: int = 0, length: int | None = None) -> str:
        """Read a stored output, or ``length`` characters of it from ``offset``."""
        with self._db.tx() as tx:
            return _records.fetch_output(tx, ref, offset, length)

    async def afetch_output(self, ref: str, offset: int = 0, length: int | None = None) -> str:
        return await self._run(self.fetch_output, ref, offset, length)

    # --- actions ---------------------------------------------------------------------------

    def claim(
        self,
        agent_id: str,
        action_id: str,
        *,
        tool: str,
        args: Any,
        args_digest: str,
        klass: str = "external",
        idempotency_key: str | None = None,
        thread_id: str | None = None,
        epoch: int | None = None,
    ) -> Claim:
        """Record the intent to run an action, unless it already ran or is in doubt.

        Insert-if-absent in one transaction: of any number of concurrent claimers of the same
        action, exactly one gets ``claimed``; the rest see ``in_doubt`` (or ``done``). An action
        this store saw finish (done or failed) is answered from memory, with no transaction.
        """

        def intent() -> _actions.Intent:
            # Built only when an attempt is to be inserted: a repeat lookup (a resume finding
            # its calls done) never needs it, and building it is a tenth of that lookup's cost.
            return _actions.Intent(
                agent_id=agent_id,
                action_id=action_id,
                tool=tool,
                klass=klass,
                args=args,
                args_digest=args_digest,
                idempotency_key=idempotency_key or action_id,
                thread_id=thread_id,
                epoch=epoch,
            )

        # A finished action never changes again (its end is written once, and a new attempt
        # only follows an abandoned or not-done one): one this process saw finish answers from
        # memory (``_finished``), with no read at all. ``close()`` empties it, so a closed
        # store still refuses (its next transaction raises).
        finished = self._db.finished
        kept = finished.get(action_id)
        if kept is not None:
            settled = _actions.settled_claim(_actions.action_of(kept), action_id, args_digest)
            if settled is not None:  # always: what is kept is done or failed
                return settled
        # Read first, without the write lock. An open action can only become finished, so
        # either answer stays true and the repeat lookup of a resume needs no lock. A new
        # attempt is inserted under the write lock, where the primary key settles any race
        # with claimers that read the same state.
        row: Sequence[Any] | None = None
        if self._db.dialect == "postgres":
            # PostgreSQL: the read and a first attempt's claim are one autocommitted statement
            # (one round trip instead of a read, then BEGIN, four statements and COMMIT).
            with self._db.tx() as tx:
                first, row = _actions.claim_first_pg(tx, intent())
            if first is not None:
                return first
            finished.keep(row)  # read before this claim wrote anything: committed
        prev: Action | None = None if row is None else _actions.action_of(row)
        if prev is None:  # SQLite; or PostgreSQL lost a race for attempt 1: read it now
            with self._db.tx(warm=True) as tx:
                row = _actions.latest_row(tx, action_id)
                # The claim's first statement (an approval's spend, which may share the
                # transaction, comes after it): a finished row here is committed, not ours.
                finished.keep(row)
                prev = None if row is None else _actions.action_of(row)
                settled = _actions.settled_claim(prev, action_id, args_digest)
                if settled is not None:
                    return settled
                if tx.promote():  # SQLite, no write in progress: insert under the same lock
                    return _actions.insert_attempt(tx, prev, intent())
        else:
            settled = _actions.settled_claim(prev, action_id, args_digest)
            if settled is not None:
                return settled
        with self._db.tx(write=True) as tx:
            return _actions.insert_attempt(tx, prev, intent())

    async def aclaim(self, agent_id: str, action_id: str, **kwargs: Any) -> Claim:
        return await self._run(self.claim, agent_id, action_id, **kwargs)

    def end(
        self,
        action_id: str,
        attempt: int,
        outcome: str,
        *,
        result: Any = None,
        error: str | None = None,
        note: str | None = None,
        resolved_by: str | None = None,
        flush_later: bool = False,
    ) -> bool:
        """Record how an attempt ended (done, failed, abandoned, not_done). Only the first counts.

        ``flush_later=True`` lets the commit return before the disk has it: only for a caller
        that knows a write to this same database follows (see ``Database.tx``).
        """
        # A finished end is remembered (``_finished``) only once it has committed: when this
        # call's transaction is the outermost one. Inside a caller's transaction it may still
        # roll back.
        ended: list[Sequence[Any]] | None = [] if self._db.outermost() else None
        # PostgreSQL: `_actions.end` is one statement there, atomic on its own, so it runs
        # autocommitted (no BEGIN/COMMIT round trips). SQLite keeps BEGIN IMMEDIATE.
        with self._db.tx(write=self._db.dialect == "sqlite", flush_later=flush_later) as tx:
            changed = _actions.end(
                tx,
                action_id,
                attempt,
                outcome,
                result=result,
                error=error,
                note=note,
                resolved_by=resolved_by,
                ended=ended,
            )
        if ended:
            self._db.finished.keep(ended[0])
        return changed

    async def aend(self, action_id: str, attempt: int, outcome: str, **kwargs: Any) -> bool:
        return await self._run(self.end, action_id, attempt, outcome, **kwargs)

    def action(self, action_id: str) -> Action:
        """One action by id (or unique id prefix). Raises ``unknown_action``."""
        with self._db.tx() as tx:
            return _actions.find_action(tx, action_id)

    async def aaction(self, action_id: str) -> Action:
        return await self._run(self.action, action_id)

    def actions(self, agent_id: str, open_only: bool = False) -> list[Action]:
        """The agent's actions (latest attempt each), oldest first; ``open_only``: in doubt only."""
        with self._db.tx() as tx:
            return _actions.actions(tx, agent_id, open_only)

    async def aactions(self, agent_id: str, open_only: bool = False) -> list[Action]:
        return await self._run(self.actions, agent_id, open_only)

    def resolve(self, action_id: str, outcome: str | bool, note: str | None = None) -> Action:
        """A person settles an open action: ``"done"`` (it happened) or ``"not_done"``.

        A ``not_done`` action may run again on the next resume, under the same idempotency key.
        Raises ``not_open`` if it already ended, ``unknown_action`` if there is no such action.
        """
        if isinstance(outcome, bool):
            outcome = "done" if outcome else "not_done"
        with self._db.tx(write=True) as tx:
            return _actions.resolve(tx, action_id, outcome, note, by="person")

    async def aresolve(
        self, action_id: str, outcome: str | bool, note: str | None = None
    ) -> Action:
        return await self._run(self.resolve, action_id, outcome, note)

    def undo(
        self, agent_id: str, undo: Mapping[str, Callable[..., Any]] | None = None
    ) -> UndoReport:
        """Reverse the agent's done actions newest first with their undo functions.

        The functions are those of the ``DurableToolNode``/``RecallMiddleware`` ``undo=`` of a
        node that ran in this process (or was given this store by ``node.durable.register_undo(store)``), and
        ``undo``, by tool name: a new process that has run no node passes them here. Each undo
        is itself a once-only action; the walk stops at anything in doubt and reports done
        actions whose tool has no known undo (``no_undo``) and those an earlier call reversed
        (``already_undone``).
        """
        from ..tools._undo import run_undo

        return run_undo(self, agent_id, undo)

    async def aundo(
        self, agent_id: str, undo: Mapping[str, Callable[..., Any]] | None = None
    ) -> UndoReport:
        return await self._run(self.undo, agent_id, undo)

    # --- approvals -------------------------------------------------------------------------

    def record_decision(
        self,
        agent_id: str,
        action_id: str,
        decision: str,
        *,
        args: Any = None,
        args_digest: str | None = None,
        message: str | None = None,
    ) -> Approval:
        """Record a request or a decision for an action, signed over agent, action and digest."""
        with self._db.tx(write=True) as tx:
            return _actions.record_decision(
                tx,
                self._secret,
                agent_id=agent_id,
                action_id=action_id,
                decision=decision,
                args=args,
                args_digest=args_digest,
                message=message,
            )

    async def arecord_decision(
        self, agent_id: str, action_id: str, decision: str, **kw: Any
    ) -> Approval:
        return await self._run(self.record_decision, agent_id, action_id, decision, **kw)

    def latest_decision(self, action_id: str) -> Approval | None:
        with self._db.tx() as tx:
            return _actions.latest_decision(tx, action_id)

    async def alatest_decision(self, action_id: str) -> Approval | None:
        return await self._run(self.latest_decision, action_id)

    def spend_approval(
        self, agent_id: str, action_id: str, args_digest: str, attempt: int
    ) -> Approval:
        """Spend the latest decision on one execution of exactly ``args_digest``.

        Raises ``approval_denied`` after a "no", ``approval_mismatch`` for other arguments, a bad
        signature or an approval already spent, ``approval_required`` when none was given.
        """
        with self._db.tx(write=True) as tx:
            return _actions.spend_approval(
                tx,
                self._secret,
                agent_id=agent_id,
                action_id=action_id,
                args_digest=args_digest,
                attempt=attempt,
            )

    async def aspend_approval(
        self, agent_id: str, action_id: str, args_digest: str, attempt: int
    ) -> Approval:
        return await self._run(self.spend_approval, agent_id, action_id, args_digest, attempt)

    def pending_approvals(self, agent_id: str) -> list[Approval]:
        """Approval requests still waiting for a person."""
        with self._db.tx() as tx:
            return _actions.pending_approvals(tx, agent_id)

    async def apending_approvals(self, agent_id: str) -> list[Approval]:
        return await self._run(self.pending_approvals, agent_id)

    def verify_approvals(self) -> list[Approval]:
        """Approvals whose signature does not verify with this store's secret (empty is good)."""
        with self._db.tx() as tx:
            return [
                a
                for a in _actions.all_approvals(tx)
                if not _actions.verify_signature(self._secret, a)
            ]

    async def averify_approvals(self) -> list[Approval]:
        return await self._run(self.verify_approvals)

    # --- leases ----------------------------------------------------------------------------

    def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> Lease:
        """Take the agent's lease (free, expired or ours) or raise ``LeaseHeld``.

        The epoch (the fencing token) grows when the holder changes, and when ``holder`` takes
        its own lease while it is still live (another process under the same holder id); a
        holder taking back the lease it released keeps its epoch."""
        # The take is one conditional upsert, atomic on its own: on PostgreSQL it runs
        # autocommitted (one round trip, not BEGIN + statement + COMMIT); SQLite keeps BEGIN
        # IMMEDIATE on the writers' connection. Refused, the holder is read after it, which can
        # only be later: the answer (held, by whom) was true when the upsert ran.
        with self._lease_write() as tx:
            return _records.acquire_lease(tx, agent_id, holder, ttl)

    async def aacquire_lease(self, agent_id: str, holder: str, ttl: float) -> Lease:
        return await self._run(self.acquire_lease, agent_id, holder, ttl)

    def renew_lease(self, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend our lease; False if another holder took it (we were fenced out)."""
        # PostgreSQL: one UPDATE, autocommitted: no transaction left open across round trips,
        # so a holder frozen mid-renewal (SIGSTOP, a paused VM) never holds the lease row
        # against takeover. SQLite: see ``_lease_write``.
        with self._lease_write() as tx:
            return _records.renew_lease(tx, agent_id, holder, epoch, ttl)

    async def arenew_lease(self, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
        return await self._run(self.renew_lease, agent_id, holder, epoch, ttl)

    def release_lease(self, agent_id: str, holder: str, epoch: int) -> bool:
        """Give the lease up so the next process can start at once."""
        with self._lease_write() as tx:  # as in renew_lease
            return _records.release_lease(tx, agent_id, holder, epoch)

    def _lease_write(self) -> AbstractContextManager[Tx]:
        """The transaction of a lease's take, renewal or release: autocommitted on PostgreSQL
        (each is one statement); on SQLite a write on the writers' connection, under the
        store's write lock.

        On SQLite every write of this process must queue at that lock. An UPDATE on a pooled
        connection would meet the writers' transaction inside SQLite instead, whose busy
        handler sleeps 1, 2, 5... ms between tries and can lose every race to a busy writer
        thread: beside one thread recording in a loop, a release measured here waited 1.3 s.
        """
        return self._db.tx(write=self._db.dialect == "sqlite")

    async def arelease_lease(self, agent_id: str, holder: str, epoch: int) -> bool:
        return await self._run(self.release_lease, agent_id, holder, epoch)

    def lease(self, agent_id: str) -> Lease | None:
        """The agent's lease row (it may have expired)."""
        with self._db.tx() as tx:
            return _records.lease(tx, agent_id)

    async def alease(self, agent_id: str) -> Lease | None:
        return await self._run(self.lease, agent_id)

    # --- agents ----------------------------------------------------------------------------

    def agents(self) -> list[AgentInfo]:
        """Every agent with records: turns, open actions, lease holder, last activity."""
        with self._db.tx() as tx:
            return _records.agents(tx)

    async def aagents(self) -> list[AgentInfo]:
        return await self._run(self.agents)

    def has_agent(self, agent_id: str) -> bool:
        with self._db.tx() as tx:
            return _records.agent_exists(tx, agent_id)

    async def ahas_agent(self, agent_id: str) -> bool:
        return await self._run(self.has_agent, agent_id)

    # --- briefing and checkpointer ---------------------------------------------------------

    def briefing(self, agent_id: str, token_budget: int = 2000, **options: Any) -> Briefing:
        """A token-budgeted briefing of what the agent wrote down (see ``Briefing``)."""
        from .._briefing import build_briefing

        return build_briefing(self, agent_id, token_budget=token_budget, **options)

    async def abriefing(self, agent_id: str, token_budget: int = 2000, **options: Any) -> Briefing:
        return await self._run(self.briefing, agent_id, token_budget, **options)

    def checkpointer(
        self,
        inner: BaseCheckpointSaver | None = None,
        *,
        lease_ttl: float = 60.0,
        wait: float = 0.0,
        **options: Any,
    ) -> RecallCheckpointer:
        """A ``RecallCheckpointer``; with no ``inner``, over LangGraph's SqliteSaver or
        PostgresSaver in this same database, with exact fencing installed."""
        from ..checkpoint import RecallCheckpointer

        self._db.birth.check("RecallStore")  # before the saver takes the parent's lock
        if inner is None:
            from ..checkpoint._same_db import same_database_saver

            inner = same_database_saver(self)
        return RecallCheckpointer(inner, store=self, lease_ttl=lease_ttl, wait=wait, **options)


def _remove_scratch(folder: str, pid: int) -> None:
    # At exit of a child forked after the store opened, the folder is still the parent's.
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _validate_op(op: Op) -> None:
    """Check an op as LangGraph's stores do, whether it came through ``put()`` or ``batch()``.

    Labels are stored joined by ".", so an unchecked label such as "a.b" in a GetOp, SearchOp
    or delete would address the namespace ("a", "b"). Only writes refuse the "langgraph" root.
    """
    if isinstance(op, (GetOp, PutOp)):
        _validate_labels(op.namespace)
        if "\x00" in str(op.key):
            raise RecallError(
                f"item keys cannot contain NUL (\\x00): {op.key!r}", code="invalid_value"
            )
        if isinstance(op, PutOp):
            _records.refuse_record_write(op.namespace, str(op.key), delete=op.value is None)
            if op.value is not None:
                _validate_namespace(op.namespace)
    elif isinstance(op, SearchOp):
        _validate_labels(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        for cond in op.match_conditions or ():
            _validate_labels(cond.path)


def _validate_labels(namespace: tuple[str, ...]) -> None:
    if isinstance(namespace, str):
        # Iterated as it is, "docs" was the namespace ("d", "o", "c", "s").
        raise InvalidNamespace(
            f"a namespace is a tuple of labels: write ({namespace!r},), not {namespace!r}"
        )
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespace(
                f"Namespace labels must be non-empty strings without '.' or NUL: {namespace!r}"
            )


def _validate_namespace(namespace: tuple[str, ...]) -> None:
    if not namespace:
        raise InvalidNamespace("Namespace cannot be empty.")
    _validate_labels(namespace)
    if namespace[0] == "langgraph":
        raise InvalidNamespace(f'Root label for namespace cannot be "langgraph": {namespace!r}')


def _message_list(messages: Any) -> list[BaseMessage]:
    """``record``'s messages as a list: a lone message or a dict is refused by name (``list()``
    of one gave a list of its fields, and an error about tuples)."""
    if isinstance(messages, (BaseMessage, dict, str, bytes)) or messages is None:
        raise RecallError(
            f"record() takes a list of LangChain messages, got {type(messages).__name__}; "
            "wrap a single message in a list",
            code="invalid_value",
        )
    try:
        return list(messages)
    except TypeError:
        raise RecallError(
            f"record() takes a list of LangChain messages, got {type(messages).__name__}",
            code="invalid_value",
        ) from None
