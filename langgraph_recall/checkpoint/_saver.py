"""``RecallCheckpointer``: any LangGraph saver, plus one-process-per-agent, fencing, recording.

It is a decorator. Every saver method, sync and async, goes to the wrapped saver; around three
of them it adds the guarantees:

- ``get_tuple`` at a root run's start takes the agent's lease (see ``_lease``), refuses a
  resubmitted turn (``_turns``), arranges for the run's end (``_runs``) and notes which messages
  the run restored (``_recording``).
- ``put`` stamps the lease epoch into the checkpoint's metadata, and is refused (``LeaseLost``)
  once the lease is lost; the database refuses it too when the saver shares the store's
  database (``_fence``). After the write it records the checkpoint's new messages and wakes
  ``wait_durable`` callers. ``update_state`` writes (no run) take the lease for the one write.
- ``put_writes`` refuses writes of a run whose lease is lost.

The wrapper exposes exactly the capabilities of the saver it wraps (a method the inner saver
does not implement, sync or async, stays the base class's ``NotImplementedError``, so
``langgraph-checkpoint-conformance`` detects the same set), and serves async calls on sync-only
savers (``SqliteSaver``, ``PostgresSaver``) by running the sync method in a thread, so
``ainvoke`` and Jupyter's ``await`` work with them.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import warnings
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from .._context import CONFIG_KEY_RUNTIME, agent_id_of, configurable, thread_id_of
from .._errors import LeaseHeld, LeaseLost, RecallError
from ._durable import DurableLog
from ._faults import fault_point
from ._fence import is_fence_error
from ._lease import LeaseKeeper, new_holder_id
from ._recording import Recorder, messages_in, switch_thread
from ._runs import Run, find_loop, run_key
from ._same_db import close_same_database_saver, is_fenced
from ._turns import claim_turn, is_new_input, replay_config, turn_id_of, unfinished

if TYPE_CHECKING:
    from ..store import RecallStore

# (sync, async) method pairs LangGraph's conformance kit treats as capabilities.
_CAPABILITIES = (
    ("get_tuple", "aget_tuple"),
    ("list", "alist"),
    ("put", "aput"),
    ("put_writes", "aput_writes"),
    ("delete_thread", "adelete_thread"),
    ("delete_for_runs", "adelete_for_runs"),
    ("copy_thread", "acopy_thread"),
    ("prune", "aprune"),
)
_VARIANTS: dict[tuple[type, type], type] = {}
_VARIANTS_LOCK = threading.Lock()


def _implements(saver_type: type, sync: str, async_: str) -> bool:
    return any(
        getattr(saver_type, name, None) is not getattr(BaseCheckpointSaver, name)
        for name in (sync, async_)
    )


class _Shared:
    """What every copy of one RecallCheckpointer shares (``with_allowlist`` copies it)."""

    def __init__(self, keeper: LeaseKeeper, recorder: Recorder) -> None:
        self.keeper = keeper
        self.recorder = recorder
        self.durable = DurableLog()
        self.runs: dict[int, Run] = {}  # by run key
        self.by_agent: dict[str, Run] = {}  # the one run per agent the lease keeper allows
        # agent -> (thread, lease epoch) of this process's last run of it: while the epoch is
        # unchanged no other process ran the agent since, so its thread marker needs no I/O.
        self.last_thread: dict[str, tuple[str, int]] = {}
        self.lock = threading.Lock()
        self.sync_only: set[str] = set()  # async methods of the inner saver that raise
        self.warned_no_loop = False


class RecallCheckpointer(BaseCheckpointSaver):
    """Wraps any LangGraph saver so one process acts for an agent at a time, every checkpoint
    is fenced by the lease epoch, each message is recorded once, and no turn runs twice.

    Args:
        inner: the saver that stores the checkpoints (``store.checkpointer()`` picks LangGraph's
            SqliteSaver or PostgresSaver on the store's own database, where fencing is exact).
        store: the ``RecallStore`` holding leases and turns.
        lease_ttl: seconds a lease lasts without renewal; renewed every ``lease_ttl / 3`` by a
            daemon thread while a run holds it. A killed holder blocks the agent this long.
        wait: seconds a run waits for a busy agent before raising ``LeaseHeld``.
        messages_key: the state channel whose messages are recorded as turns.
        holder: this process's holder id (default ``hostname:pid:uuid``).

    Guarantees: a root run takes the agent's lease (``configurable["agent_id"]``, default the
    thread id) before any node runs and releases it when the run ends, raises or is
    interrupted; a second process gets ``LeaseHeld`` and runs nothing. A holder that loses its
    lease stops at the next step boundary and its run raises ``LeaseLost``; with
    ``store.checkpointer()`` a late write is refused inside the database. ``get_state``,
    subgraph reads and direct saver calls need no lease; ``update_state`` takes it for its
    write and raises ``LeaseHeld`` while another run holds it.

    Raises (from ``invoke``/``stream`` of a graph compiled with it): ``LeaseHeld``,
    ``LeaseLost``, ``RecallError(code="duplicate_turn")`` (see ``invoke``).
    """

    def __new__(cls, inner: Any = None, *args: Any, **kwargs: Any) -> RecallCheckpointer:
        if inner is None:  # copy.copy and pickling call __new__ without arguments
            return super().__new__(cls)
        return super().__new__(_variant(cls, type(inner)))

    def __init__(
        self,
        inner: BaseCheckpointSaver,
        *,
        store: RecallStore,
        lease_ttl: float = 60.0,
        wait: float = 0.0,
        messages_key: str = "messages",
        holder: str | None = None,
    ) -> None:
        if isinstance(inner, RecallCheckpointer):
            raise RecallError(
                "this saver is already a RecallCheckpointer; pass it to compile() as is",
                code="invalid_value",
            )
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.store = store
        self.messages_key = messages_key
        self.fenced = is_fenced(inner)
        # Graph internals call checkpointer.serde directly: it must be the inner saver's.
        self.serde = inner.serde
        # Called per channel per step: bind the inner method, no wrapper frame in between.
        self.get_next_version = inner.get_next_version  # type: ignore[method-assign]
        keeper = LeaseKeeper(
            store, holder=holder or new_holder_id(), ttl=lease_ttl, wait=wait, fenced=self.fenced
        )
        self._shared = _Shared(keeper, Recorder(store))

    @property
    def holder(self) -> str:
        """This checkpointer's holder id, as named in other processes' ``lease_held`` errors."""
        return self._shared.keeper.holder

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        return self._shared.keeper.ttl

    @property
    def wait(self) -> float:
        """Seconds a run waits for a busy agent before ``LeaseHeld`` (settable)."""
        return self._shared.keeper.wait

    @wait.setter
    def wait(self, seconds: float) -> None:
        self._shared.keeper.wait = float(seconds)

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def __getattr__(self, name: str) -> Any:
        # Anything else users reach for on the saver they wrapped (``.conn``, ``.setup``...).
        if name.startswith("__") or name in ("inner", "_shared"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"RecallCheckpointer({self.inner!r}, holder={self.holder!r})"

    def with_allowlist(self, extra_allowlist: Any) -> RecallCheckpointer:
        """A copy whose inner saver has the derived msgpack allowlist; leases stay shared."""
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = copy.copy(self)
        clone.inner = inner
        clone.serde = inner.serde
        clone.get_next_version = inner.get_next_version  # type: ignore[method-assign]
        return clone

    # --- lifecycle -------------------------------------------------------------------------

    def setup(self) -> Any:
        """The inner saver's ``setup()`` (a coroutine for async savers), if it has one."""
        fn = getattr(self.inner, "setup", None)
        return fn() if fn is not None else None

    def close(self) -> None:
        """Release held leases, flush recording, close connections ``store.checkpointer()`` made."""
        self._shared.recorder.close()
        self._shared.keeper.close()
        close_same_database_saver(self.inner)

    def __enter__(self) -> RecallCheckpointer:
        enter = getattr(self.inner, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            leave = getattr(self.inner, "__exit__", None)
            if leave is not None:
                leave(*exc)
        finally:
            self.close()

    async def __aenter__(self) -> RecallCheckpointer:
        enter = getattr(self.inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            leave = getattr(self.inner, "__aexit__", None)
            if leave is not None:
                await leave(*exc)
        finally:
            await asyncio.to_thread(self.close)

    # --- runs: start and end ----------------------------------------------------------------

    def _begin_run(self, config: RunnableConfig, loop: Any) -> Run | None:
        """Take the lease and refuse a resubmitted turn. None if this run already began."""
        key = run_key(config)
        assert key is not None
        shared = self._shared
        with shared.lock:
            if key in shared.runs:  # a second root get_tuple of the same run
                return None
        conf = configurable(config)
        runtime = conf[CONFIG_KEY_RUNTIME]
        agent_id, thread_id = agent_id_of(config), str(thread_id_of(config))
        control = loop.control if loop is not None else getattr(runtime, "control", None)
        lease = shared.keeper.acquire(agent_id, control)
        try:
            turn_id = turn_id_of(config)
            if turn_id and loop is not None and is_new_input(loop.input):
                duplicate = claim_turn(
                    self.store, self.inner, agent_id=agent_id, thread_id=thread_id, turn_id=turn_id
                )
                if duplicate is not None:
                    raise duplicate
            self._catch_up_previous_thread(agent_id, thread_id, lease.epoch)
        except BaseException:
            shared.keeper.release(agent_id)
            raise
        run = Run(
            key, agent_id, thread_id, lease, runtime, branched=bool(conf.get("checkpoint_id"))
        )
        with shared.lock:
            shared.runs[key] = run
            shared.by_agent[agent_id] = run
        if loop is not None:
            run.finalizer = weakref.finalize(loop, _orphaned, weakref.ref(self), key)
        elif not shared.warned_no_loop:
            shared.warned_no_loop = True
            warnings.warn(
                "RecallCheckpointer could not find this LangGraph version's run loop: leases "
                "are released only by RecallCheckpointer.invoke()/ainvoke() or on expiry",
                RuntimeWarning,
                stacklevel=3,
            )
        return run

    def _catch_up_previous_thread(self, agent_id: str, thread_id: str, epoch: int) -> None:
        """The agent moves to another thread: the thread it ran on before may hold messages a
        crash left unrecorded there. Queue them before this run's own."""
        last = self._shared.last_thread
        if last.get(agent_id) == (thread_id, epoch):
            return  # our own last run of it, same thread, and nobody else's in between
        previous = switch_thread(self.store, agent_id, thread_id)
        last[agent_id] = (thread_id, epoch)
        if previous is None:
            return
        saved = self.inner.get_tuple({"configurable": {"thread_id": previous, "checkpoint_ns": ""}})
        if saved is not None:
            values = saved.checkpoint["channel_values"]
            messages = messages_in(values.get(self.messages_key))
            if messages:
                self._shared.recorder.submit(agent_id, previous, messages, catch_up=True)

    def _restored(self, run: Run, saved: CheckpointTuple | None) -> None:
        messages = (
            messages_in(saved.checkpoint["channel_values"].get(self.messages_key))
            if saved
            else None
        )
        run.restored(messages)
        if messages:
            # A crash may have left some of these checkpointed but unrecorded.
            self._shared.recorder.submit(run.agent_id, run.thread_id, messages, catch_up=True)

    def _end_run(self, run: Run) -> None:
        """The run's loop exited (every write done): record, release, report a lost lease."""
        shared = self._shared
        with shared.lock:
            if run.ended:
                return
            run.ended = True
            shared.runs.pop(run.key, None)
            if shared.by_agent.get(run.agent_id) is run:
                del shared.by_agent[run.agent_id]
        if run.finalizer is not None:
            run.finalizer.detach()
        try:
            fault_point("before_release")
            shared.recorder.flush(run.agent_id, timeout=max(30.0, self.lease_ttl))
        finally:
            lost = shared.keeper.release(run.agent_id)
        if lost is not None:
            raise lost

    async def _aend_run(self, run: Run) -> None:
        await asyncio.to_thread(self._end_run, run)

    def _register_end(self, loop: Any, run: Run) -> None:
        if loop is None:
            return
        if hasattr(loop.stack, "push_async_callback"):
            loop.stack.push_async_callback(self._aend_run, run)
        else:
            loop.stack.callback(self._end_run, run)

    def _end_agent_runs(self, agent_id: str) -> None:
        """End runs of ``agent_id`` whose loop never reported its end (used by ``invoke``)."""
        with self._shared.lock:
            run = self._shared.by_agent.get(agent_id)
        if run is not None:
            try:
                self._end_run(run)
            except LeaseLost:
                pass

    # --- reads ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The inner saver's ``get_tuple``; at a root run's start, takes the lease first."""
        if run_key(config) is None:
            return self.inner.get_tuple(config)
        loop = find_loop(config)
        run = self._begin_run(config, loop)
        if run is None:
            return self.inner.get_tuple(config)
        try:
            saved = self.inner.get_tuple(config)
            self._restored(run, saved)
        except BaseException:
            self._end_run(run)
            raise
        self._register_end(loop, run)
        return saved

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        if run_key(config) is None:
            return await self._acall("get_tuple", config)
        loop = find_loop(config)  # before any await: the frame chain is the caller's now
        run = await asyncio.to_thread(self._begin_run, config, loop)
        if run is None:
            return await self._acall("get_tuple", config)
        try:
            saved = await self._acall("get_tuple", config)
            self._restored(run, saved)
        except BaseException:
            await self._aend_run(run)
            raise
        self._register_end(loop, run)
        return saved

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if "list" not in self._shared.sync_only:
            items = self.inner.alist(config, filter=filter, before=before, limit=limit)
            try:
                first = await items.__anext__()
            except StopAsyncIteration:
                return
            except NotImplementedError:
                self._shared.sync_only.add("list")
            else:
                yield first
                async for item in items:
                    yield item
                return
        listed = await asyncio.to_thread(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        for item in listed:
            yield item

    # --- writes ---------------------------------------------------------------------------

    def _before_put(
        self, config: RunnableConfig, metadata: CheckpointMetadata
    ) -> tuple[CheckpointMetadata, str | None, bool]:
        """(metadata to write, agent whose lease fences it, whether we took it just for this)."""
        conf = configurable(config)
        keeper = self._shared.keeper
        if CONFIG_KEY_RUNTIME in conf:
            agent_id = agent_id_of(config)
            if keeper.held(agent_id) is None:
                return metadata, None, False  # a run that took no lease (nested foreign graph)
            epoch = keeper.check_write(agent_id)
            run = self._shared.by_agent.get(agent_id)
            branched = run is not None and run.branched
            return _stamped(metadata, agent_id, epoch, branched), agent_id, False
        elif metadata.get("source") in ("update", "fork"):
            # update_state / a __copy__ outside any run: a write like a run's, so it needs the
            # lease for its duration, or it could fork the history under a running holder.
            agent_id = agent_id_of(config)
            epoch = keeper.acquire(agent_id).epoch
            return _stamped(metadata, agent_id, epoch), agent_id, True
        return metadata, None, False  # a direct call (conformance suites, tools)

    def _put_failed(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        agent_id: str | None,
        own_lease: bool,
        exc: BaseException,
    ) -> BaseException:
        # Wake durability waiters now: this run will never write this checkpoint.
        self._shared.durable.mark(str(thread_id_of(config)), checkpoint["id"], written=False)
        if agent_id is not None and is_fence_error(exc):
            lost = self._shared.keeper.mark_lost(
                agent_id, "the database refused a checkpoint written under the old lease epoch"
            )
            if own_lease:
                self._shared.keeper.release(agent_id)
            return lost
        if own_lease and agent_id is not None:
            self._shared.keeper.release(agent_id)
        return exc

    def _after_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        agent_id: str | None,
        own_lease: bool,
    ) -> None:
        conf = configurable(config)
        thread_id = str(conf.get("thread_id"))
        shared = self._shared
        if (
            agent_id is not None
            and not conf.get("checkpoint_ns")
            and self.messages_key in new_versions
        ):
            messages = messages_in(checkpoint["channel_values"].get(self.messages_key))
            if messages:
                if own_lease:
                    shared.recorder.submit(agent_id, thread_id, messages, catch_up=True)
                else:
                    run = shared.by_agent.get(agent_id)
                    if run is not None:
                        shared.recorder.submit(
                            agent_id, thread_id, run.cursor.new_messages(messages)
                        )
        shared.durable.mark(thread_id, checkpoint["id"])

    def _finish_update(self, agent_id: str) -> None:
        self._shared.recorder.flush(agent_id, timeout=max(30.0, self.lease_ttl))
        self._shared.keeper.release(agent_id)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Write a checkpoint stamped with the lease epoch; ``LeaseLost`` if fenced out."""
        md, agent_id, own = self._before_put(config, metadata)
        fault_point("before_put")
        self._shared.durable.begin(str(thread_id_of(config)), checkpoint["id"])
        try:
            stored = self.inner.put(config, checkpoint, md, new_versions)
        except BaseException as exc:
            err = self._put_failed(config, checkpoint, agent_id, own, exc)
            if err is exc:
                raise
            raise err from exc
        fault_point("after_put")
        self._after_put(config, checkpoint, new_versions, agent_id, own)
        if own and agent_id is not None:
            self._finish_update(agent_id)
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        if self.fenced and CONFIG_KEY_RUNTIME in configurable(config):
            md, agent_id, own = self._before_put(config, metadata)  # memory only: no I/O
        else:
            md, agent_id, own = await asyncio.to_thread(self._before_put, config, metadata)
        fault_point("before_put")
        self._shared.durable.begin(str(thread_id_of(config)), checkpoint["id"])
        try:
            stored = await self._acall("put", config, checkpoint, md, new_versions)
        except BaseException as exc:
            err = self._put_failed(config, checkpoint, agent_id, own, exc)
            if err is exc:
                raise
            raise err from exc
        fault_point("after_put")
        self._after_put(config, checkpoint, new_versions, agent_id, own)
        if own and agent_id is not None:
            await asyncio.to_thread(self._finish_update, agent_id)
        return stored

    def _before_writes(self, config: RunnableConfig) -> None:
        conf = configurable(config)
        keeper = self._shared.keeper
        agent_id = agent_id_of(config)
        if CONFIG_KEY_RUNTIME in conf:
            held = keeper.held(agent_id)
            if held is not None and held.lost is not None:
                raise held.lost
        elif keeper.is_busy(agent_id):
            # update_state from another thread while a run of this process acts for the agent.
            raise LeaseHeld(
                f"agent {agent_id!r} is running in this process; update its state after the "
                "run ends",
                agent_id=agent_id,
                holder=keeper.holder,
                expires_at=None,
            )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """The inner ``put_writes`` (``task_path`` passed on); refused once the lease is lost."""
        self._before_writes(config)
        self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._before_writes(config)
        await self._acall("put_writes", config, writes, task_id, task_path)

    # --- plain delegation -------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._acall("delete_thread", thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._acall("delete_for_runs", run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._acall("copy_thread", source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._acall("prune", thread_ids, strategy=strategy)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        # The inner saver's (SQL) version, never the base class's get_tuple walk through us.
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Any:
        return await self._acall("get_delta_channel_history", config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:  # bound to inner's in __init__
        return self.inner.get_next_version(current, channel)

    async def _acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The inner saver's async method; its sync twin in a thread where the async raises."""
        if name not in self._shared.sync_only:
            try:
                return await getattr(self.inner, "a" + name)(*args, **kwargs)
            except NotImplementedError:
                # SqliteSaver / PostgresSaver: sync only. Remember, and use the sync method.
                self._shared.sync_only.add(name)
        return await asyncio.to_thread(getattr(self.inner, name), *args, **kwargs)

    # --- what other parts of langgraph-recall ask --------------------------------------------

    def current_epoch(self, agent_id: str) -> int | None:
        """The lease epoch this process holds for ``agent_id`` (None if it holds none).

        Raises:
            LeaseLost: this process held it and learned another process took over.
        """
        held = self._shared.keeper.held(agent_id)
        if held is None:
            return None
        if held.lost is not None:
            raise held.lost
        return held.epoch

    def wait_durable(
        self, config: RunnableConfig, checkpoint_id: str, timeout: float = 30.0
    ) -> bool:
        """Block until the root checkpoint ``checkpoint_id`` of the config's thread is written.

        True as soon as this process's ``put`` of it has returned, or if the saver already has
        it (written earlier or by another process); False after ``timeout`` seconds. Under
        ``durability="exit"`` nothing is written before the run ends: False at once unless it
        already exists.
        """
        thread_id = str(thread_id_of(config))
        durable = self._shared.durable
        # A checkpoint this process is writing right now needs no saver read: the read would
        # queue behind that very put on the saver's lock, and the put's end wakes us anyway.
        if durable.seen(thread_id, checkpoint_id) or (
            not durable.writing(thread_id, checkpoint_id)
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
        thread_id = str(thread_id_of(config))
        durable = self._shared.durable
        if durable.seen(thread_id, checkpoint_id) or (
            not durable.writing(thread_id, checkpoint_id)
            and await self._awritten(thread_id, checkpoint_id)
        ):
            return True
        if _durability(config) == "exit":
            return False
        if await asyncio.to_thread(durable.wait, thread_id, checkpoint_id, timeout):
            return True
        return await self._awritten(thread_id, checkpoint_id)

    def _written(self, thread_id: str, checkpoint_id: str) -> bool:
        return self.inner.get_tuple(_checkpoint_config(thread_id, checkpoint_id)) is not None

    async def _awritten(self, thread_id: str, checkpoint_id: str) -> bool:
        return (
            await self._acall("get_tuple", _checkpoint_config(thread_id, checkpoint_id)) is not None
        )

    # --- the turn helper ----------------------------------------------------------------------

    def invoke(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """``graph.invoke`` that answers a resubmitted turn instead of running it again.

        With ``configurable["turn_id"]`` set and that turn already run for the agent: returns
        the turn's stored state values if it finished, or resumes it (``invoke(None)``) if it
        did not. Otherwise, exactly ``graph.invoke(input, config, **kwargs)``.
        """
        try:
            return graph.invoke(input, config, **kwargs)
        except RecallError as exc:
            if exc.code != "duplicate_turn":
                raise
            details = exc.details
        finally:
            self._end_agent_runs(agent_id_of(config))
        if details["at_head"]:
            head = replay_config(config, details, at_checkpoint=False)
            if unfinished(graph.get_state(head)):
                return self.invoke(graph, None, head, **kwargs)
        return graph.get_state(replay_config(config, details, at_checkpoint=True)).values

    async def ainvoke(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """Async ``invoke``."""
        try:
            return await graph.ainvoke(input, config, **kwargs)
        except RecallError as exc:
            if exc.code != "duplicate_turn":
                raise
            details = exc.details
        finally:
            await asyncio.to_thread(self._end_agent_runs, agent_id_of(config))
        if details["at_head"]:
            head = replay_config(config, details, at_checkpoint=False)
            if unfinished(await graph.aget_state(head)):
                return await self.ainvoke(graph, None, head, **kwargs)
        return (await graph.aget_state(replay_config(config, details, at_checkpoint=True))).values


def _stamped(
    metadata: CheckpointMetadata, agent_id: str, epoch: int, branched: bool = False
) -> CheckpointMetadata:
    """The metadata plus the fencing token the trigger in ``_fence`` compares."""
    stamped: dict[str, Any] = {**metadata, "recall_agent": agent_id, "recall_epoch": epoch}
    if branched:
        stamped["recall_branch"] = True
    return stamped  # type: ignore[return-value]


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


def _orphaned(ref: weakref.ref[RecallCheckpointer], key: int) -> None:
    """A run's loop was collected without exiting (its __enter__ failed): end the run."""
    saver = ref()
    if saver is None:
        return
    with saver._shared.lock:
        run = saver._shared.runs.get(key)
    if run is not None:
        # Not from the collecting thread (it may be an event loop): the renewer-style daemon.
        threading.Thread(target=_quietly_end, args=(saver, run), daemon=True).start()


def _quietly_end(saver: RecallCheckpointer, run: Run) -> None:
    try:
        saver._end_run(run)
    except Exception:
        pass


def _variant(cls: type, inner_type: type) -> type:
    """``cls`` with the capabilities ``inner_type`` lacks left as the base class's."""
    key = (cls, inner_type)
    with _VARIANTS_LOCK:
        variant = _VARIANTS.get(key)
        if variant is None:
            attrs: dict[str, Any] = {"__module__": cls.__module__, "__doc__": cls.__doc__}
            for sync, async_ in _CAPABILITIES:
                if not _implements(inner_type, sync, async_):
                    attrs[sync] = getattr(BaseCheckpointSaver, sync)
                    attrs[async_] = getattr(BaseCheckpointSaver, async_)
            variant = type(f"{cls.__name__}[{inner_type.__name__}]", (cls,), attrs)
            variant.__qualname__ = cls.__qualname__
            _VARIANTS[key] = variant
    return variant
