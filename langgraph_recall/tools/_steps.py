"""The durable call's store steps: each runs as one blocking call (inline, or in a worker
thread under ``ainvoke``), driven by ``DurableTools._call`` through ``_drive``.

Module attributes, not names bound in ``_durable``, so a benchmark or a test can replace one
(``_steps.finish``) for every call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:  # pragma: no cover - location differs across langgraph versions
    from langgraph._internal._constants import CONFIG_KEY_TASK_ID
except ImportError:  # pragma: no cover
    CONFIG_KEY_TASK_ID = "__pregel_task_id"

from .._errors import ApprovalDenied, ApprovalMismatch, RecallError
from ..store import Action, Claim, RecallStore
from ..store._actions import end_statement
from ..store._codec import dumps_typed
from ..store._due import DueEnd
from ._drive import Io, Logic, Resolve, WaitTurn, name_of
from ._order import asking_of
from ._outcome import (
    ActionEnd,
    Output,
    error_text,
    from_record,
    in_doubt_message,
    is_error,
    needs_output,
    recorded_asks,
    to_record,
)


def begin(
    store: RecallStore,
    *,
    agent_id: str,
    action_id: str,
    tool: str,
    klass: str,
    args: dict[str, Any],
    digest: str,
    thread_id: str | None,
    epoch: int | None,
    gated: bool,
) -> Claim | RecallError:
    """Claim the call and, for a gated one, spend its approval, in ONE transaction.

    Separately, a crash between the two would leave either an approval spent on nothing
    (the call could never run) or an intent without a spent approval. Returns the claim, or
    the refusal (the transaction rolled back) for the caller to report.
    """

    def claim() -> Claim:
        return store.claim(
            agent_id,
            action_id,
            tool=tool,
            args=args,
            args_digest=digest,
            klass=klass,
            idempotency_key=action_id,
            thread_id=thread_id,
            epoch=epoch,
        )

    if not gated:  # nothing to spend: the store's claim is one transaction on its own
        return claim()
    try:
        with store._db.tx(write=True):
            claimed = claim()
            if claimed.claimed:
                store.spend_approval(agent_id, action_id, digest, claimed.action.attempt)
            return claimed
    except (ApprovalDenied, ApprovalMismatch) as refusal:
        return refusal
    except RecallError as refusal:
        if refusal.code in ("approval_required",):
            return refusal
        raise


def take_asks_again(request: Any, action: Action) -> Logic[None]:
    """A call answered from its record takes again, in its turn, the interrupt() answers its
    tool took when it ran, so each later call of the task gets the answer given to it."""
    asked, task_id = recorded_asks(action)
    order = asking_of(getattr(request.runtime, "config", None))
    if asked and order is not None:
        yield WaitTurn(order.turns, order.call_id)
        order.replay(asked, same_task=task_id is not None and task_id == order.task_id)


def finish(
    store: RecallStore, agent_id: str, action: Action, out: Output, flush_later: bool = False
) -> None:
    if is_error(out):
        store.end(
            action.action_id,
            action.attempt,
            "failed",
            error=error_text(out),
            flush_later=flush_later,
        )
    elif needs_output(store, out):
        # A large answer is stored whole first; both commit together or not at all.
        with store._db.tx(write=True, flush_later=flush_later):
            result = to_record(store, agent_id, out)
            store.end(action.action_id, action.attempt, "done", result=result)
    else:
        # The usual case: one statement on its own (on PostgreSQL one round trip, not three).
        store.end(action.action_id, action.attempt, "done", result=out, flush_later=flush_later)


def due_end(store: RecallStore, action: Action, out: Output, task_id: str) -> DueEnd:
    """The "done" end of ``action``, to commit with the write of task ``task_id``."""
    sql, params = end_statement(
        store._db.dialect, action.action_id, action.attempt, "done", result=out
    )
    return DueEnd(task_id, action.action_id, action.attempt, sql, params)


def task_id_of(config: Mapping[str, Any]) -> str | None:
    task_id = (config.get("configurable") or {}).get(CONFIG_KEY_TASK_ID)
    return task_id if isinstance(task_id, str) and task_id else None


def abandon(store: RecallStore, agent_id: str, action: Action, gated: bool) -> None:
    with store._db.tx(write=True):
        ended = store.end(
            action.action_id,
            action.attempt,
            "abandoned",
            note="paused by an interrupt() inside the tool; the resume runs it again under the same key",
        )
        if not (ended and gated):
            return
        # The approval was spent on this attempt, which the tool itself paused. Its resume is
        # the same execution, so it gets the same approval again, signed, for the same digest
        # (a later "no" recorded before the resume still wins: it is then the latest).
        latest = store.latest_decision(action.action_id)
        if latest is not None and latest.decision == "approve":
            store.record_decision(
                agent_id,
                action.action_id,
                "approve",
                args=latest.args,
                args_digest=latest.args_digest,
                message=f"carried over to the resume of attempt {action.attempt}",
                # The resume is a later run of the same task: it takes back the same answers.
                task_id=latest.task_id,
                asked=latest.asked,
            )


def record_resolution(
    store: RecallStore, action: Action, end: ActionEnd, resolver: Callable[..., Any]
) -> bool:
    if end.outcome == "done":
        try:
            dumps_typed(end.result)
        except RecallError as exc:
            # Refused by the records' serializer deep in store.end, the error named neither the
            # resolver nor the call, and the run failed with no hint of where to look.
            raise RecallError(
                f"the resolver {name_of(resolver)} settled {action.tool} (action "
                f"{action.action_id}) as done with a result that cannot be recorded: {exc} "
                "The call stays open, not run.",
                code="invalid_value",
                action_id=action.action_id,
            ) from None
    return store.end(
        action.action_id,
        action.attempt,
        end.outcome,
        result=end.result,
        note=end.resolution,
        resolved_by="resolver",
    )


def settle_in_doubt(
    store: RecallStore,
    resolver: Callable[[Action], Any] | None,
    action: Action,
    call: dict[str, Any],
    reason: str | None = None,
) -> Logic[Output | None]:
    """An external call in doubt (a crash cut it off, or its tool raised ``InDoubt``), shown
    to the resolver now. Returns the model's answer: the recorded result when the resolver
    found it done, the outcome unknown when there is no resolver or it cannot tell (the call
    stays open for a person). None when it found the call did not happen: closed as not done,
    it may be claimed again, a new attempt under the same key. ``reason``: what its tool
    raised ``InDoubt`` with, for the model."""
    end = None if resolver is None else (yield Resolve(resolver, action))
    if end is None:
        return in_doubt_message(action, call, reason)
    yield Io(record_resolution, (store, action, end, resolver))
    if end.outcome != "done":
        return None
    settled = yield Io(store.action, (action.action_id,))
    return (yield Io(from_record, (store, settled, call)))
