"""The steps around a checkpoint's write, written once for ``put`` and ``aput`` (and for
``put_writes``), which differ only in how they call the inner saver.

Before the write: the lease epoch stamped into the metadata (``_before_put``), or for an
``update_state`` outside any run the lease taken for the one write; the intents planned to
commit with the checkpoint (``_rider``). After it: the planned claims handed to the run
(``_landed``), the checkpoint's new messages queued for recording and ``wait_durable`` callers
woken (``_after_put``). A failed write becomes ``LeaseLost`` when the fence refused it
(``_put_failed``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from .._context import CONFIG_KEY_DURABILITY, CONFIG_KEY_RUNTIME, agent_id_of, thread_id_of
from .._errors import LeaseHeld, LeaseLost, RecallError
from ..store._codec import unstorable
from ._fence import is_fence_error
from ._plans import PlanRider, attempts_of, close_not_started
from ._recording import messages_in
from ._runs import foreign_agent, owner_of
from ._turns import TURN_KEY

if TYPE_CHECKING:
    from ..store import RecallStore
    from ._saver import _Shared

log = logging.getLogger("langgraph_recall")


class PutSteps:
    """The checks and bookkeeping of ``RecallCheckpointer``'s writes."""

    inner: Any
    store: RecallStore
    _shared: _Shared
    messages_key: str
    carries: bool

    def _before_put(
        self, config: RunnableConfig, metadata: CheckpointMetadata, wait: float | None = None
    ) -> tuple[CheckpointMetadata, str | None, bool]:
        """(metadata to write, agent whose lease fences it, whether we took it just for this).

        ``wait``: seconds an ``update_state`` waits for a busy agent (default: the keeper's)."""
        conf = conf_of(config)
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

    def _failed_closing(
        self, config: RunnableConfig, exc: BaseException, values: Any = None
    ) -> BaseException:
        """A write that failed because the checkpointer was closed while it was on its way (its
        lease check passed, then ``close`` gave the lease up and closed the connections it
        writes on): the run's ``LeaseLost``, as when the check comes after the close. A write
        of ``values`` that LangGraph's serializer refused: ``invalid_value`` naming the part
        at fault (``unstorable_write``)."""
        refused = unstorable_write(values, exc)
        if refused is not None:
            return refused
        if self._shared.keeper.closed and CONFIG_KEY_RUNTIME in conf_of(config):
            return self._closed_under(_agent(config, conf_of(config)))
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
        return self._failed_closing(config, exc, checkpoint.get("channel_values"))

    def _after_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        agent_id: str | None,
        own_lease: bool,
    ) -> None:
        conf = conf_of(config)
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
        self._shared.recorder.flush(agent_id, timeout=max(30.0, self._shared.keeper.ttl))
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
        conf = conf_of(config)
        if conf.get("checkpoint_ns") or conf.get(CONFIG_KEY_DURABILITY) == "exit":
            # Under durability="exit" a durable call is refused before it starts (nothing is
            # saved before its side effect): a plan would only be closed as never started.
            return None
        run = self._shared.runs.run_of(agent_id)
        if run is None:  # no run holds the lease here: nothing to hand the claims to
            return None
        epoch: int | None = md.get("recall_epoch")  # type: ignore[assignment]
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

    def _before_writes(self, config: RunnableConfig) -> None:
        conf = conf_of(config)
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


def unstorable_write(values: Any, exc: BaseException) -> RecallError | None:
    """``invalid_value`` naming what in a checkpoint's ``values`` (its channels, or a task's
    writes) LangGraph's serializer could not store (an int beyond 64 bits in a tool call's
    arguments, say), when that is why the write failed; None for any other failure. Nothing of
    that write was saved: a tool call it holds has not run."""
    if (
        values is None
        or isinstance(exc, RecallError)
        or not isinstance(exc, (TypeError, ValueError, RecursionError, OverflowError))
    ):
        return None
    if not isinstance(values, dict):  # put_writes' (channel, value) pairs
        values = {channel: value for channel, value, *_ in values}
    found = unstorable(values, root="channels")
    if found is None:
        return None
    return RecallError(
        f"the checkpoint cannot be saved: {found} ({type(exc).__name__}: {exc}). Nothing of "
        "this step was saved and no tool call it holds ran. Pass numbers beyond 64 bits as "
        "str or Decimal, and keep values less deeply nested.",
        code="invalid_value",
    )


def conf_of(config: RunnableConfig) -> dict[str, Any]:
    # The hot path reads the run's configurable in place: the shared helper copies it.
    return (config or {}).get("configurable") or {}  # type: ignore[return-value]


def _agent(config: RunnableConfig, conf: dict[str, Any]) -> str:
    agent = conf.get("agent_id")
    if type(agent) is str and agent:  # checked by the run's start or by the lease's write
        return agent
    return agent_id_of(config)  # the thread id, or ``invalid_value`` saying what to pass


def _stamped(
    metadata: CheckpointMetadata, agent_id: str, epoch: int, branched: bool = False
) -> CheckpointMetadata:
    """The metadata plus the fencing token the trigger in ``_fence`` compares."""
    stamped: dict[str, Any] = {**metadata, "recall_agent": agent_id, "recall_epoch": epoch}
    if branched:
        stamped["recall_branch"] = True
    return stamped  # type: ignore[return-value]
