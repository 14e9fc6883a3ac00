"""Helpers for the RecallStore tests: a fake embedding, condition waits, sync/async callers,
SQL capture, and real worker processes released together.

Nothing here fakes the store or the database: processes are real (``fork``), databases are the
ones the conftest fixtures hand out.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import multiprocessing
import os
import re
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.embeddings import Embeddings

from langgraph_recall.store import RecallStore
from langgraph_recall.store._actions import Intent, planned_insert
from langgraph_recall.store._db import Tx

# --- a deterministic embedding ---------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


class BagOfWordsEmbeddings(Embeddings):
    """A deterministic embedding: each word adds 1 to a bucket picked by its sha256.

    Texts that share more words point in closer directions, so cosine ranking is predictable,
    and the same text gives the same vector in every process.
    """

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dims
        for word in _WORD.findall(text.lower()):
            bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % self.dims
            vec[bucket] += 1.0
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return self._vector(text)


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity, 0.0 for a zero vector."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


# --- waiting on conditions -------------------------------------------------------------------


def wait_until(cond: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds.

    The timeout is generous on purpose: tests wait for a state, they never assert a duration.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def db_now(store: RecallStore) -> float:
    """The database clock (seconds since the epoch), which is what TTLs and leases use."""
    with store._db.tx() as tx:
        row = tx.one("SELECT {now}")
    assert row is not None
    return float(row[0])


def wait_db_clock_past(store: RecallStore, moment: float) -> None:
    """Wait until the database clock is past ``moment``."""
    wait_until(lambda: db_now(store) > moment, what=f"database clock past {moment}")


# --- the same test body through sync methods or their async twins -------------------------------


class Api:
    """Calls ``store.<name>(...)`` directly (``sync``) or ``store.a<name>(...)`` on an event loop
    (``async``), so one test body proves both twins."""

    def __init__(self, store: RecallStore, mode: str) -> None:
        self.store = store
        self.mode = mode
        self._loop = asyncio.new_event_loop() if mode == "async" else None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self._loop is None:
            return getattr(self.store, name)  # type: ignore[no-any-return]
        twin = getattr(self.store, "a" + name)
        loop = self._loop
        return lambda *args, **kwargs: loop.run_until_complete(twin(*args, **kwargs))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()


# --- seeing the SQL the store runs -----------------------------------------------------------


def count_transactions(store: RecallStore, monkeypatch: Any) -> list[bool]:
    """One entry (whether it writes) per transaction ``store`` opens from now on."""
    opened: list[bool] = []
    real = type(store._db).tx

    def spy(self: Any, write: bool = False, **options: Any) -> Any:
        if self is store._db:
            opened.append(write)
        return real(self, write, **options)

    monkeypatch.setattr(type(store._db), "tx", spy)
    return opened


def queued_at_write_lock(store: RecallStore, call: Callable[[], Any]) -> Any:
    """Run ``call`` on a thread while this thread holds the store's write lock (as another
    writer of the process would); check it waits for the lock, then return what it answers."""
    import threading

    done = threading.Event()
    answers: list[Any] = []

    def run() -> None:
        answers.append(call())
        done.set()

    with store._db.write_lock:
        worker = threading.Thread(target=run)
        worker.start()
        assert not done.wait(0.5), "it went round the store's write lock"
    worker.join(10)
    assert answers, "it never finished"
    return answers[0]


@contextmanager
def captured_sql(monkeypatch: Any) -> Iterator[list[tuple[str, list[Any]]]]:
    """Record every (sql, params) the store runs, in this thread, while the block runs (for
    ``Tx.many``, the params of its first row)."""
    seen: list[tuple[str, list[Any]]] = []
    real_all, real_one, real_run, real_many = Tx.all, Tx.one, Tx.run, Tx.many

    def spy_all(self: Tx, sql: str, params: Any = (), **options: Any) -> Any:
        seen.append((sql, list(params)))
        return real_all(self, sql, params, **options)

    def spy_one(self: Tx, sql: str, params: Any = (), **options: Any) -> Any:
        seen.append((sql, list(params)))
        return real_one(self, sql, params, **options)

    def spy_run(self: Tx, sql: str, params: Any = ()) -> Any:
        seen.append((sql, list(params)))
        return real_run(self, sql, params)

    def spy_many(self: Tx, sql: str, rows: Any) -> Any:
        seen.append((sql, list(rows[0]) if rows else []))
        return real_many(self, sql, rows)

    with monkeypatch.context() as m:
        m.setattr(Tx, "all", spy_all)
        m.setattr(Tx, "one", spy_one)
        m.setattr(Tx, "run", spy_run)
        m.setattr(Tx, "many", spy_many)
        yield seen


# --- real processes, released together -------------------------------------------------------

_FORK = multiprocessing.get_context("fork")


def _worker(
    target: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    open_after_gate: bool,
    ready: Any,
    go: Any,
    out: Any,
    index: int,
) -> None:
    store = None
    try:
        if not open_after_gate:
            store = RecallStore.open(target)
        ready.put(index)
        if not go.wait(300):
            raise RuntimeError("never released")
        if open_after_gate:
            store = RecallStore.open(target)
        result = fn(store, *args)
        out.put((index, "ok", result))
    except BaseException as exc:  # report everything, the parent decides
        out.put((index, "error", (exc, traceback.format_exc())))
    finally:
        if store is not None:
            store.close()


def run_together(
    target: str,
    fn: Callable[..., Any],
    argsets: list[tuple[Any, ...]],
    *,
    open_after_gate: bool = False,
    timeout: float = 240.0,
) -> list[tuple[str, Any]]:
    """Run ``fn(store, *args)`` in one real process per argset, all released at the same moment.

    Each process opens its own ``RecallStore`` on ``target`` (before the gate, or after it with
    ``open_after_gate``), waits until every process is ready, then runs. Returns, in argset
    order, ``("ok", result)`` or ``("error", (exception, traceback))``.
    """
    ready, out, go = _FORK.Queue(), _FORK.Queue(), _FORK.Event()
    procs = [
        _FORK.Process(
            target=_worker, args=(target, fn, args, open_after_gate, ready, go, out, i), daemon=True
        )
        for i, args in enumerate(argsets)
    ]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + timeout
        for _ in procs:
            ready.get(timeout=max(1.0, deadline - time.monotonic()))
        go.set()
        results: dict[int, tuple[str, Any]] = {}
        while len(results) < len(procs):
            index, status, value = out.get(timeout=max(1.0, deadline - time.monotonic()))
            results[index] = (status, value)
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
        return [results[i] for i in range(len(procs))]
    finally:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, 9)
                p.join(10)


def ok_results(results: list[tuple[str, Any]]) -> list[Any]:
    """The results of ``run_together``, failing with the first worker's traceback on error."""
    for status, value in results:
        if status != "ok":
            raise AssertionError("a worker process failed:\n" + value[1])
    return [value for _, value in results]


# --- a durable call written ahead -------------------------------------------------------------


def write_planned(
    store: RecallStore,
    agent_id: str,
    action_id: str,
    tool: str,
    args: Any,
    digest: str = "d",
    klass: str = "external",
) -> None:
    """Attempt 1 of ``action_id`` written ahead, as the transaction of the checkpoint holding
    its AI message writes it (``checkpoint._plans``): open, planned, not started."""
    intent = Intent(agent_id, action_id, tool, klass, args, digest, action_id, "t", None)
    planned = planned_insert(store._db.sql, store._db.dialect, intent)
    with store._db.tx(write=True) as tx:
        tx.run(planned.sql, planned.params)
