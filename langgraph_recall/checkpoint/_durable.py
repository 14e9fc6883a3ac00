"""Which checkpoints this process has finished writing: the durability barrier's memory.

LangGraph writes checkpoints on background threads (``durability="async"``, the default), so a
node of step N+1 may start before the checkpoint of step N is in the database. A tool node about
to cause a side effect asks ``RecallCheckpointer.wait_durable(config, checkpoint_id)`` first;
this log answers from memory for checkpoints written here and wakes waiters the moment a
``put`` returns. It remembers the most recent ``capacity`` checkpoints; older ones, and those
written by another process, are found in the saver itself.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from .._context import agent_id_of, configurable, thread_id_of
from .._wakeups import LoopWakeups
from ._delegated import mapped

_LONGEST_WAIT = 3600.0  # one wait's cap (threading refuses an infinite one); waits loop on


class DurableLog:
    """A bounded set of (thread_id, checkpoint_id) whose ``put`` has returned, plus waiters."""

    def __init__(self, capacity: int = 4096) -> None:
        # (thread_id, checkpoint_id) -> True once written, False if its put failed.
        self._done: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._capacity = capacity
        # begin/mark run on every checkpoint write: they take the plain lock (no Python-level
        # Condition methods) and notify only when someone waits, which is rare.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Coroutines waiting (``await_written``): each parks an event, not a worker thread.
        self._wakeups = LoopWakeups()
        self._waiters = 0
        # What the waiters wait for (a key -> how many wait for it): never evicted while wanted.
        self._wanted: dict[tuple[str, str], int] = {}
        # Checkpoints whose put this process has begun and not yet marked.
        self._writing: set[tuple[str, str]] = set()

    def begin(self, thread_id: str, checkpoint_id: str) -> None:
        """Record that this process is about to write this checkpoint (``mark`` ends it)."""
        with self._lock:
            if len(self._writing) < self._capacity:
                self._writing.add((thread_id, checkpoint_id))

    def writing(self, thread_id: str, checkpoint_id: str) -> bool:
        """Whether this process's put of that checkpoint is under way: a waiter then needs no
        database read (the put is the only way it lands, and ``mark`` will wake the waiter)."""
        with self._lock:
            return (thread_id, checkpoint_id) in self._writing

    def mark(self, thread_id: str, checkpoint_id: str, written: bool = True) -> None:
        """Record that the put of this checkpoint returned (or failed: ``written=False``)."""
        key = (thread_id, checkpoint_id)
        with self._lock:
            self._done[key] = written
            self._writing.discard(key)
            if len(self._done) > self._capacity:
                self._evict_one()
            if self._waiters:
                self._cond.notify_all()
                self._wakeups.wake_all()

    def _evict_one(self) -> None:
        # The oldest entry no one waits for. A waiter wakes only after this lock is free, and
        # by then more puts may have been marked: had its own entry been dropped meanwhile, it
        # would sleep to its timeout (30 s by default) for a checkpoint written long before.
        for key in self._done:
            if key not in self._wanted:
                del self._done[key]
                return

    def seen(self, thread_id: str, checkpoint_id: str) -> bool:
        with self._lock:
            return self._done.get((thread_id, checkpoint_id), False)

    def wait(self, thread_id: str, checkpoint_id: str, timeout: float) -> bool:
        """Block until that checkpoint's put returns or ``timeout`` passes; True if it was
        written, False on timeout or if its put failed (a fenced-out run)."""
        deadline = time.monotonic() + max(0.0, timeout)
        key = (thread_id, checkpoint_id)
        with self._cond:
            self._want(key)
            try:
                while key not in self._done:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, _LONGEST_WAIT))  # no limit: inf
                return self._done[key]
            finally:
                self._unwant(key)

    async def await_written(self, thread_id: str, checkpoint_id: str, timeout: float) -> bool:
        """``wait`` for a coroutine: it holds no thread while it waits.

        Waiting on a worker thread (``asyncio.to_thread(wait)``) stalled ``ainvoke``: with as
        many parallel tool calls as the loop's default executor has workers, every worker
        waited for a checkpoint whose put was queued behind them on that same executor."""
        deadline = time.monotonic() + max(0.0, timeout)
        key = (thread_id, checkpoint_id)
        with self._lock:
            self._want(key)
        try:
            while True:
                with self._lock:
                    if key in self._done:
                        return self._done[key]
                    woken = self._wakeups.add()  # under the lock: no mark slips in between
                if not await self._wakeups.wait(woken, deadline - time.monotonic()):
                    with self._lock:
                        return self._done.get(key, False)
        finally:
            with self._lock:
                self._unwant(key)

    def _want(self, key: tuple[str, str]) -> None:
        # Under the lock. A wanted entry is never evicted, and ``mark`` wakes only when wanted.
        self._waiters += 1
        self._wanted[key] = self._wanted.get(key, 0) + 1

    def _unwant(self, key: tuple[str, str]) -> None:
        self._waiters -= 1
        if self._wanted[key] == 1:
            del self._wanted[key]
        else:
            self._wanted[key] -= 1


class DurabilityBarrier:
    """``wait_durable`` / ``await_durable``: RecallCheckpointer's barrier for tool nodes."""

    if TYPE_CHECKING:
        inner: Any
        _shared: Any

        async def _acall(self, name: str, *args: Any, **kwargs: Any) -> Any: ...

        def _here(self) -> None: ...

    def wait_durable(
        self, config: RunnableConfig, checkpoint_id: str, timeout: float = 30.0
    ) -> bool:
        """Block until the root checkpoint ``checkpoint_id`` of the config's thread is written.

        True as soon as this process's ``put`` of it has returned, or if the saver already has
        it (written earlier or by another process); False after ``timeout`` seconds, or at once
        if its write was refused (the run lost its lease). Under ``durability="exit"`` nothing
        is written before the run ends: False at once unless it already exists.
        """
        self._here()  # it may read the saver (``_written``)
        thread_id = str(thread_id_of(config))
        durable: DurableLog = self._shared.durable
        if durable.seen(thread_id, checkpoint_id) or (
            self._may_be_saved(config, thread_id, checkpoint_id)
            and self._written(thread_id, checkpoint_id)
        ):
            return True
        if _durability(config) == "exit":
            return False
        return durable.wait(thread_id, checkpoint_id, timeout) or self._written(
            thread_id, checkpoint_id
        )

    async def await_durable(
        self, config: RunnableConfig, checkpoint_id: str, timeout: float = 30.0
    ) -> bool:
        """Async ``wait_durable``."""
        self._here()
        thread_id = str(thread_id_of(config))
        durable: DurableLog = self._shared.durable
        if durable.seen(thread_id, checkpoint_id) or (
            self._may_be_saved(config, thread_id, checkpoint_id)
            and await self._awritten(thread_id, checkpoint_id)
        ):
            return True
        if _durability(config) == "exit":
            return False
        if await durable.await_written(thread_id, checkpoint_id, timeout):
            return True
        return await self._awritten(thread_id, checkpoint_id)

    def _may_be_saved(self, config: RunnableConfig, thread_id: str, checkpoint_id: str) -> bool:
        """Whether a saver read could find this checkpoint before this process's put of it.

        Not when that put is under way, nor when the checkpoint is younger than the one this
        process's live run of the thread started from: the run made it, and under
        ``durability="async"`` LangGraph hands its put to a background thread that may not have
        begun when the tool node asks. A read then finds nothing, costs a whole checkpoint
        read (a round trip on PostgreSQL), and queues on the saver's lock ahead of that very
        put; the put's end wakes the waiter anyway. A checkpoint of another process, or the
        one the run restored, is read as before.
        """
        durable: DurableLog = self._shared.durable
        if durable.writing(thread_id, checkpoint_id):
            return False
        run = self._shared.runs.run_of(agent_id_of(config))
        return not (
            run is not None
            and not run.ended
            and run.thread_id == thread_id
            and run.start_id is not None
            and checkpoint_id > run.start_id
        )

    @mapped
    def _written(self, thread_id: str, checkpoint_id: str) -> bool:
        return self.inner.get_tuple(_checkpoint_config(thread_id, checkpoint_id)) is not None

    @mapped
    async def _awritten(self, thread_id: str, checkpoint_id: str) -> bool:
        config = _checkpoint_config(thread_id, checkpoint_id)
        return await self._acall("get_tuple", config) is not None


def _checkpoint_config(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def _durability(config: RunnableConfig) -> str | None:
    return configurable(config).get("__pregel_durability")
