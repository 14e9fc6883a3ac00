"""RecallStore's methods for the agent's records: turns, working state, milestones,
pointers, outputs and the list of agents (see ``_api_base`` for how the methods are grouped)."""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

from .._errors import RecallError
from . import _records, _transcript
from ._api_base import StoreBase
from ._ids import shown
from ._models import AgentInfo, Pointer, Turn, TurnView


class RecordsAPI(StoreBase):
    def _switch_thread(self, agent_id: str, thread_id: str) -> str | None:
        """Note the agent's current thread at a run's start; the thread noted before, if other.

        PostgreSQL: one autocommitted statement (one round trip, not three); SQLite: one write
        transaction.
        """
        with self._db.tx(write=self._db.dialect == "sqlite") as tx:
            return _records.switch_thread(tx, agent_id, thread_id)

    def _remember_turn(self, agent_id: str, turn_id: str, thread_id: str) -> None:
        """Note a submitted ``configurable["turn_id"]`` (the checkpointer's, under the lease)."""
        with self._db.tx(write=True) as tx:
            _records.remember_turn(tx, agent_id, turn_id, thread_id)

    # --- turns -----------------------------------------------------------------------------

    def _all_recorded(self, agent_id: str, ids: Sequence[str]) -> bool:
        """Whether every one of ``ids`` is recorded for the agent (a read, no turn decoded)."""
        if not ids:
            return True
        with self._db.tx() as tx:
            return len(_transcript.recorded_ids(tx, agent_id, ids)) == len(set(ids))

    def _unrecorded(self, agent_id: str, ids: Sequence[str]) -> list[str]:
        """Which of ``ids`` are not recorded for the agent, in the order given (``doctor``)."""
        with self._db.tx() as tx:
            have = _transcript.recorded_ids(tx, agent_id, ids)
        return [i for i in ids if i not in have]

    def turns(self, agent_id: str, last: int | None = None) -> list[Turn]:
        """The agent's turns, oldest first; ``last=N`` reads only the newest N (an index scan)."""
        with self._db.tx() as tx:
            return _transcript.turns(tx, agent_id, last)

    async def aturns(self, agent_id: str, last: int | None = None) -> list[Turn]:
        """Async twin of ``turns``: the turns, oldest first (``last=N``: only the newest N)."""
        return await self._run(self.turns, agent_id, last)

    def turn_page(
        self,
        agent_id: str,
        limit: int,
        *,
        before: int | None = None,
        skip_ids: Container[str] = (),
    ) -> tuple[list[TurnView], int | None]:
        """Up to ``limit`` turns older than seq ``before``, newest first, for readers that stop
        early (the briefing): each a ``TurnView`` of the fields as recorded (several times
        cheaper than rebuilding messages), large outputs left as references, turns in
        ``skip_ids`` not decoded. Returns them and the ``before`` of the next page (None at the
        start of the history)."""
        with self._db.tx() as tx:
            return _transcript.turn_page(tx, agent_id, limit, before=before, skip_ids=skip_ids)

    async def aturn_page(
        self, agent_id: str, limit: int, *, before: int | None = None, skip_ids: Container[str] = ()
    ) -> tuple[list[TurnView], int | None]:
        """Async twin of ``turn_page``: up to ``limit`` turns before ``before``, newest first."""
        return await self._run(self.turn_page, agent_id, limit, before=before, skip_ids=skip_ids)

    # --- working state, milestones, pointers -------------------------------------------------

    def working_state(self, agent_id: str) -> dict[str, Any]:
        """The latest merged working state (goal, plan, progress, decisions, last_milestone...)."""
        with self._db.tx() as tx:
            return _records.working_state(tx, agent_id)

    async def aworking_state(self, agent_id: str) -> dict[str, Any]:
        """Async twin of ``working_state``: the latest merged working state."""
        return await self._run(self.working_state, agent_id)

    def update_working_state(
        self, agent_id: str, *, new_task: bool | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Revise working-state fields (each revision kept); ``None`` removes a field.

        The fields given are merged into the current state, except when the update starts a
        new task: a ``goal`` that replaces a different current goal replaces the whole state,
        so fields not given in the same call (the last task's plan, progress, milestone...)
        are cleared rather than shown beside the new goal. (A first goal merges.) The replaced state stays in ``revisions()``
        (that revision is named ``"new_task"``).

        Args:
            agent_id: whose working state.
            new_task: ``None`` (default) decides by the goal as above; ``True`` starts a fresh
                state whatever the goal (with no fields: clears it); ``False`` always merges
                (a goal reworded within the same task).
            **fields: the fields to set (``goal``, ``plan``, ``progress``, ``decisions``,
                ``notes``, or any other JSON-serialisable field).

        Returns:
            The working state now.

        Raises:
            RecallError: ``invalid_value`` for a value that cannot be recorded or a
                ``new_task`` that is not a bool or None.
        """
        with self._db.tx(write=True) as tx:
            return _records.update_working_state(tx, agent_id, fields, new_task)

    async def aupdate_working_state(
        self, agent_id: str, *, new_task: bool | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Async twin of ``update_working_state``: revise fields (a new goal starts a fresh
        state; each revision kept), in a worker thread."""
        return await self._run(self.update_working_state, agent_id, new_task=new_task, **fields)

    def milestone(self, agent_id: str, text: str) -> dict[str, Any]:
        """Append a milestone (kept in the history; the latest shows in the working state)."""
        with self._db.tx(write=True) as tx:
            return _records.milestone(tx, agent_id, text)

    async def amilestone(self, agent_id: str, text: str) -> dict[str, Any]:
        """Async twin of ``milestone``: append a milestone to the agent's history."""
        return await self._run(self.milestone, agent_id, text)

    def revisions(self, agent_id: str) -> list[tuple[int, str, str | None, dict[str, Any], float]]:
        """Every working-state, milestone and pointer revision: (seq, kind, name, data, time)."""
        with self._db.tx() as tx:
            return _records.revisions(tx, agent_id)

    async def arevisions(
        self, agent_id: str
    ) -> list[tuple[int, str, str | None, dict[str, Any], float]]:
        """Async twin of ``revisions``: every working-state, milestone and pointer revision."""
        return await self._run(self.revisions, agent_id)

    def set_pointer(
        self, agent_id: str, name: str, target: str, note: str | None = None
    ) -> Pointer:
        """Point ``name`` at ``target`` (latest wins; every change is kept)."""
        with self._db.tx(write=True) as tx:
            return _records.set_pointer(tx, agent_id, name, target, note)

    async def aset_pointer(
        self, agent_id: str, name: str, target: str, note: str | None = None
    ) -> Pointer:
        """Async twin of ``set_pointer``: point ``name`` at ``target`` (every change kept)."""
        return await self._run(self.set_pointer, agent_id, name, target, note)

    def pointers(self, agent_id: str) -> dict[str, Pointer]:
        """The current pointers by name."""
        with self._db.tx() as tx:
            return _records.pointers(tx, agent_id)

    async def apointers(self, agent_id: str) -> dict[str, Pointer]:
        """Async twin of ``pointers``: the agent's current pointers by name."""
        return await self._run(self.pointers, agent_id)

    # --- outputs ---------------------------------------------------------------------------

    def put_output(self, agent_id: str, content: str) -> str:
        """Store ``content`` whole and return its reference (the same content, the same ref)."""
        if not isinstance(content, str):
            raise RecallError(
                "an output is text; str() or json.dumps it first", code="invalid_value"
            )
        with self._db.tx(write=True) as tx:
            _records.touch_agent(tx, agent_id)
            return _records.put_output(tx, agent_id, content)

    async def aput_output(self, agent_id: str, content: str) -> str:
        """Async twin of ``put_output``: store ``content`` whole and return its reference."""
        return await self._run(self.put_output, agent_id, content)

    def fetch_output(self, ref: str, offset: int = 0, length: int | None = None) -> str:
        """Read a stored output, or ``length`` characters of it from ``offset``."""
        with self._db.tx() as tx:
            return _records.fetch_output(tx, ref, offset, length)

    async def afetch_output(self, ref: str, offset: int = 0, length: int | None = None) -> str:
        """Async twin of ``fetch_output``: a stored output, or ``length`` characters of it from
        ``offset``."""
        return await self._run(self.fetch_output, ref, offset, length)

    # --- agents ----------------------------------------------------------------------------

    def agents(self) -> list[AgentInfo]:
        """Every agent with records: turns, open actions, lease holder, last activity."""
        with self._db.tx() as tx:
            return _records.agents(tx)

    async def aagents(self) -> list[AgentInfo]:
        """Async twin of ``agents``: every agent with records, with counts, lease holder and last
        activity."""
        return await self._run(self.agents)

    def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has any records in this store (turns, state, actions...)."""
        with self._db.tx() as tx:
            return _records.agent_exists(tx, agent_id)

    def _require_agent(self, agent_id: str) -> None:
        """``unknown_agent`` unless ``agent_id`` has records here: a mistyped id must not read
        as an agent with nothing (an empty diff, an undo with nothing to undo)."""
        if not self.has_agent(agent_id):
            known = ", ".join(a.agent_id for a in self.agents()[:10]) or "none yet"
            raise RecallError(
                f"no agent {shown(agent_id)} in {self._db.target} (known: {known}); check the "
                "agent id (store.agents(), or `langgraph-recall agents`, lists the agents with "
                "records)",
                code="unknown_agent",
                agent_id=agent_id,
            )

    async def ahas_agent(self, agent_id: str) -> bool:
        """Async twin of ``has_agent``: whether ``agent_id`` has any records in this store."""
        return await self._run(self.has_agent, agent_id)
