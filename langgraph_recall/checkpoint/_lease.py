"""One process acts for an agent at a time: taking, renewing, releasing and losing its lease.

A ``LeaseKeeper`` belongs to one ``RecallCheckpointer`` (and every copy ``with_allowlist``
makes), under one holder id, ``hostname:pid:uuid``. It keeps at most one lease per agent:

- ``acquire`` takes the store's lease row (free, expired or ours), waiting up to ``wait``
  seconds, else raises ``LeaseHeld`` naming the holder and the expiry. A second run of the same
  agent inside this process is refused the same way: one holder id must not mean two writers.
- A daemon thread renews every held lease at ``ttl / 3``, off the hot path. A renewal that finds
  another holder marks the lease lost and asks the run to drain (``RunControl.request_drain``):
  the run stops at the next step boundary and writes nothing more.
- ``check_write`` runs before each checkpoint write. It always refuses a lost lease. For a saver
  without the database fence it also self-fences: it refuses when no renewal has succeeded for
  ``ttl - margin`` seconds (local monotonic clock, measured from the start of the last
  successful call, so it errs early), and re-reads the lease row to catch a takeover.
  What remains for such savers is the window between that check and the write landing: a
  process frozen exactly there, for longer than the lease, can land one stale checkpoint.
  ``store.checkpointer()`` closes that window with the trigger in ``_fence``.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .._checks import is_seconds
from .._errors import LeaseHeld, LeaseLost, RecallError
from .._wakeups import LoopWakeups

if TYPE_CHECKING:
    from ..store import RecallStore


T = TypeVar("T")

IDLE_EXIT = 60.0
"""Seconds the renewal thread stays up with no lease to renew (so back-to-back runs share it)."""


def new_holder_id() -> str:
    """``hostname:pid:uuid``: unique per checkpointer, readable in ``lease_held`` messages."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class HeldLease:
    """A lease this process holds for one agent."""

    agent_id: str
    epoch: int
    # Local monotonic time until which nobody else can have taken the lease: the start of the
    # last successful acquire/renew call plus the ttl (the database stamped it later than that).
    valid_until: float
    lost: LeaseLost | None = None
    controls: list[Any] = field(default_factory=list)
    releasing: bool = False  # ``release`` is giving it back in the database


def check_wait(wait: Any) -> None:
    if not is_seconds(wait) or wait < 0 or wait == math.inf:
        raise RecallError(
            f"wait must be a finite number of seconds, 0 or more, got {wait!r}",
            code="invalid_value",
        )


class Backoff:
    """When to try a busy agent's lease again: the sync and async waits share it."""

    def __init__(self, wait: float) -> None:
        self.deadline = time.monotonic() + wait
        self.pause = 0.02

    def after(self, exc: LeaseHeld) -> float:
        """Seconds to wait before the next attempt; raises ``exc`` once ``wait`` is spent.

        A run of this process is waited for until it gives the agent back (its release wakes
        the waiter), another process's lease is polled, backing off to 0.5 s and never sleeping
        past its expiry."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise exc
        expires_at = exc.details.get("expires_at")
        if expires_at is None:
            return left
        expires_in = float(expires_at) - time.time()
        seconds = max(0.005, min(self.pause, left, max(expires_in, 0.005)))
        self.pause = min(self.pause * 2, 0.5)
        return seconds


class LeaseKeeper:
    """Acquire, renew in the background, check before writes, release. Thread-safe."""

    def __init__(
        self, store: RecallStore, *, holder: str, ttl: float, wait: float, fenced: bool
    ) -> None:
        if not is_seconds(ttl) or ttl <= 0 or ttl == math.inf:
            raise RecallError(
                f"lease_ttl must be a positive, finite number of seconds, got {ttl!r}",
                code="invalid_value",
            )
        check_wait(wait)
        self.store = store
        self.holder = holder
        self.ttl = float(ttl)
        self.wait = float(wait)
        self.fenced = fenced
        self.margin = self.ttl / 4
        self._held: dict[str, HeldLease] = {}
        # One lock, two conditions: ``_cond`` wakes threads of this process waiting for an
        # agent's slot (``acquire``), ``_wake`` the renewer. Kept apart because waking the
        # renewer costs the run that does it: the woken thread takes the GIL at the run's next
        # statement. Measured on a chat turn (SQLite), waking it at every run's start and end
        # cost about 190 µs of a 3.3 ms turn. It is woken only when it idles (no lease to
        # renew) and a lease is taken, and at close.
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._given_back = LoopWakeups()  # coroutines waiting for a slot (``apause``)
        self._wake = threading.Condition(lock)
        self._renewer_idle = False
        self._renewer: threading.Thread | None = None
        self._closed = False
        # Called by the renewer before each round: ends the runs that hold a lease but will
        # never run (``RunLifecycle.reap``) and returns their agents.
        self.reaper: Callable[[], set[str]] | None = None

    @property
    def closed(self) -> bool:
        """Whether ``close`` ran: every lease given up, none taken again."""
        return self._closed

    # --- taking and giving back -----------------------------------------------------------

    def acquire(self, agent_id: str, control: Any = None, wait: float | None = None) -> HeldLease:
        """Take the agent's lease for this process, or raise ``LeaseHeld`` after ``wait`` s."""
        backoff = Backoff(self.wait if wait is None else wait)
        while True:
            try:
                return self.try_acquire(agent_id, control)
            except LeaseHeld as exc:
                seconds = backoff.after(exc)
                if self.held_here(exc):
                    with self._cond:  # woken when this process's run gives the agent back
                        self._cond.wait_for(lambda: agent_id not in self._held, seconds)
                else:
                    time.sleep(seconds)

    async def aretry(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` (one try at a lease: no waiting, ``LeaseHeld`` if busy) on a worker
        thread, again and again as ``acquire`` would, for up to ``wait`` seconds; the waits
        between the tries run on the event loop and hold no thread.

        Runs of one agent queued under ``ainvoke`` (``wait=``) each held a default-executor
        worker while they waited; with as many of them as it has workers (cpu + 4), the run
        holding the lease could not write its checkpoints, and they all timed out."""
        backoff = Backoff(self.wait)
        while True:
            try:
                return await asyncio.to_thread(attempt)
            except LeaseHeld as exc:
                await self._apause(exc, backoff.after(exc))

    async def _apause(self, exc: LeaseHeld, seconds: float) -> None:
        if not self.held_here(exc):
            await asyncio.sleep(seconds)
            return
        agent_id = exc.details.get("agent_id")
        with self._cond:
            if agent_id not in self._held:
                return
            woken = self._given_back.add()
        await self._given_back.wait(woken, seconds)

    def held_here(self, exc: LeaseHeld) -> bool:
        """Whether ``exc`` was raised because a run of this very process holds the agent."""
        return bool(exc.details.get("holder") == self.holder)

    def try_acquire(self, agent_id: str, control: Any = None) -> HeldLease:
        """Take the agent's lease now, or raise ``LeaseHeld`` (held here, or by another)."""
        with self._cond:
            mine = self._held.get(agent_id)
            if mine is not None:
                raise LeaseHeld(
                    f"agent {agent_id!r} is already running in this process ({self.holder}); "
                    "nothing ran. Wait for that run to finish, pass wait= to queue, or use "
                    "a different agent_id.",
                    agent_id=agent_id,
                    holder=self.holder,
                    expires_at=None,
                    epoch=mine.epoch,
                )
            # Reserve the slot before the database call, so two threads of this process
            # cannot both take the database lease (the second, under the same holder id,
            # would take it over at a new epoch and fence the first out).
            held = HeldLease(agent_id, epoch=-1, valid_until=0.0)
            self._held[agent_id] = held
        started = time.monotonic()
        try:
            lease = self.store.acquire_lease(agent_id, self.holder, self.ttl)
        except BaseException:
            self._give_back_slot(agent_id)
            raise
        with self._cond:
            held.epoch = lease.epoch
            held.valid_until = started + self.ttl
            if control is not None:
                held.controls.append(control)
            self._start_renewer()
        return held

    def _give_back_slot(self, agent_id: str) -> HeldLease | None:
        with self._cond:
            held = self._held.pop(agent_id, None)
            self._cond.notify_all()
            self._given_back.wake_all()
        return held

    def release(
        self, agent_id: str, final: Callable[[str, int], object] | None = None
    ) -> LeaseLost | None:
        """Give the lease back (unless it was lost); returns the loss, if there was one.

        ``final(holder, epoch)``, if given, is what gives it back in the database: a run's end
        that records its last turns in the same transaction (``_runs.FinalWrite``).
        """
        held: HeldLease | None = None
        try:
            with self._cond:
                found = self._held.get(agent_id)
                if found is None or found.releasing:
                    return None  # not held, or another thread is giving it back (close)
                # From here no write of the run passes and no renewal runs. Set inside the
                # try: an interrupt right after it must still give the slot back (a slot left
                # releasing refused every later run of the agent in this process, for good).
                held, found.releasing = found, True
                lost = held.lost
            if held.epoch >= 0 and lost is None:
                try:
                    if final is None:
                        self.store.release_lease(agent_id, self.holder, held.epoch)
                    else:
                        final(self.holder, held.epoch)
                except Exception as exc:  # it expires anyway; the next run just waits for that
                    warnings.warn(
                        f"could not release the lease of agent {agent_id!r} ({exc}); it "
                        f"expires in at most {self.ttl:.0f}s",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        finally:
            # The slot goes only after the database release: a run of this process queued
            # for the agent then takes a released lease, at the same epoch. Had it taken the
            # slot first, it found the lease still live, and this release ended its lease
            # under it (it ran on with a lease the database showed free to any process).
            if held is not None:
                self._give_back_slot(agent_id)
        return lost

    def held(self, agent_id: str) -> HeldLease | None:
        # Lock-free (called per checkpoint write): a dict read is atomic, and the entry's epoch
        # is set before any write of its run can happen.
        held = self._held.get(agent_id)
        return held if held is not None and held.epoch >= 0 and not held.releasing else None

    def is_busy(self, agent_id: str) -> bool:
        """Whether a run of this process is acting for the agent right now."""
        with self._cond:
            return agent_id in self._held

    # --- losing it ------------------------------------------------------------------------

    def mark_lost(self, agent_id: str, reason: str, only: HeldLease | None = None) -> LeaseLost:
        """Record that another process took over; drain the run. Returns the error to raise.

        ``only``: mark it only if it is still that very lease (a renewal's verdict on it). An
        epoch does not tell two runs of this process apart: the next one re-takes the lease
        as the same holder, at the same epoch, and a renewal of the previous run that failed
        (its lease was given back meanwhile) marked the new run lost."""
        with self._cond:
            held = self._held.get(agent_id)
            if held is None or held.releasing or (only is not None and held is not only):
                # (A renewal that raced the release: the lease was given up, not lost.)
                return LeaseLost(
                    f"agent {agent_id!r}: {reason}", agent_id=agent_id, holder=self.holder
                )
            if held.lost is None:
                held.lost = LeaseLost(
                    f"this process ({self.holder}) lost the lease of agent {agent_id!r} "
                    f"(epoch {held.epoch}): {reason}. It stopped at the step boundary and wrote "
                    "nothing more; the new holder continues from the last checkpoint.",
                    agent_id=agent_id,
                    holder=self.holder,
                    epoch=held.epoch,
                )
            controls = list(held.controls)
            lost = held.lost
        for control in controls:
            try:
                control.request_drain("lease_lost")
            except Exception:  # a foreign control object; the write fence still stops the run
                pass
        return lost

    def check_write(self, agent_id: str) -> int:
        """The epoch to stamp on a checkpoint of this agent's run; raises ``LeaseLost``."""
        held = self.held(agent_id)
        if held is None:
            raise LeaseLost(
                f"no lease held for agent {agent_id!r} by this process", agent_id=agent_id
            )
        if held.lost is not None:
            raise held.lost
        epoch, valid_until = held.epoch, held.valid_until
        if self.fenced:
            return epoch  # the database decides, exactly, inside the write
        if time.monotonic() > valid_until - self.margin:
            raise self.mark_lost(
                agent_id, f"no renewal succeeded for {self.ttl - self.margin:.1f}s (self-fenced)"
            )
        current = self.store.lease(agent_id)
        if current is None or current.holder != self.holder or current.epoch != epoch:
            who = current.holder if current else "nobody"
            raise self.mark_lost(agent_id, f"the lease now belongs to {who}")
        return epoch

    # --- renewing -------------------------------------------------------------------------

    def _start_renewer(self) -> None:
        # Called with the lock held. An idle renewer must be woken, or the new lease would go
        # unrenewed until its idle wait ends. A renewer waiting for its next round need not
        # be: that round comes within ttl / 3 and renews every lease held then, this one
        # included, long before it runs out.
        if self._renewer_idle:
            self._wake.notify_all()
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(
                target=self._renew_loop, name=f"recall-lease-{self.holder}", daemon=True
            )
            self._renewer.start()

    def _renew_loop(self) -> None:
        interval = self.ttl / 3
        due = time.monotonic() + interval
        while True:
            with self._cond:
                if not self._held and not self._closed:
                    # Idle between runs: stay (a thread start per run costs more than the
                    # lease itself), but end after IDLE_EXIT seconds with nothing to renew.
                    self._renewer_idle = True
                    woken = self._wake.wait_for(lambda: bool(self._held) or self._closed, IDLE_EXIT)
                    self._renewer_idle = False
                    if not woken:
                        self._renewer = None
                        return
                    due = time.monotonic() + interval
                # Woken early only by close(); a run's end is noticed at the next round.
                while not self._closed and self._held and (left := due - time.monotonic()) > 0:
                    self._wake.wait(left)
                if self._closed:
                    self._renewer = None
                    return
                if not self._held:
                    continue  # the run ended before its renewal was due
                todo = [
                    h
                    for h in self._held.values()
                    if h.epoch >= 0 and h.lost is None and not h.releasing
                ]
            due = time.monotonic() + interval
            if self.reaper is not None:
                try:
                    reaped = self.reaper()
                except Exception:  # never let it stop the renewals
                    reaped = set()
                todo = [h for h in todo if h.agent_id not in reaped]
            for held in todo:
                self.renew(held)

    def renew(self, held: HeldLease) -> bool:
        """Extend one lease now; False (and the lease marked lost) if another holder has it."""
        agent_id = held.agent_id
        started = time.monotonic()
        try:
            ok = self.store.renew_lease(agent_id, self.holder, held.epoch, self.ttl)
        except Exception:
            # Database unreachable: keep trying. Unfenced savers self-fence in check_write once
            # valid_until passes; fenced ones are refused by the trigger if someone took over.
            return True
        if not ok:
            self.mark_lost(agent_id, "another process took it over after it expired", held)
            return False
        with self._cond:
            if self._held.get(agent_id) is held:
                held.valid_until = max(held.valid_until, started + self.ttl)
        return True

    def close(self) -> None:
        """Release every lease this keeper holds and stop the renewer."""
        with self._cond:
            agents = list(self._held)
        for agent_id in agents:
            self.release(agent_id)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake.notify_all()
