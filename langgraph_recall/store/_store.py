"""RecallStore: a full LangGraph ``BaseStore`` plus the agent's typed records.

Sync methods talk to the database directly; every ``a``-prefixed twin runs the same sync method
in a worker thread. That keeps each piece of logic in one place, never blocks the event loop,
and works the same from a script, a thread pool, ``ainvoke`` and a Jupyter cell (whose sync
calls happen while a loop is running, which LangGraph's own async stores refuse).

This module holds the store's life (open, close), the ``BaseStore`` surface, TTL and recording;
the typed records API is in ``_records_api`` and actions, approvals and leases in
``_actions_api``, which ``RecallStore`` inherits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
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

from .._errors import RecallError
from .._process import not_picklable
from . import _items, _leases, _transcript
from ._actions_api import ActionsAPI
from ._api_base import caller_loop
from ._db import (
    Database,
    check_scheme,
    is_postgres_target,
    sqlite_path,
)
from ._dberrors import database_error
from ._postgres import PostgresDatabase
from ._records_api import RecordsAPI
from ._secret import postgres_secret, postgres_secret_given, refuse_if_deleted, sqlite_secret
from ._sqlite import SqliteDatabase
from ._validate import (
    message_list,
    validate_minutes,
    validate_namespace,
    validate_ttl_config,
    validated,
)

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


class RecallStore(RecordsAPI, ActionsAPI, BaseStore):
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
                ``$LANGGRAPH_RECALL_SECRET``). On SQLite, left out, it is kept in a 0600 file
                beside the database with the store's id; given, a file made then keeps the
                store id only, so a deleted or swapped database is still noticed (``records_missing``).
            index: an embedding index config, as LangGraph's stores take, for vector search.
            ttl: a ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
                ``sweep_interval_minutes``).
            output_threshold: turns and results longer than this many characters are stored
                whole as outputs and referenced by id from the briefing (a tool result given
                as text blocks counts, and is stored, as their text; one holding an image or
                another non-text block stays whole in its turn).
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
            busy_timeout: seconds a SQLite write waits for another process's lock, and a
                PostgreSQL call for a pooled connection while the server cannot be reached,
                before it raises ``RecallError(code="database")`` (default 30).
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
        validate_ttl_config(ttl)
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
                timeout=busy_timeout,
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
                given = secret if isinstance(secret, bytes) else secret.encode() if secret else None
                key = sqlite_secret(db, path, existed, given or None)
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
        """Async twin of ``close``: close the store and its checkpointers (their leases given back)
        off the event loop."""
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
        validate_namespace(namespace)
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
        validate_namespace(namespace)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Apply ``ops`` in the order given, in one transaction."""
        ops = validated(ops)
        todo, queries = self._to_embed(ops)
        documents: list[list[float]] = []
        asked: dict[int, list[float]] = {}
        embeddings = self._embeddings
        if embeddings is not None:
            loop = caller_loop()
            if loop is not None:
                # Inside an async twin (``abriefing``'s memory search): the index's async
                # methods on the caller's loop, which works for an async-only ``embed`` too.
                def wait(coro: Coroutine[Any, Any, T]) -> T:
                    return asyncio.run_coroutine_threadsafe(coro, loop).result()

                if todo:
                    documents = wait(embeddings.aembed_documents([t for _, _, t in todo]))
                asked = {i: wait(embeddings.aembed_query(q)) for i, q in queries.items()}
            else:
                if todo:
                    documents = embeddings.embed_documents([t for _, _, t in todo])
                asked = {i: embeddings.embed_query(q) for i, q in queries.items()}
        return self._apply(ops, self._placed(ops, todo, documents), asked)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of ``batch`` (same semantics; the transaction runs in a worker thread).

        Embeddings are computed first, on the event loop, with the index's async methods: an
        ``embed`` given as an async function has no sync twin the thread could call.
        """
        ops = validated(ops)
        todo, queries = self._to_embed(ops)
        documents: list[list[float]] = []
        asked: dict[int, list[float]] = {}
        if self._embeddings is not None:
            if todo:
                documents = await self._embeddings.aembed_documents([t for _, _, t in todo])
            for i, q in queries.items():
                asked[i] = await self._embeddings.aembed_query(q)
        return await self._run(self._apply, ops, self._placed(ops, todo, documents), asked)

    def _apply(
        self,
        ops: list[Op],
        vectors: dict[int, list[tuple[str, list[float]]]],
        query_vectors: dict[int, list[float]],
    ) -> list[Result]:
        """``batch``'s transaction, the embeddings it needs already computed."""
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
                    results.append(self._search(tx, op, query_vectors.get(i), refresh_default))
                elif isinstance(op, ListNamespacesOp):
                    results.append(_items.list_namespaces(tx, op))
                else:
                    raise RecallError(f"unknown store operation {op!r}", code="invalid_value")
        return results

    def _search(
        self, tx: Any, op: SearchOp, query_vector: list[float] | None, refresh_default: bool
    ) -> Any:
        if op.query and query_vector is not None:
            return _items.search_vector(tx, op, query_vector, refresh_default)
        if op.query:
            return _items.search_text(tx, op, refresh_default)
        return _items.search_plain(tx, op, refresh_default)

    def _to_embed(self, ops: Sequence[Op]) -> tuple[list[tuple[int, str, str]], dict[int, str]]:
        """What ``ops`` need embedded, before the transaction (a slow call holds no lock): the
        (op position, field, text) of indexed puts, and each search's query by op position."""
        if self._embeddings is None:
            return [], {}
        todo: list[tuple[int, str, str]] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp) and op.value is not None and isinstance(op.value, dict):
                for field, text in _items.index_texts(op.value, op.index, self.index_config):
                    todo.append((i, field, text))
        queries = {i: op.query for i, op in enumerate(ops) if isinstance(op, SearchOp) and op.query}
        return todo, queries

    def _placed(
        self,
        ops: Sequence[Op],
        todo: list[tuple[int, str, str]],
        documents: Sequence[Sequence[float]],
    ) -> dict[int, list[tuple[str, list[float]]]]:
        """Each indexed put's (field, vector) pairs; every put gets a list (an empty one drops
        its old vectors). Empty with no index: puts leave vectors alone."""
        if self._embeddings is None:
            return {}
        out: dict[int, list[tuple[str, list[float]]]] = {
            i: [] for i, op in enumerate(ops) if isinstance(op, PutOp) and op.value is not None
        }
        for (i, field, _), vec in zip(todo, documents, strict=False):
            out[i].append((field, list(vec)))
        return out

    # --- TTL -------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete expired items now; returns how many. (Expired items are never returned anyway.)"""
        with self._db.tx(write=True) as tx:
            return _items.sweep(tx)

    async def asweep_ttl(self) -> int:
        """Async twin of ``sweep_ttl``: delete expired items now, in a worker thread; returns how
        many."""
        return await self._run(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items in a background thread every ``sweep_interval_minutes``."""
        validate_minutes("sweep_interval_minutes", sweep_interval_minutes)
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

    # --- recording turns, and a run's end (its lease given up with its last turns) ----------

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
        return self._record(agent_id, message_list(messages), thread_id, None)

    async def arecord(
        self, agent_id: str, messages: Sequence[BaseMessage], *, thread_id: str | None = None
    ) -> int:
        """Async twin of ``record``: append the messages not yet recorded, in a worker thread;
        returns how many were new."""
        return await self._run(self.record, agent_id, messages, thread_id=thread_id)

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

    def _database_error(self, exc: BaseException, own: bool) -> BaseException:
        """What a checkpoint saver's ``exc`` crosses langgraph-recall's API as: a driver's
        error becomes ``RecallError(code="database")`` (``_dberrors``), anything else stays.
        ``own``: the saver is on this store's database (``store.checkpointer()``)."""
        if own:
            err = database_error(exc, self._db.target, getattr(self._db, "dsn", ""))
        else:
            err = database_error(exc, "the checkpoint saver's database")
        return exc if err is None else err

    def _record(
        self,
        agent_id: str,
        messages: list[BaseMessage],
        thread_id: str | None,
        release: tuple[str, int] | None,
    ) -> int:
        """``record``, and with ``release=(holder, epoch)`` also that lease given up first;
        -1 (nothing written) when the lease was not the holder's any more."""
        if self._db.dialect == "postgres" and len(messages) <= _transcript.ONE_STATEMENT_MAX:
            # One autocommitted statement in the usual case (see ``record_pg``). A longer list
            # is usually a whole history sent again (a hook's first call in a new process): the
            # locking path reads which ids are new first, and serialises only those.
            with self._db.tx() as tx:
                done = _transcript.record_pg(
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
            if release is not None and not _leases.release_lease(tx, agent_id, *release):
                return -1
            return _transcript.record(
                tx,
                agent_id,
                messages,
                thread_id=thread_id,
                output_threshold=self.output_threshold,
            )

    # --- briefing and checkpointer ---------------------------------------------------------

    def briefing(self, agent_id: str, token_budget: int | None = None, **options: Any) -> Briefing:
        """A token-budgeted briefing of what the agent wrote down (see ``Briefing``), within
        ``token_budget`` tokens (default 2000). Options are ``build_briefing``'s: a budget
        given that cannot hold every unconfirmed call is refused (``invalid_value``); the
        default one lists what fits and counts the rest (``doubts_over_budget``)."""
        from .._briefing import build_briefing

        return build_briefing(self, agent_id, token_budget=token_budget, **options)

    async def abriefing(
        self, agent_id: str, token_budget: int | None = None, **options: Any
    ) -> Briefing:
        """Async twin of ``briefing``: the token-budgeted briefing, built in a worker thread."""
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
