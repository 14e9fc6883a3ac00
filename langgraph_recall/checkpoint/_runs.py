"""Knowing when a run starts and ends, from inside a checkpointer, and what happens then.

LangGraph tells a saver nothing about runs. It does call ``get_tuple`` exactly once at the start
of every root run, on the caller's thread, from ``PregelLoop.__enter__``/``__aenter__``, with
the run's ``Runtime`` in ``configurable["__pregel_runtime"]`` and ``checkpoint_ns == ""``;
``get_state`` and ``update_state`` call it without the runtime, subgraphs with a namespace.

The end is found through that same call: the loop passes its own ``checkpoint_config`` object,
so the calling frame's ``self`` is identified by identity, and a callback pushed on its (still
empty) exit stack runs when the loop exits, *after* the loop's background executor has finished
every pending write, whether the run finished, raised, was interrupted or was closed early.
If a LangGraph version ever calls from elsewhere, ``find_loop`` returns None: the run then ends
by ``RecallCheckpointer.invoke``'s ``finally``, or its lease expires (a warning says so).
If the loop's ``__enter__`` fails after our ``get_tuple`` returned (a bad resume value, say),
the stack never unwinds, and the lease would be renewed for as long as the process lives. A
``weakref.finalize`` on the loop ends the run when the loop is collected, but the loop sits in
a reference cycle of LangGraph's (its exit stack holds one of its own bound methods), and a
traceback kept for display (Jupyter's last error) keeps it alive anyway. So the run also
watches its loop's entry (``Entry``): once the thread or task that entered it has moved on,
or a grace period has passed, a loop that never finished ``__enter__`` has failed it, and
its run is ended: at the next run of the agent in this process, and at every lease renewal.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from .._context import CONFIG_KEY_RUNTIME, agent_id_of, configurable, thread_id_of
from .._errors import LeaseLost, RecallError
from .._recent import Recent
from ..store._ids import check_id
from ._faults import fault_point
from ._inputs import input_messages
from ._lease import HeldLease, LeaseKeeper
from ._plans import attempts_of, close_not_started
from ._recording import Recorder, TurnBuffer, catch_up, messages_in, only_messages, switch_thread
from ._turns import claim_turn, is_new_input, turn_id_of

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from ..store import RecallStore

try:  # pragma: no cover - private module; its location differs across langgraph versions
    from langgraph.pregel._loop import PregelLoop as _PregelLoop
except ImportError:  # pragma: no cover
    _PregelLoop = None  # type: ignore[assignment,misc]

log = logging.getLogger("langgraph_recall")

# The loop's ``__enter__`` does only in-memory work after our ``get_tuple`` (channels from the
# checkpoint, the input's writes): a loop still not entered this long after it (or after the
# lease's ttl, if shorter) failed to enter.
ENTRY_GRACE = 10.0
# What ``__enter__``/``__aenter__`` assigns last (``PregelLoop`` has a class default for it), so
# its presence in the loop's own attributes says the entry finished.
_ENTERED_MARK = "updated_channels"


@dataclass(frozen=True, eq=False)
class Entry:
    """Who called the root ``get_tuple`` of a run, from inside its loop's entry."""

    thread: threading.Thread
    task: asyncio.Task[Any] | None
    since: float = field(default_factory=time.monotonic)

    @classmethod
    def here(cls) -> Entry:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop on this thread
            task = None
        return cls(threading.current_thread(), task)

    def moved_on(self, now: Entry | None) -> bool:
        """Whether the entering thread or task can no longer be inside that entry: it is gone,
        or it is the one starting another run now (``now``)."""
        if self.task is not None:
            return self.task.done() or (now is not None and now.task is self.task)
        if not self.thread.is_alive():
            return True
        return now is not None and now.task is None and now.thread is self.thread


def run_key(config: Any) -> int | None:
    """An id for the run a root ``get_tuple`` belongs to (its Runtime), else None."""
    conf = configurable(config)
    if conf.get("checkpoint_ns"):
        return None
    runtime = conf.get(CONFIG_KEY_RUNTIME)
    return None if runtime is None else id(runtime)


def find_loop(config: Any, depth: int = 2, max_frames: int = 8) -> Any:
    """The PregelLoop whose ``__enter__``/``__aenter__`` is calling us with ``config``."""
    if _PregelLoop is None:
        return None
    frame: FrameType | None = sys._getframe(depth)
    for _ in range(max_frames):
        if frame is None:
            return None
        if frame.f_code.co_name in ("__enter__", "__aenter__"):
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, _PregelLoop) and candidate.checkpoint_config is config:
                return candidate
        frame = frame.f_back
    return None


@dataclass(eq=False)
class Run:
    """One root run that holds its agent's lease in this process."""

    key: int
    agent_id: str
    thread_id: str
    lease: HeldLease
    runtime: Any  # kept alive (and so its id unique) for as long as the run is registered
    turns: TurnBuffer = field(default_factory=lambda: TurnBuffer(()))
    finalizer: Any = None
    ended: bool = False
    # Set once ``end`` has given the lease back (``ended`` is set as it starts).
    released: threading.Event = field(default_factory=threading.Event)
    # The run's loop (weakly) and who was entering it, until the entry is seen finished.
    loop: weakref.ref[Any] | None = None
    entry: Entry | None = None
    # Started from an explicit checkpoint_id (time travel): its first checkpoint is a
    # deliberate second child of an old one, which ``inspect_thread`` must not call a fork.
    branched: bool = False
    # Claims written ahead with a checkpoint of this run (``_plans``), by action id, until the
    # tool node takes them; those left when the run ends never started.
    planned: dict[str, Any] = field(default_factory=dict)
    # The planners of the run's graph (``Plans.of_graph``): its durable tool nodes by name.
    planners: dict[str, Any] = field(default_factory=dict)
    # The id of the checkpoint the run started from ("" on a new thread; None until read).
    # Checkpoint ids grow with time, so a root checkpoint of this thread with a greater id is
    # one this run made: the durability barrier waits for its put without a saver read.
    start_id: str | None = None
    # The id of the last root checkpoint written or restored by this run.
    head_id: str | None = None
    # The messages of the run's new input, until its start records them (``_inputs``).
    request: list[BaseMessage] = field(default_factory=list)

    def restored(self, messages: list[BaseMessage] | None, start_id: str) -> None:
        self.turns = TurnBuffer(messages or (), self.thread_id)
        self.start_id = self.head_id = start_id


def owner_of(saved: CheckpointTuple | None) -> str | None:
    """The agent a checkpoint was written for (None: written outside any agent's lease)."""
    owner = (saved.metadata or {}).get("recall_agent") if saved is not None else None
    return None if owner is None else str(owner)


def foreign_agent(thread_id: str, owner: str, agent_id: str) -> RecallError:
    """The refusal of a write for ``agent_id`` after a checkpoint ``owner`` wrote."""
    return RecallError(
        f"the checkpoints of thread {thread_id!r} were written for agent {owner!r}, and this "
        f"is for agent {agent_id!r}; nothing was written. Pass that agent: "
        f'config["configurable"]["agent_id"] = {owner!r} (a config from get_state or '
        "get_state_history does not carry it)",
        code="invalid_value",
        agent_id=agent_id,
        owner=owner,
    )


# Tries of a run's final write whose connection's session ended under it (a terminated
# backend, a server restart): each retry takes a fresh connection (``_dberrors``).
FINAL_WRITE_TRIES = 3


class FinalWrite:
    """A run's last write, made by ``LeaseKeeper.release`` as it gives the lease back: the
    run's last messages are recorded in the same transaction (``store._end_run``), and only
    while the lease is still the run's: one commit where there were two, which is most of
    what a short run (a chat turn) paid at its end.

    A write that fails because its session ended is tried again on a fresh connection: it is
    one transaction, rolled back whole, and repeating it records nothing twice (recorded ids
    are skipped; the release matches the holder and epoch). Failing still (the database
    unreachable, its disk full), ``error`` holds why, for the run's end to raise: the
    messages stay in the checkpoint, recorded by the agent's next run or a resubmission of
    the same turn (``_turns``)."""

    __slots__ = ("life", "run", "messages", "ran", "error")

    def __init__(self, life: RunLifecycle, run: Run, messages: list[BaseMessage]) -> None:
        self.life, self.run, self.messages, self.ran = life, run, messages, False
        self.error: Exception | None = None

    def __call__(self, holder: str, epoch: int) -> None:
        self.ran = True
        life, run = self.life, self.run
        recorder = life.recorder
        if run.agent_id in recorder.broken:
            # A write failed (a hand-over, or the catch-up): nothing was written after it, so
            # the whole last list, sent again, fills the gap in order (recorded ids skipped).
            self.messages = run.turns.whole_messages()
        for tries_left in range(FINAL_WRITE_TRIES - 1, -1, -1):
            try:
                ok = life.store._end_run(
                    run.agent_id, holder, epoch, self.messages, thread_id=run.thread_id
                )
            except Exception as exc:
                self.error = exc
                if tries_left and isinstance(exc, RecallError) and exc.details.get("session_lost"):
                    continue
                break
            self.error = None
            if ok:
                # Every message of the run's last checkpoint is recorded now.
                recorder.broken.discard(run.agent_id)
                life.complete[run.agent_id] = (run.thread_id, run.head_id, epoch)
            return
        # The checkpoints hold the messages: later writes of the agent's turns wait for the
        # next run's catch-up, in order. The lease must still go (else the next run waits
        # out its ttl): on its own, and if that fails too, the keeper warns that it expires.
        recorder.broken.add(run.agent_id)
        life.store.release_lease(run.agent_id, holder, epoch)

    def unrecorded(self) -> RecallError | None:
        """The error the run ends with when its last messages could not be recorded."""
        err = self.error
        if err is None:
            return None
        out = RecallError(
            f"the run of agent {self.run.agent_id!r} on thread {self.run.thread_id!r} "
            f"finished and its checkpoints are saved, but its last messages could not be "
            f"recorded as turns: {err} The messages are safe in the checkpoint: the agent's "
            "next run records them before its first step, and invoking the same turn again "
            "(the same configurable turn_id, through RecallCheckpointer.invoke) records them "
            "without running anything twice.",
            code=err.code if isinstance(err, RecallError) else "database",
            agent_id=self.run.agent_id,
            thread_id=self.run.thread_id,
            unrecorded=len(self.messages),
        )
        out.__cause__ = err
        return out


class RunLifecycle:
    """Starts and ends the root runs of one RecallCheckpointer (and its allowlist copies)."""

    def __init__(
        self,
        *,
        store: RecallStore,
        inner: BaseCheckpointSaver,
        keeper: LeaseKeeper,
        recorder: Recorder,
        messages_key: str,
    ) -> None:
        self.store = store
        self.inner = inner  # any copy's inner saver reads the same checkpoints
        self.keeper = keeper
        self.recorder = recorder
        self.messages_key = messages_key
        self.lock = threading.Lock()
        self.runs: dict[int, Run] = {}  # by run key
        self.by_agent: dict[str, Run] = {}  # the one run per agent the lease keeper allows
        # Runs being ended on another thread (a collected loop's finalizer, the renewer's
        # reaper, a loop exiting), until their lease is given back.
        self.ending: dict[str, Run] = {}
        # agent -> (thread, lease epoch) of this process's last run of it: while the epoch is
        # unchanged no other process ran the agent since, so its thread marker needs no I/O.
        self.last_thread: Recent[str, tuple[str, int]] = Recent()
        # agent -> (thread, checkpoint id, lease epoch) where this process's last run of it
        # ended with every message of that checkpoint recorded (``FinalWrite``).
        self.complete: Recent[str, tuple[str, str | None, int]] = Recent()
        self.warned_no_loop = False
        keeper.reaper = self.reap  # its renewer ends runs whose loop failed to enter

    def run_of(self, agent_id: str) -> Run | None:
        return self.by_agent.get(agent_id)

    def begin(
        self,
        config: RunnableConfig,
        loop: Any,
        entry: Entry | None = None,
        wait: float | None = None,
    ) -> Run | None:
        """Take the lease and refuse a resubmitted turn. None if this run already began.

        ``entry``: who is entering ``loop`` (the caller of ``get_tuple``; this may run on a
        worker thread). ``wait``: seconds to wait for a busy agent (default: the keeper's)."""
        key = run_key(config)
        assert key is not None
        with self.lock:
            if key in self.runs:  # a second root get_tuple of the same run
                return None
        conf = configurable(config)
        runtime = conf[CONFIG_KEY_RUNTIME]
        # Every identifier the run will write under is checked before the lease is taken.
        agent_id, thread_id = agent_id_of(config), str(thread_id_of(config))
        check_id("thread_id", thread_id)
        turn_id = turn_id_of(config)
        control = loop.control if loop is not None else getattr(runtime, "control", None)
        self.free_stale(agent_id, entry)
        lease = self.keeper.acquire(agent_id, control, wait)
        try:
            if turn_id and loop is not None and is_new_input(loop.input):
                duplicate = claim_turn(
                    self.store, self.inner, agent_id=agent_id, thread_id=thread_id, turn_id=turn_id
                )
                if duplicate is not None:
                    self._record_left(agent_id, lease.epoch, duplicate.details)
                    raise duplicate
            self._catch_up_previous_thread(agent_id, thread_id, lease.epoch)
            request = [] if loop is None else only_messages(input_messages(loop, self.messages_key))
        except BaseException:
            self.keeper.release(agent_id)
            raise
        run = Run(
            key, agent_id, thread_id, lease, runtime, branched=bool(conf.get("checkpoint_id"))
        )
        run.request = request
        with self.lock:
            self.runs[key] = run
            self.by_agent[agent_id] = run
        if loop is not None:
            run.finalizer = weakref.finalize(loop, self._orphaned, key)
            run.loop, run.entry = weakref.ref(loop), entry or Entry.here()
        elif not self.warned_no_loop:
            self.warned_no_loop = True
            warnings.warn(
                "RecallCheckpointer could not find this LangGraph version's run loop: leases "
                "are released only by RecallCheckpointer.invoke()/ainvoke() or on expiry",
                RuntimeWarning,
                stacklevel=4,
            )
        return run

    def _record_left(self, agent_id: str, epoch: int, turn: dict[str, Any]) -> None:
        """A turn submitted again: record what its thread's checkpoints hold and the agent's
        turns lack (its run's end could not record them: the database was unreachable), so
        the answer from the record comes with every message recorded. Nothing to do when
        this process's last run of the agent ended at that very checkpoint with all of it
        recorded, under this lease epoch."""
        thread_id = turn["thread_id"]
        if (
            turn["at_head"]
            and self.complete.get(agent_id) == (thread_id, turn["checkpoint_id"], epoch)
            and agent_id not in self.recorder.broken
        ):
            return
        self.recorder.flush(agent_id, timeout=max(30.0, self.keeper.ttl))
        saved = self.inner.get_tuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        )
        messages = (
            messages_in(saved.checkpoint["channel_values"].get(self.messages_key))
            if saved
            else None
        )
        if messages:
            catch_up(self.store, agent_id, thread_id, messages)
        self.recorder.broken.discard(agent_id)

    def _catch_up_previous_thread(self, agent_id: str, thread_id: str, epoch: int) -> None:
        """The agent moves to another thread: the thread it ran on before may hold messages a
        crash left unrecorded there. Queue them before this run's own."""
        if self.last_thread.get(agent_id) == (thread_id, epoch):
            return  # our own last run of it, same thread, and nobody else's in between
        previous = switch_thread(self.store, agent_id, thread_id)
        self.last_thread[agent_id] = (thread_id, epoch)
        if previous is None:
            return
        saved = self.inner.get_tuple({"configurable": {"thread_id": previous, "checkpoint_ns": ""}})
        if saved is not None:
            messages = messages_in(saved.checkpoint["channel_values"].get(self.messages_key))
            if messages:
                self.recorder.submit(agent_id, previous, messages, catch_up=True)

    def restored(self, run: Run, saved: CheckpointTuple | None) -> None:
        """The run loaded ``saved``: its messages are history, never recorded by this run.

        Raises ``invalid_value`` if ``saved`` was written for another agent."""
        owner = owner_of(saved)
        if owner is not None and owner != run.agent_id:
            # A config from get_state_history() carries no agent_id, so the run fell back to
            # the thread id: another agent, another lease, and new action keys, so every
            # external call of the replayed steps ran a second time.
            raise foreign_agent(run.thread_id, owner, run.agent_id)
        values = saved.checkpoint["channel_values"] if saved else {}
        messages = messages_in(values.get(self.messages_key))
        run.restored(messages, saved.checkpoint["id"] if saved else "")
        if not messages:
            return
        if (
            self.complete.get(run.agent_id) == (run.thread_id, run.start_id, run.lease.epoch)
            and run.agent_id not in self.recorder.broken
        ):
            # This process's last run of the agent ended at this very checkpoint with all of
            # it recorded, and no other process has held the lease since (same epoch): nothing
            # to catch up, so no read of the turns and no hand-over to wait for.
            return
        # A crash may have left some of these checkpointed but unrecorded.
        self.recorder.submit(run.agent_id, run.thread_id, messages, catch_up=True)

    def settle(self, run: Run) -> None:
        """Wait for the catch-up queued at this run's start (a crashed predecessor's unrecorded
        turns, on this thread or the agent's previous one), then record the run's input
        messages: the run's first node, and any briefing it builds, then reads complete
        records, the request included."""
        caught_up = self.recorder.flush(run.agent_id, timeout=max(30.0, self.keeper.ttl))
        request, run.request = run.request, []
        if not request or not caught_up or run.agent_id in self.recorder.broken:
            # Recorded now, the request would come before turns still owed (a catch-up not
            # written): it is recorded from the checkpoints instead, after them, in order.
            return
        try:
            self.store.record(run.agent_id, request, thread_id=run.thread_id)
        except Exception as exc:
            self.recorder.failed(run.agent_id, exc)  # the run's end records it, in order
            return
        run.turns.recorded(request)

    async def asettle(self, run: Run) -> None:
        await asyncio.to_thread(self.settle, run)

    def end(self, run: Run) -> None:
        """The run's loop exited (every write done): record, release, report a lost lease."""
        with self.lock:
            if run.ended:
                return
            run.ended = True
            self.runs.pop(run.key, None)
            if self.by_agent.get(run.agent_id) is run:
                del self.by_agent[run.agent_id]
            self.ending[run.agent_id] = run
        try:
            self._end(run)
        finally:
            with self.lock:
                if self.ending.get(run.agent_id) is run:
                    del self.ending[run.agent_id]
            run.released.set()

    def _end(self, run: Run) -> None:
        if run.finalizer is not None:
            run.finalizer.detach()
        self.complete.pop(run.agent_id, None)  # set again by a final write that records all
        final: FinalWrite | None = None
        try:
            fault_point("before_release")
            # Recorded before the lease goes: the next holder's turns must come after these.
            # Earlier hand-overs first (usually none are left: nothing to wait for), then the
            # rest with the lease's release, on this thread, which waits for them anyway: no
            # hand-over to the recorder's thread and back at the end of every run.
            self.recorder.flush(run.agent_id, timeout=max(30.0, self.keeper.ttl))
            if run.lease.lost is None:
                # A run that lost its lease leaves its messages to the next holder, whose
                # catch-up records them from the checkpoints in order before its own.
                final = FinalWrite(self, run, run.turns.drain())
                # Calls planned with a checkpoint whose tool never started (the run paused or
                # went elsewhere): closed while the lease is still ours, so no later reader,
                # here or in another process, takes them for calls in doubt. A run that lost
                # its lease leaves them open: the new holder sees them in doubt, the safe side.
                leftover, run.planned = list(run.planned.values()), {}
                close_not_started(self.store, attempts_of(leftover))
        finally:
            lost = self.keeper.release(run.agent_id, final)
        if final is not None and not final.ran and run.lease.lost is None:
            # The keeper had given the lease up already (it was closed): record them anyway.
            # Not when the lease was lost meanwhile (the renewer found another holder): the
            # new holder records them from the checkpoints, before its own.
            self.recorder.write_now(run.agent_id, run.thread_id, final.messages)
        if lost is not None:
            raise lost
        unrecorded = final.unrecorded() if final is not None else None
        if unrecorded is not None:
            # Never a silent return with turns missing: invoke() raises, saying where they are.
            raise unrecorded

    async def aend(self, run: Run) -> None:
        await asyncio.to_thread(self.end, run)

    def end_at_exit(self, loop: Any, run: Run) -> None:
        """Arrange for ``end`` when ``loop`` exits (its exit stack is empty at this point, so
        the callback runs last, after the loop's executor has finished every write)."""
        if loop is None:
            return
        if hasattr(loop.stack, "push_async_callback"):
            loop.stack.push_async_callback(self.aend, run)
        else:
            loop.stack.callback(self.end, run)

    def end_agent(self, agent_id: str) -> None:
        """End the agent's run if its loop never reported its end (``invoke``'s finally)."""
        with self.lock:
            run = self.by_agent.get(agent_id)
        if run is not None:
            try:
                self.end(run)
            except LeaseLost:
                pass

    def _never_entered(self, run: Run, now: Entry | None) -> bool:
        """Whether ``run``'s loop failed its ``__enter__`` (see the module docstring)."""
        entry, ref = run.entry, run.loop
        if entry is None or ref is None or run.ended:
            return False
        loop = ref()
        if loop is None:
            # Collected without exiting: its __enter__ failed. Its finalizer ends the run on a
            # thread of its own, which may not have started yet: end it here, now (the
            # finalizer's end then finds it ended).
            return True
        if _ENTERED_MARK in vars(loop):
            run.entry = None  # entered; nothing left to watch
            return False
        if entry.moved_on(now):
            return True
        return time.monotonic() - entry.since > min(ENTRY_GRACE, self.keeper.ttl)

    def free_stale(self, agent_id: str, entry: Entry | None) -> None:
        """Give back the agent's lease if a run of it here is over but still holds it: before
        this process acts for the agent again (a run, ``store.undo``). ``entry``: who asks."""
        # A run of this agent whose loop failed to enter still holds the slot: end it first,
        # or the caller would be refused (lease_held) by a run that is not running.
        self.reap(agent_id, entry)
        with self.lock:
            ending = self.ending.get(agent_id)
        if ending is not None:
            # The agent's previous run here is over and being ended on another thread (after
            # its loop failed to enter, the collected loop's finalizer ends it on a thread of
            # its own): its release is moments away. Taking the lease before it was refused
            # with lease_held, by a run that no longer runs.
            ending.released.wait(max(30.0, self.keeper.ttl))

    def reap(self, agent_id: str | None = None, now: Entry | None = None) -> set[str]:
        """End the runs (of ``agent_id``, or all) whose loop failed to enter; their agents."""
        with self.lock:
            if agent_id is None:
                runs = list(self.runs.values())
            else:
                run = self.by_agent.get(agent_id)
                runs = [] if run is None else [run]
        reaped: set[str] = set()
        for run in runs:
            if self._never_entered(run, now):
                log.warning(
                    "the run of agent %r on thread %r never started (its LangGraph loop failed "
                    "to enter, after its lease was taken); its lease is given back",
                    run.agent_id,
                    run.thread_id,
                )
                self._quietly_end(run)
                reaped.add(run.agent_id)
        return reaped

    def _orphaned(self, key: int) -> None:
        """A run's loop was collected without exiting (its __enter__ failed): end the run."""
        with self.lock:
            run = self.runs.get(key)
        if run is not None:
            # Not on the collecting thread, which may be an event loop: a thread of its own.
            threading.Thread(target=self._quietly_end, args=(run,), daemon=True).start()

    def _quietly_end(self, run: Run) -> None:
        try:
            self.end(run)
        except Exception:
            pass
