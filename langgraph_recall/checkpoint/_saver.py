"""``RecallCheckpointer``: any LangGraph saver, plus one-process-per-agent, fencing, recording.

It is a decorator. Every saver method, sync and async, goes to the wrapped saver; around three
of them it adds the guarantees:

- ``get_tuple`` at a root run's start takes the agent's lease (see ``_lease``), refuses a
  resubmitted turn (``_turns``), arranges for the run's end (``_runs``), notes which messages
  the run restored (``_recording``) and records the messages of its new input (``_inputs``).
- ``put`` stamps the lease epoch into the checkpoint's metadata, and is refused (``LeaseLost``)
  once the lease is lost; the database refuses it too when the saver shares the store's
  database (``_fence``). After the write it records the checkpoint's new messages and wakes
  ``wait_durable`` callers. ``update_state`` writes (no run) take the lease for the one write.
- ``put_writes`` refuses writes of a run whose lease is lost.

The wrapper exposes exactly the capabilities of the saver it wraps (``_capabilities``), and
serves async calls on sync-only savers (``SqliteSaver``, ``PostgresSaver``) by running the sync
method in a thread, so ``ainvoke`` and Jupyter's ``await`` work with them. It also carries what
other parts ask of it: ``wait_durable``/``await_durable`` (``_durable``), ``current_epoch``, and
the ``invoke``/``ainvoke`` turn helper (``_turns``).
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import logging
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

from .._context import CONFIG_KEY_RUNTIME, thread_id_of
from .._errors import RecallError
from .._process import Birth, not_picklable
from ..store._due import EndRider
from ._capabilities import variant
from ._delegated import Delegated, mapped
from ._durable import DurabilityBarrier, DurableLog
from ._faults import fault_point
from ._lease import LeaseKeeper, check_wait, new_holder_id
from ._plans import Pending, Planner, Plans, take
from ._put_steps import PutSteps, conf_of
from ._recording import Recorder
from ._runs import Entry, Run, RunLifecycle, find_loop, run_key
from ._same_db import (
    can_carry,
    close_same_database_saver,
    forget_same_database_saver,
    is_fenced,
    put_with,
    put_writes_with,
)
from ._turns import TurnHelpers, is_new_input

if TYPE_CHECKING:
    from ..store import Claim, RecallStore

log = logging.getLogger("langgraph_recall")


class _Shared:
    """What every copy of one RecallCheckpointer shares (``with_allowlist`` copies it)."""

    def __init__(
        self, keeper: LeaseKeeper, recorder: Recorder, runs: RunLifecycle, plans: Plans
    ) -> None:
        self.keeper = keeper
        self.recorder = recorder
        self.runs = runs
        self.plans = plans
        self.durable = DurableLog()
        self.sync_only: set[str] = set()  # async methods of the inner saver that raise
        # The saver store.checkpointer() made was closed with this checkpointer (on PostgreSQL
        # its pool): reads and new runs are refused by name, not with the driver's error.
        self.inner_closed = False


class RecallCheckpointer(PutSteps, Delegated, TurnHelpers, DurabilityBarrier, BaseCheckpointSaver):
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
        holder: this checkpointer's holder id (default ``hostname:pid:uuid``, new each time).
            A lease still held under the same id is taken over at once, at a new fencing
            epoch: a worker restarted under its name need not wait out the ttl, and the old
            process, if it still runs (or was only frozen), stops with ``lease_lost`` at its
            next write. So never give two live workers the same id: each would keep taking the
            agent from the other.

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
        if inner is None:  # called without arguments (as copy and pickle protocols do)
            return super().__new__(cls)
        return super().__new__(variant(cls, type(inner)))

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
        if not isinstance(inner, BaseCheckpointSaver):
            raise RecallError(
                f"RecallCheckpointer wraps a LangGraph checkpointer (a BaseCheckpointSaver such "
                f"as InMemorySaver or SqliteSaver), got {type(inner).__name__}",
                code="invalid_value",
            )
        if not _is_store(store):
            raise RecallError(
                f"RecallCheckpointer(store=...) takes a RecallStore (RecallStore.open(...)), got "
                f"{type(store).__name__}",
                code="invalid_value",
            )
        # Born with its store: one opened before a fork refuses in the child, whenever the
        # checkpointer itself was made (``_process``).
        self._birth: Birth = getattr(getattr(store, "_db", None), "birth", None) or Birth()
        self._here()
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
        recorder = Recorder(store)
        runs = RunLifecycle(
            store=store, inner=inner, keeper=keeper, recorder=recorder, messages_key=messages_key
        )
        self._shared = _Shared(keeper, recorder, runs, Plans(store, messages_key))
        # Intents (and ends) can ride the saver's transactions only where both share one
        # database (``_plans``, ``store._due``).
        self.carries = self.fenced and can_carry(inner)
        tracked = getattr(store, "_checkpointers", None)
        if tracked is not None:
            tracked.add(self)  # store.close() closes this too

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
        check_wait(seconds)
        self._shared.keeper.wait = float(seconds)

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def __getattr__(self, name: str) -> Any:
        # Anything else users reach for on the saver they wrapped (``.conn``, ``.setup``...).
        if name.startswith("__") or name in ("inner", "_shared", "_birth"):
            raise AttributeError(name)
        self._here()  # the inner saver's connection, say
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"RecallCheckpointer({self.inner!r}, holder={self.holder!r})"

    def __copy__(self) -> RecallCheckpointer:
        # A shallow copy sharing the leases, runs and connections (``with_allowlist``).
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise not_picklable("RecallCheckpointer")

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

    @mapped
    def setup(self) -> Any:
        """The inner saver's ``setup()`` (a coroutine for async savers), if it has one."""
        self._here()
        fn = getattr(self.inner, "setup", None)
        return fn() if fn is not None else None

    def close(self) -> None:
        """Release held leases, flush recording, close connections ``store.checkpointer()`` made."""
        if self._birth.forked():  # the leases and connections are the parent's: let go only
            forget_same_database_saver(self.inner)
            return
        self._shared.recorder.close()
        self._shared.keeper.close()
        if close_same_database_saver(self.inner):
            self._shared.inner_closed = True

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

    # --- reads ----------------------------------------------------------------------------

    @mapped
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The inner saver's ``get_tuple``; at a root run's start, takes the lease first."""
        self._usable()
        if run_key(config) is None:
            return self.inner.get_tuple(config)
        runs = self._shared.runs
        loop = find_loop(config)
        run = runs.begin(config, loop, Entry.here())
        if run is None:
            return self.inner.get_tuple(config)
        self._learn_graph(run, loop)
        try:
            saved = self.inner.get_tuple(config)
            runs.restored(run, saved)
            runs.settle(run)
            for planner, pending in self._settlers(run, loop, saved):
                planner.settle_run(self.store, run.agent_id, pending)
        except BaseException:
            runs.end(run)
            raise
        runs.end_at_exit(loop, run)
        return saved

    @mapped
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        self._usable()
        if run_key(config) is None:
            return await self._acall("get_tuple", config)
        runs = self._shared.runs
        loop = find_loop(config)  # before any await: the frame chain is the caller's now
        entry = Entry.here()
        # The waits for a busy agent run on the loop (``aretry``), each try on a worker thread.
        run = await self._shared.keeper.aretry(lambda: runs.begin(config, loop, entry, 0.0))
        if run is None:
            return await self._acall("get_tuple", config)
        self._learn_graph(run, loop)
        try:
            saved = await self._acall("get_tuple", config)
            runs.restored(run, saved)
            await runs.asettle(run)
            for planner, pending in self._settlers(run, loop, saved):
                await planner.asettle_run(self.store, run.agent_id, pending)
        except BaseException:
            await runs.aend(run)
            raise
        runs.end_at_exit(loop, run)
        return saved

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._usable()
        return self._mapped_items(
            self.inner.list(config, filter=filter, before=before, limit=limit)
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._usable()
        async for item in self._amapped_items(self._alist(config, filter, before, limit)):
            yield item

    async def _alist(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
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

    @mapped
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Write a checkpoint stamped with the lease epoch; ``LeaseLost`` if fenced out."""
        self._here()
        md, agent_id, own = self._before_put(config, metadata)
        rider = self._rider(config, checkpoint, md, new_versions, agent_id, own)
        fault_point("before_put", hold=getattr(self.inner, "lock", None))
        self._shared.durable.begin(str(thread_id_of(config)), checkpoint["id"])
        try:
            if rider is None:
                stored = self.inner.put(config, checkpoint, md, new_versions)
            else:
                stored = put_with(self.inner, rider, config, checkpoint, md, new_versions)
        except BaseException as exc:
            err = self._put_failed(config, checkpoint, agent_id, own, exc)
            if err is exc:
                raise
            raise err from exc
        self._landed(agent_id, rider)
        fault_point("after_put")
        self._after_put(config, checkpoint, new_versions, agent_id, own)
        if own and agent_id is not None:
            self._finish_update(agent_id)
        return stored

    @mapped
    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        self._here()
        if self.fenced and CONFIG_KEY_RUNTIME in conf_of(config):
            md, agent_id, own = self._before_put(config, metadata)  # memory only: no I/O
        else:
            # An update_state may wait for a busy agent: on the loop, not on a worker thread.
            md, agent_id, own = await self._shared.keeper.aretry(
                lambda: self._before_put(config, metadata, 0.0)
            )
        rider = self._rider(config, checkpoint, md, new_versions, agent_id, own)
        fault_point("before_put", hold=getattr(self.inner, "lock", None))
        self._shared.durable.begin(str(thread_id_of(config)), checkpoint["id"])
        try:
            if rider is None:
                stored = await self._acall("put", config, checkpoint, md, new_versions)
            else:
                stored = await asyncio.to_thread(
                    put_with, self.inner, rider, config, checkpoint, md, new_versions
                )
        except BaseException as exc:
            err = self._put_failed(config, checkpoint, agent_id, own, exc)
            if err is exc:
                raise
            raise err from exc
        self._landed(agent_id, rider)
        fault_point("after_put")
        self._after_put(config, checkpoint, new_versions, agent_id, own)
        if own and agent_id is not None:
            await asyncio.to_thread(self._finish_update, agent_id)
        return stored

    @mapped
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """The inner ``put_writes`` (``task_path`` passed on); refused once the lease is lost."""
        self._here()
        self._before_writes(config)
        try:
            self._write_carrying(config, writes, task_id, task_path)
        except Exception as exc:
            err = self._failed_closing(config, exc, writes)
            if err is exc:
                raise
            raise err from exc
        fault_point("after_writes")

    @mapped
    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._here()
        self._before_writes(config)
        try:
            if self.carries and self.store._db.due.pending:
                # All of it on the worker thread, the taking of the ends included: a cancelled
                # call that never started leaves them due (the next transaction writes them),
                # never taken by a write that will not report back.
                await asyncio.to_thread(self._write_carrying, config, writes, task_id, task_path)
            else:
                await self._acall("put_writes", config, writes, task_id, task_path)
        except Exception as exc:
            err = self._failed_closing(config, exc, writes)
            if err is exc:
                raise
            raise err from exc
        fault_point("after_writes")

    def _write_carrying(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """The inner ``put_writes``, carrying the ends of the calls this task finished
        (``store._due``) in its transaction when there are any."""
        due = self.store._db.due
        ends = due.take(task_id) if self.carries and due.pending else None
        if not ends:
            self.inner.put_writes(config, writes, task_id, task_path)
            return
        committed = False
        try:
            rider = EndRider(ends, self.store._db.sql)
            put_writes_with(self.inner, rider, config, writes, task_id, task_path)
            committed = True
        finally:
            due.rode(ends, committed)

    # --- what other parts of langgraph-recall ask --------------------------------------------

    def _learn_graph(self, run: Run, loop: Any) -> None:
        """The run's graph's durable tool nodes: they settle the agent's open calls at the
        run's start and (``carries``) plan from its first checkpoint (``_plans``)."""
        run.planners = self._shared.plans.of_graph(getattr(loop, "nodes", None))

    def _settlers(
        self, run: Run, loop: Any, saved: CheckpointTuple | None
    ) -> builtins.list[tuple[Planner, Pending]]:
        """The run's durable tool nodes, each with the calls its run-start settle leaves to
        the run's pending tool task. Lease held, before the run's first node (and so before
        any briefing or model call): the agent's open calls are settled on any thread. A run
        with a new input drops the pending task of the checkpoint it starts from (LangGraph
        discards it), so then nothing is left to it; a resume (None, a Command) runs it."""
        resuming = loop is None or not is_new_input(loop.input)
        checkpoint = saved.checkpoint if saved is not None and resuming else None
        return [
            (planner, pending)
            for planner, pending in self._shared.plans.settlers(run.planners, checkpoint)
            if self._records_of(planner)
        ]

    def _records_of(self, planner: Planner) -> bool:
        """Whether ``planner`` records its calls in this checkpointer's store (a middleware
        given ``store=`` another store settles them itself, in ``before_agent``)."""
        own = getattr(planner, "store", None)
        return own is None or own is self.store

    def settled_at_start(self, agent_id: str, planner: Planner) -> bool:
        """Whether the run of ``agent_id`` going on here settled ``planner``'s calls at its
        start (it found it in the run's graph): ``RecallMiddleware`` then need not again."""
        run = self._shared.runs.run_of(agent_id)
        return (
            run is not None
            and self._records_of(planner)
            and any(p is planner for p in run.planners.values())
        )

    def plan_ahead(self, node: str, planner: Planner, agent_id: str | None = None) -> None:
        """Let ``planner`` (a durable tool node named ``node`` in the graph of ``agent_id``'s
        run) write the intents of the calls it will run with the checkpoint that triggers it
        (see ``_plans``), in this run and the later runs of its graph. Nothing happens unless
        this checkpointer is ``store.checkpointer()``'s."""
        if not self.carries:
            return
        run = None if agent_id is None else self._shared.runs.run_of(agent_id)
        planners = self._shared.plans.of_graph(None) if run is None else run.planners
        self._shared.plans.register(planners, node, planner)

    def take_planned(self, agent_id: str, action_id: str) -> Claim | None:
        """The claim of ``action_id`` written ahead by this process's run, handed over once."""
        return take(self._shared.runs.run_of(agent_id), action_id)

    def _free_stale(self, agent_id: str, entry: Any) -> None:
        """Give back the lease a run of ``agent_id`` here holds though it is over (its LangGraph
        loop failed to enter): ``store.undo`` calls it before it takes the agent's lease, as
        the agent's next run does (``RunLifecycle.free_stale``)."""
        if not self._shared.keeper.closed:
            self._shared.runs.free_stale(agent_id, entry)

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


def _is_store(store: Any) -> bool:
    from ..store import RecallStore

    return isinstance(store, RecallStore)
