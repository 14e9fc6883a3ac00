"""RecallStore's methods for what an agent does: actions (intent, end, resolve, undo),
approvals and leases (see ``_api_base`` for how the methods are grouped)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

from . import _actions, _approvals, _leases
from ._api_base import StoreBase
from ._db import Tx
from ._ids import check_id
from ._models import Action, Approval, CallRecord, Claim, Lease, UndoReport
from ._records import check_agent_id

if TYPE_CHECKING:
    from ._store import RecallStore


class ActionsAPI(StoreBase):
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
        # What the read below sends; the insert checks the whole intent (``check_intent_ids``).
        check_id("action_id", action_id, write=False, hint=_actions.ACTION_HINT)
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
        """Async twin of ``claim``: record the intent (or find the call ran or is in doubt), in a
        worker thread."""
        return await self._run(self.claim, agent_id, action_id, **kwargs)

    def mark_started(self, action_id: str, attempt: int, *, relaxed: bool = False) -> bool:
        """Mark a planned attempt started, right before its tool may begin (``_actions.start``).

        Returns False when it was marked or ended already: the caller must not run the tool.
        ``relaxed``: on PostgreSQL the commit does not wait for the server's disk (idempotent
        calls only; see ``_actions.start`` for what a server crash can lose then).
        """
        # One statement: autocommitted on PostgreSQL; SQLite keeps BEGIN IMMEDIATE.
        with self._db.tx(write=self._db.dialect == "sqlite") as tx:
            return _actions.start(tx, action_id, attempt, relaxed)

    async def amark_started(self, action_id: str, attempt: int, *, relaxed: bool = False) -> bool:
        """Async twin of ``mark_started``: the start mark of a planned attempt, in a worker
        thread; False when it was marked or ended already."""
        return await self._run(self.mark_started, action_id, attempt, relaxed=relaxed)

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
        check_id("action_id", action_id, write=False, hint=_actions.ACTION_HINT)
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
        """Async twin of ``end``: record how an attempt ended, in a worker thread; False if it had
        ended already."""
        return await self._run(self.end, action_id, attempt, outcome, **kwargs)

    def action(self, action_id: str) -> Action:
        """One action by id (or unique id prefix). Raises ``unknown_action``."""
        with self._db.tx() as tx:
            return _actions.find_action(tx, action_id)

    async def aaction(self, action_id: str) -> Action:
        """Async twin of ``action``: one action by id or unique prefix (else ``unknown_action``)."""
        return await self._run(self.action, action_id)

    def actions(self, agent_id: str, open_only: bool = False) -> list[Action]:
        """The agent's actions (latest attempt each), oldest first; ``open_only``: in doubt only."""
        with self._db.tx() as tx:
            return _actions.actions(tx, agent_id, open_only)

    async def aactions(self, agent_id: str, open_only: bool = False) -> list[Action]:
        """Async twin of ``actions``: the agent's actions, oldest first (``open_only``: in doubt
        only)."""
        return await self._run(self.actions, agent_id, open_only)

    def call_records(self, agent_id: str, action_ids: Sequence[str]) -> dict[str, CallRecord]:
        """What the records hold of each of the agent's calls ``action_ids``: its latest attempt
        and the latest approval decision on it, by action id (a call with neither, a pure
        tool's, is left out). One indexed read whatever the history's length: the briefing
        looks up the outcomes of the calls it shows with it."""
        with self._db.tx() as tx:
            return _actions.call_records(tx, agent_id, action_ids)

    async def acall_records(
        self, agent_id: str, action_ids: Sequence[str]
    ) -> dict[str, CallRecord]:
        """Async twin of ``call_records``: the latest attempt and decision of each call."""
        return await self._run(self.call_records, agent_id, action_ids)

    def resolve(self, action_id: str, outcome: str | bool, note: str | None = None) -> Action:
        """A person settles an open action: ``"done"`` (it happened) or ``"not_done"``.

        A ``not_done`` action may run again on the next resume, under the same idempotency key.
        Only an action in doubt can be settled: while its agent's lease is live (a run holds
        it, or a crashed run's lease has not expired yet) the call may still be running, and
        either answer is refused with ``lease_held``; wait for the run to end or the lease to
        expire. Raises ``not_open`` if it already ended, ``unknown_action`` if there is no such
        action.
        """
        if isinstance(outcome, bool):
            outcome = "done" if outcome else "not_done"
        with self._db.tx(write=True) as tx:
            return _actions.resolve(tx, action_id, outcome, note, by="person")

    async def aresolve(
        self, action_id: str, outcome: str | bool, note: str | None = None
    ) -> Action:
        """Async twin of ``resolve``: a person settles an open action as done or not done."""
        return await self._run(self.resolve, action_id, outcome, note)

    def undo(
        self,
        agent_id: str,
        undo: Mapping[str, Callable[..., Any]] | None = None,
        *,
        lease_ttl: float = 60.0,
    ) -> UndoReport:
        """Reverse the agent's done actions newest first with their undo functions.

        The functions are those of the ``DurableToolNode``/``RecallMiddleware`` ``undo=`` of a
        node that ran in this process (or was given this store by ``node.durable.register_undo(store)``), and
        ``undo``, by tool name: a new process that has run no node passes them here. Each undo
        is itself a once-only action; the walk stops at anything in doubt and reports done
        actions whose tool has no known undo (``no_undo``) and those an earlier call reversed
        (``already_undone``).

        It acts for the agent under the agent's lease, the one ``RecallCheckpointer`` takes for
        a run, held (and renewed) until it returns: ``LeaseHeld`` while a run of the agent or
        another undo holds it, or one killed mid-way whose lease has not expired yet (after
        at most ``lease_ttl`` seconds); nothing is undone then. ``LeaseLost`` if another holder
        took it over mid-way: what was undone before is recorded, no further undo starts.
        ``RecallError`` ``unknown_agent`` for an agent with no records (nothing is leased), and
        ``invalid_value`` for an undo function or tool that cannot take an action's original
        arguments, or is async (checked before any undo runs or is recorded).
        """
        from ..checkpoint._runs import Entry
        from ..tools._undo import run_undo

        store = cast("RecallStore", self)
        return run_undo(store, agent_id, undo, lease_ttl=lease_ttl, entry=Entry.here())

    async def aundo(
        self,
        agent_id: str,
        undo: Mapping[str, Callable[..., Any]] | None = None,
        *,
        lease_ttl: float = 60.0,
    ) -> UndoReport:
        """Async twin of ``undo``: the same walk, newest first, under the agent's lease, in a
        worker thread."""
        from ..checkpoint._runs import Entry
        from ..tools._undo import run_undo

        store = cast("RecallStore", self)
        # Who calls is this task (a run it started and LangGraph refused gives its lease back).
        return await self._run(
            run_undo, store, agent_id, undo, lease_ttl=lease_ttl, entry=Entry.here()
        )

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
        task_id: str | None = None,
        asked: int | None = None,
    ) -> Approval:
        """Append a request or a decision to the action's chain of decisions, signed.

        The signature covers the agent, the action, the row's id and place in the chain, the
        decision, the arguments' digest, the message, the attempt it authorises and the row
        before it (see ``docs/security.md``). ``task_id`` and ``asked``: the LangGraph task a
        person's answer came in and how many answers that asking took (the approval
        protocol's own; leave them out).

        Raises:
            ApprovalMismatch: the action's recorded decisions do not verify (nothing is
                recorded on an untrusted chain), or another writer appended at the same moment.
            RecallError: ``invalid_value`` for an unknown decision or a bad identifier.
        """
        check_id("action_id", action_id, hint=_actions.ACTION_HINT)
        with self._db.tx(write=True) as tx:
            return _approvals.record_decision(
                tx,
                self._secret,
                agent_id=agent_id,
                action_id=action_id,
                decision=decision,
                args=args,
                args_digest=args_digest,
                message=message,
                task_id=task_id,
                asked=asked,
            )

    async def arecord_decision(
        self, agent_id: str, action_id: str, decision: str, **kw: Any
    ) -> Approval:
        """Async twin of ``record_decision``: record a signed request or decision, in a worker
        thread."""
        return await self._run(self.record_decision, agent_id, action_id, decision, **kw)

    def latest_decision(self, action_id: str) -> Approval | None:
        """The action's latest request or decision, or None when it has none.

        The action's whole chain is verified first: ``ApprovalMismatch`` when any of its rows
        was altered, copied, re-ordered or deleted."""
        check_id("action_id", action_id, write=False, hint=_actions.ACTION_HINT)
        with self._db.tx() as tx:
            return _approvals.latest_decision(tx, self._secret, action_id)

    async def alatest_decision(self, action_id: str) -> Approval | None:
        """Async twin of ``latest_decision``: the action's latest decision, or None."""
        return await self._run(self.latest_decision, action_id)

    def spend_approval(
        self, agent_id: str, action_id: str, args_digest: str, attempt: int
    ) -> Approval:
        """Spend the latest decision on attempt ``attempt``, run with exactly ``args_digest``.

        Raises ``approval_denied`` after a "no"; ``approval_mismatch`` for other arguments,
        another attempt than the one the approval was given for, an approval already spent or
        withdrawn, or a chain of decisions that does not verify; ``approval_required`` when
        none was given.
        """
        with self._db.tx(write=True) as tx:
            return _approvals.spend_approval(
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
        """Async twin of ``spend_approval``: spend the latest decision on one execution of exactly
        ``args_digest``."""
        return await self._run(self.spend_approval, agent_id, action_id, args_digest, attempt)

    def pending_approvals(self, agent_id: str) -> list[Approval]:
        """Approval requests still waiting for a person."""
        check_agent_id(agent_id, write=False)
        with self._db.tx() as tx:
            return _approvals.pending_approvals(tx, self._secret, agent_id)

    async def apending_approvals(self, agent_id: str) -> list[Approval]:
        """Async twin of ``pending_approvals``: the agent's approval requests still waiting for a
        person."""
        return await self._run(self.pending_approvals, agent_id)

    def verify_approvals(self) -> list[Approval]:
        """Approval rows that do not verify with this store's secret, or are out of place in
        their action's chain (copied, re-ordered, gapped, orphaned); empty is good.
        ``langgraph-recall verify`` says what is wrong with each."""
        with self._db.tx() as tx:
            found = _approvals.approval_problems(tx, self._secret)
        return list({a.approval_id: a for a, _ in found if a is not None}.values())

    async def averify_approvals(self) -> list[Approval]:
        """Async twin of ``verify_approvals``: approvals whose signature does not verify (empty is
        good)."""
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
            return _leases.acquire_lease(tx, agent_id, holder, ttl)

    async def aacquire_lease(self, agent_id: str, holder: str, ttl: float) -> Lease:
        """Async twin of ``acquire_lease``: take the agent's lease or raise ``LeaseHeld``."""
        return await self._run(self.acquire_lease, agent_id, holder, ttl)

    def renew_lease(self, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend our lease; False if another holder took it (we were fenced out)."""
        # PostgreSQL: one UPDATE, autocommitted: no transaction left open across round trips,
        # so a holder frozen mid-renewal (SIGSTOP, a paused VM) never holds the lease row
        # against takeover. SQLite: see ``_lease_write``.
        with self._lease_write() as tx:
            return _leases.renew_lease(tx, agent_id, holder, epoch, ttl)

    async def arenew_lease(self, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
        """Async twin of ``renew_lease``: extend our lease; False if another holder took it."""
        return await self._run(self.renew_lease, agent_id, holder, epoch, ttl)

    def release_lease(self, agent_id: str, holder: str, epoch: int) -> bool:
        """Give the lease up so the next process can start at once."""
        with self._lease_write() as tx:  # as in renew_lease
            return _leases.release_lease(tx, agent_id, holder, epoch)

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
        """Async twin of ``release_lease``: give the lease up so the next process starts at once."""
        return await self._run(self.release_lease, agent_id, holder, epoch)

    def lease(self, agent_id: str) -> Lease | None:
        """The agent's lease row (it may have expired)."""
        with self._db.tx() as tx:
            return _leases.lease(tx, agent_id)

    async def alease(self, agent_id: str) -> Lease | None:
        """Async twin of ``lease``: the agent's lease row, or None (it may have expired)."""
        return await self._run(self.lease, agent_id)
