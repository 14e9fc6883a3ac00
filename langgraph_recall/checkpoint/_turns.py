"""A turn submitted twice runs once: ``configurable["turn_id"]``.

A client that may resubmit a turn (a retry after a timeout, a double click, a queue delivering
twice, a worker restarted mid-turn) passes the same ``turn_id`` each time. Derive it from
something the client already keeps stable across retries: the id of the user's message as the
client created it (``HumanMessage(id=...)``, a UUID made once when the user pressed send), the
id of the queue message that carried the request, or a hash of (conversation id, the client's
sequence number). Never use a timestamp or a fresh ``uuid4()`` per attempt: each retry would be
a new turn. Using the same value as the message id also makes ``add_messages`` replace rather
than append if a duplicate ever reached the state.

At run start, after the lease is taken (so two submitters are serialised), a run with new input
and a ``turn_id`` this agent has already seen does not start: ``get_tuple`` raises
``RecallError(code="duplicate_turn")`` whose ``details`` say where that turn ran
(``thread_id``), its newest checkpoint (``checkpoint_id``) and whether that is still the head of
its thread (``at_head``). ``RecallCheckpointer.invoke`` / ``ainvoke`` catch it and return the
turn's stored result, or resume the turn with ``invoke(None)`` if it never finished (crashed,
failed, or waiting at an interrupt), which re-runs no finished step. A resume
(``Command(resume=...)`` or ``None`` input) with the same ``turn_id`` is the same turn
continuing, not a resubmission, and passes.

Where a turn ran is kept per agent as a store item (namespace ``("recall", <agent>,
"submitted_turns")``), so a resubmission on another thread of the same agent is caught too; the
turn's checkpoints themselves are found by ``turn_id``, which LangGraph's savers copy from the
config into every checkpoint's metadata.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from .._context import agent_id_of
from .._errors import RecallError
from ..store._ids import as_text, check_id
from ..store._records import TURN_HINT, agent_ns

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from ..store import RecallStore

TURN_KEY = "turn_id"


def turn_id_of(config: Any) -> str | None:
    """``configurable["turn_id"]`` (None when absent), refused unless it is an identifier
    (``store._ids``): it is kept as an item key, so ``""`` is refused, not taken as absent."""
    value = ((config or {}).get("configurable") or {}).get(TURN_KEY)
    if value is None:
        return None
    return check_id("turn_id", value if type(value) is str else as_text(value), hint=TURN_HINT)


def is_new_input(value: Any) -> bool:
    """A run's input starts a new turn unless it is ``None`` or a ``Command`` (a continuation)."""
    return value is not None and not isinstance(value, Command)


def claim_turn(
    store: RecallStore,
    saver: BaseCheckpointSaver,
    *,
    agent_id: str,
    thread_id: str,
    turn_id: str,
) -> RecallError | None:
    """The ``duplicate_turn`` error if this turn already ran, else remember it and return None.

    Called with the agent's lease held, so no other process claims the same turn meanwhile.
    """
    ns = agent_ns(agent_id, "submitted_turns")
    item = store.get(ns, turn_id)
    if item is not None:
        ran_on = str(item.value.get("thread_id") or thread_id)
        base: RunnableConfig = {"configurable": {"thread_id": ran_on, "checkpoint_ns": ""}}
        newest = next(iter(saver.list(base, filter={TURN_KEY: turn_id}, limit=1)), None)
        if newest is not None:
            head = saver.get_tuple(base)
            newest_id = newest.config["configurable"]["checkpoint_id"]
            at_head = head is not None and head.config["configurable"]["checkpoint_id"] == newest_id
            return RecallError(
                f"turn {turn_id!r} already ran for agent {agent_id!r} (thread {ran_on!r}); "
                "nothing ran again. RecallCheckpointer.invoke(graph, input, config) returns its "
                "stored result, or resumes it if it never finished.",
                code="duplicate_turn",
                agent_id=agent_id,
                turn_id=turn_id,
                thread_id=ran_on,
                checkpoint_id=newest_id,
                at_head=at_head,
            )
        # Remembered, but no checkpoint of it was ever written (killed before its first write):
        # nothing of it survives, so it runs now, as a first attempt would.
    store._remember_turn(agent_id, turn_id, thread_id)
    return None


def replay_config(config: Any, details: dict[str, Any], *, at_checkpoint: bool) -> RunnableConfig:
    """The config that reads (or resumes) the turn a ``duplicate_turn`` error points at."""
    conf = dict((config or {}).get("configurable") or {})
    conf["thread_id"] = details["thread_id"]
    conf.pop("checkpoint_id", None)
    if at_checkpoint:
        conf["checkpoint_id"] = details["checkpoint_id"]
        conf["checkpoint_ns"] = ""
    out: RunnableConfig = {**(config or {}), "configurable": conf}
    return out


def unfinished(snapshot: Any) -> bool:
    """Whether a thread's head still has work: next nodes, or task results without a successor.

    ``next == ()`` alone is not "finished": after a crash the head can hold finished tasks'
    writes with no next checkpoint yet; ``invoke(None)`` then completes the step.
    """
    return bool(snapshot.next) or bool(snapshot.tasks)


class TurnHelpers:
    """``invoke`` / ``ainvoke``: graph calls that answer a resubmitted turn from the record."""

    if TYPE_CHECKING:
        _shared: Any

        def _here(self) -> None: ...

    def invoke(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """``graph.invoke`` that answers a resubmitted turn instead of running it again.

        With ``configurable["turn_id"]`` set and that turn already run for the agent: returns
        the turn's stored state values if it finished, or resumes it (``invoke(None)``) if it
        did not (crashed, failed, or waiting at an interrupt). Otherwise, exactly
        ``graph.invoke(input, config, **kwargs)``.

        Raises: whatever ``graph.invoke`` raises, except ``duplicate_turn``.
        """
        self._here()  # before the run's end below could wait on a forked child's copy
        try:
            return graph.invoke(input, config, **kwargs)
        except RecallError as exc:
            if exc.code != "duplicate_turn":
                raise
            details = exc.details
        finally:
            self._shared.runs.end_agent(agent_id_of(config))
        if details["at_head"]:
            head = replay_config(config, details, at_checkpoint=False)
            if unfinished(graph.get_state(head)):
                return self.invoke(graph, None, head, **kwargs)
        return graph.get_state(replay_config(config, details, at_checkpoint=True)).values

    async def ainvoke(self, graph: Any, input: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        """Async ``invoke``."""
        self._here()
        try:
            return await graph.ainvoke(input, config, **kwargs)
        except RecallError as exc:
            if exc.code != "duplicate_turn":
                raise
            details = exc.details
        finally:
            await asyncio.to_thread(self._shared.runs.end_agent, agent_id_of(config))
        if details["at_head"]:
            head = replay_config(config, details, at_checkpoint=False)
            if unfinished(await graph.aget_state(head)):
                return await self.ainvoke(graph, None, head, **kwargs)
        return (await graph.aget_state(replay_config(config, details, at_checkpoint=True))).values
