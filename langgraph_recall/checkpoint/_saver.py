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

The wrapper exposes exactly the capabilities of the saver it wraps (``_capabilities``), and
serves async calls on sync-only savers (``SqliteSaver``, ``PostgresSaver``) by running the sync
method in a thread, so ``ainvoke`` and Jupyter's ``await`` work with them. It also carries what
other parts ask of it: ``wait_durable``/``await_durable`` (``_durable``), ``current_epoch``, and
the ``invoke``/``ainvoke`` turn helper (``_turns``).
"""

from __future__ import annotations

import asyncio
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

from .._context import CONFIG_KEY_DURABILITY, CONFIG_KEY_RUNTIME, agent_id_of, thread_id_of
from .._errors import LeaseHeld, LeaseLost, RecallError
from .._process import Birth, not_picklable
from ..store._due import EndRider
from ._capabilities import variant
from ._durable import DurabilityBarrier, DurableLog
from ._faults import fault_point
from ._fence import is_fence_error
from ._lease import LeaseKeeper, check_wait, new_holder_id
from ._plans import Planner, PlanRider, Plans, attempts_of, close_not_started, take
from ._recording import Recorder, messages_in
from ._runs import Entry, Run, RunLifecycle, find_loop, foreign_agent, owner_of, run_key
from ._same_db import (
    can_carry,
    close_same_database_saver,
    forget_same_database_saver,
    is_fenced,
    put_with,
    put_writes_with,
)
from ._turns import TURN_KEY, TurnHelpers

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


class RecallCheckpointer(TurnHelpers, DurabilityBarrier, BaseCheckpointSaver):
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
        except BaseException:
            runs.end(run)
            raise
        runs.end_at_exit(loop, run)
        return saved

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
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._usable()
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
        self, config: RunnableConfig, metadata: CheckpointMetadata, wait: float | None = None
    ) -> tuple[CheckpointMetadata, str | None, bool]:
        """(metadata to write, agent whose lease fences it, whether we took it just for this).

        ``wait``: seconds an ``update_state`` waits for a busy agent (default: the keeper's)."""
        conf = _conf(config)
        keeper = self._shared.keeper
        if CONFIG_KEY_RUNTIME in conf:
            agent_id = _agent(config, conf)
            if keeper.held(agent_id) is None:
                if self._shared.runs.run_of(agent_id) is not None:
                    # The run took the lease and the keeper gave it up since (the checkpointer
                    # was closed under it): an unstamped write would pass the fence, and
                    # another process may be the holder by now.
                    raise self._closed_under(agent_id)
                return metadata, None, False  # a run that took no lease (nested foreign graph)
            epoch = keeper.check_write(agent_id)
            run = self._shared.runs.run_of(agent_id)
            branched = run is not None and run.branched
            stamped = _stamped(metadata, agent_id, epoch, branched)
            turn = conf.get(TURN_KEY)
            if turn is not None and not isinstance(turn, str):
                # LangGraph copies configurable["turn_id"] into the metadata as given (42, or
                # nothing for a UUID), and a resubmission is found by the text turn_id_of makes
                # of it: a checkpoint of turn 42 did not match "42", so the turn ran again.
                stamped[TURN_KEY] = str(turn)  # type: ignore[literal-required]
            return stamped, agent_id, False
        elif metadata.get("source") in ("update", "fork"):
            # update_state / a __copy__ outside any run: a write like a run's, so it needs the
            # lease for its duration, or it could fork the history under a running holder.
            agent_id = self._updating_agent(config, conf)
            epoch = keeper.acquire(agent_id, wait=wait).epoch
            return _stamped(metadata, agent_id, epoch), agent_id, True
        return metadata, None, False  # a direct call (conformance suites, tools)

    def _updating_agent(self, config: RunnableConfig, conf: dict[str, Any]) -> str:
        """The agent an ``update_state`` writes for: the one whose checkpoint it follows. A
        config from ``get_state`` carries no agent_id; falling back to the thread id took
        another agent's lease (no bar to the owner's runs) and stamped the new checkpoint for
        that agent, so a run from it replayed the owner's calls under new keys."""
        owner = owner_of(self.inner.get_tuple(config))
        named = conf.get("agent_id")
        if owner is None:
            return _agent(config, conf)
        if named and str(named) != owner:
            raise foreign_agent(str(thread_id_of(config)), owner, str(named))
        return owner

    def _closed_under(self, agent_id: str) -> LeaseLost:
        return LeaseLost(
            f"agent {agent_id!r}: the checkpointer was closed while its run was going; nothing "
            "more is written. Run it again on an open one.",
            agent_id=agent_id,
            holder=self._shared.keeper.holder,
        )

    def _failed_closing(self, config: RunnableConfig, exc: BaseException) -> BaseException:
        """A write that failed because the checkpointer was closed while it was on its way (its
        lease check passed, then ``close`` gave the lease up and closed the connections it
        writes on): the run's ``LeaseLost``, as when the check comes after the close."""
        if self._shared.keeper.closed and CONFIG_KEY_RUNTIME in _conf(config):
            return self._closed_under(_agent(config, _conf(config)))
        return exc

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
        return self._failed_closing(config, exc)

    def _after_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        agent_id: str | None,
        own_lease: bool,
    ) -> None:
        conf = _conf(config)
        thread_id = str(conf.get("thread_id"))
        shared = self._shared
        if agent_id is not None and not conf.get("checkpoint_ns"):
            run = None if own_lease else shared.runs.run_of(agent_id)
            if run is not None:
                run.head_id = checkpoint["id"]
            if self.messages_key in new_versions:
                messages = messages_in(checkpoint["channel_values"].get(self.messages_key))
                if messages:
                    if own_lease:
                        shared.recorder.submit(agent_id, thread_id, messages, catch_up=True)
                    elif run is not None:
                        due = run.turns.note(messages)  # usually nothing yet: see TurnBuffer
                        if due:
                            shared.recorder.submit(agent_id, thread_id, due)
        shared.durable.mark(thread_id, checkpoint["id"])

    def _finish_update(self, agent_id: str) -> None:
        self._shared.recorder.flush(agent_id, timeout=max(30.0, self.lease_ttl))
        self._shared.keeper.release(agent_id)

    def _rider(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        md: CheckpointMetadata,
        new_versions: ChannelVersions,
        agent_id: str | None,
        own: bool,
    ) -> PlanRider | None:
        """The intents planned to commit with this checkpoint (see ``_plans``), if any."""
        if not self.carries or agent_id is None or own:
            return None
        conf = _conf(config)
        if conf.get("checkpoint_ns") or conf.get(CONFIG_KEY_DURABILITY) == "exit":
            # Under durability="exit" a durable call is refused before it starts (nothing is
            # saved before its side effect): a plan would only be closed as never started.
            return None
        run = self._shared.runs.run_of(agent_id)
        if run is None:  # no run holds the lease here: nothing to hand the claims to
            return None
        epoch = md.get("recall_epoch")  # type: ignore[attr-defined]
        try:
            return self._shared.plans.rider(
                run.planners, checkpoint, new_versions, agent_id, str(conf.get("thread_id")), epoch
            )
        except Exception as exc:  # planning ahead must never cost a checkpoint: claim instead
            log.warning("could not plan the intents of a checkpoint's calls (%s)", exc)
            return None

    def _landed(self, agent_id: str | None, rider: PlanRider | None) -> None:
        """Hand the planned claims to the run (before ``_after_put`` wakes the tool node)."""
        if rider is None or agent_id is None:
            return
        run = self._shared.runs.run_of(agent_id)
        try:
            claims = rider.claims()
        except Exception as exc:
            # Committed, but which rows are ours is unknown: leave them. The node's own claim
            # then finds them open and reports them in doubt: the safe side. Closing them could
            # close a row this checkpoint did not insert, a call that may have run.
            log.warning("planned intents committed but not readable back (%s)", exc)
            return
        if run is None:  # cannot happen while the run holds the lease; close them anyway
            close_not_started(self.store, attempts_of(claims))
            return
        for claim in claims:
            run.planned[claim.action.action_id] = claim

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

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        self._here()
        if self.fenced and CONFIG_KEY_RUNTIME in _conf(config):
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

    def _before_writes(self, config: RunnableConfig) -> None:
        conf = _conf(config)
        keeper = self._shared.keeper
        agent_id = _agent(config, conf)
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
        self._here()
        self._before_writes(config)
        try:
            self._write_carrying(config, writes, task_id, task_path)
        except Exception as exc:
            err = self._failed_closing(config, exc)
            if err is exc:
                raise
            raise err from exc
        fault_point("after_writes")

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
            err = self._failed_closing(config, exc)
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

    # --- plain delegation -------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self._usable()
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        self._usable()
        await self._acall("delete_thread", thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._usable()
        self.inner.delete_for_runs(run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._usable()
        await self._acall("delete_for_runs", run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._usable()
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._usable()
        await self._acall("copy_thread", source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._usable()
        self.inner.prune(thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._usable()
        await self._acall("prune", thread_ids, strategy=strategy)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        self._usable()
        # The inner saver's (SQL) version, never the base class's get_tuple walk through us.
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Any:
        self._usable()
        return await self._acall("get_delta_channel_history", config=config, channels=channels)

    def _here(self) -> None:
        self._birth.check("RecallCheckpointer")

    def _usable(self) -> None:
        """``_here``, and refuse a read or a new run once the checkpointer or its store is
        closed. (A write of a run already going is not refused here: closed under it, that run
        ends with ``lease_lost``, see ``_closed_under``.)"""
        self._here()
        if self.store._closed:
            raise RecallError(
                "the RecallStore of this checkpointer is closed; open the store again "
                "(RecallStore.open) and make its checkpointer anew",
                code="closed",
            )
        if self._shared.inner_closed:
            raise RecallError(
                "this checkpointer is closed, and the database connections store.checkpointer() "
                "made for it too; make a new one with store.checkpointer()",
                code="closed",
            )

    def get_next_version(self, current: Any, channel: None) -> Any:  # bound to inner's in __init__
        return self.inner.get_next_version(current, channel)

    async def _acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The inner saver's async method; its sync twin in a thread where the async raises."""
        self._here()
        if name not in self._shared.sync_only:
            try:
                return await getattr(self.inner, "a" + name)(*args, **kwargs)
            except NotImplementedError:
                # SqliteSaver / PostgresSaver: sync only. Remember, and use the sync method.
                self._shared.sync_only.add(name)
        return await asyncio.to_thread(getattr(self.inner, name), *args, **kwargs)

    # --- what other parts of langgraph-recall ask --------------------------------------------

    def _learn_graph(self, run: Run, loop: Any) -> None:
        """The run's graph's durable tool nodes plan from its first checkpoint (``_plans``)."""
        if self.carries:
            run.planners = self._shared.plans.of_graph(getattr(loop, "nodes", None))

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


def _conf(config: RunnableConfig) -> dict[str, Any]:
    # The hot path reads the run's configurable in place: the shared helper copies it.
    return (config or {}).get("configurable") or {}  # type: ignore[return-value]


def _agent(config: RunnableConfig, conf: dict[str, Any]) -> str:
    agent = conf.get("agent_id") or conf.get("thread_id")
    return str(agent) if agent else agent_id_of(config)  # the latter raises, saying what to do


def _stamped(
    metadata: CheckpointMetadata, agent_id: str, epoch: int, branched: bool = False
) -> CheckpointMetadata:
    """The metadata plus the fencing token the trigger in ``_fence`` compares."""
    stamped: dict[str, Any] = {**metadata, "recall_agent": agent_id, "recall_epoch": epoch}
    if branched:
        stamped["recall_branch"] = True
    return stamped  # type: ignore[return-value]


def _is_store(store: Any) -> bool:
    from ..store import RecallStore

    return isinstance(store, RecallStore)
