"""``store.undo(agent_id)``: reverse an agent's done actions, newest first.

Each undo is itself a once-only action (its id derived from the action it reverses), so
running ``undo`` twice, or after a crash in the middle, never refunds twice. The walk stops at
the first action (or undo) in doubt: what happened after it is unknown, so reversing what came
before could leave things worse. Done actions whose tool has no undo are reported, not hidden.

An undo function gets the original arguments with their original types as keyword
arguments, plus any of ``result`` (what the action returned, whole), ``action`` (its record) and
``idempotency_key`` (the undo's own key, for the API) that it declares.

The walk acts for the agent, so it holds the agent's lease (``checkpoint._lease``, the one a
run takes) from before it reads the actions until it returns, and checks it before each undo.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from langchain_core.tools import BaseTool
from pydantic import ValidationError

from .._errors import InDoubt, LeaseHeld, LeaseLost, RecallError
from ..checkpoint._lease import HeldLease, LeaseKeeper, new_holder_id
from ..checkpoint._runs import Entry
from ..store import Action, RecallStore, UndoReport
from ..store._codec import dumps_typed
from ._canonical import args_digest
from ._keys import IdempotencyKey, key_parameters, key_scope
from ._outcome import whole_result

UNDO_PREFIX = "undo:"
DEFAULT_LEASE_TTL = 60.0  # as RecallCheckpointer's


def undo_action_id(action_id: str) -> str:
    """The id of the action that reverses ``action_id`` (the same every time)."""
    return "u" + hashlib.sha256(("recall-undo-v1\x1f" + action_id).encode()).hexdigest()[:31]


def run_undo(
    store: RecallStore,
    agent_id: str,
    undo: Mapping[str, Callable[..., Any]] | None = None,
    *,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    entry: Entry | None = None,
) -> UndoReport:
    """Reverse the agent's done actions newest first; see the module docstring. ``undo``: undo
    functions by tool name, beside those the store knows from nodes that ran in this process.

    Runs under the agent's lease, the one ``RecallCheckpointer`` takes for a run (``LeaseHeld``
    while another holder has it; ``LeaseLost`` once another took it over mid-way). ``entry``:
    who called (``Entry.here()`` in the caller's thread or task), so that a run of the agent it
    started, which LangGraph refused after the lease was taken, gives the lease back first."""
    # A mistyped agent id returned an empty report (nothing to undo) and left a lease row
    # under that name.
    store._require_agent(agent_id)
    registry = {**store._undo_registry, **(undo or {})}
    for name, given in (undo or {}).items():
        if not is_undo_function(given):
            raise RecallError(
                f"undo={{{name!r}: ...}} must map a tool name to a function (or a LangChain "
                f"tool), got {given!r}",
                code="invalid_value",
            )
    # Without the lease, an undo ran beside a run of the agent (refunding a charge it was
    # about to build on) or beside another undo(): each claimed what the other had open,
    # read it as in doubt and stopped, or an undo killed mid-way was resolved by a person
    # while a second one was still running it.
    keeper = LeaseKeeper(store, holder=new_holder_id(), ttl=lease_ttl, wait=0.0, fenced=False)
    # A run of the agent in this process that LangGraph refused after it took the lease
    # (Command(resume=None) at an approval) holds it until the agent's next run gives it back:
    # undo, right after, was refused with lease_held by a run that never ran.
    for checkpointer in list(store._checkpointers):
        checkpointer._free_stale(agent_id, entry)
    try:
        held = _take_lease(store, keeper, agent_id)
        return _run(store, agent_id, registry, keeper, held.epoch)
    finally:
        keeper.close()  # gives the lease back (unless it was lost) and stops its renewals


def is_undo_function(fn: Any) -> bool:
    """A function, or a LangChain tool (not callable itself: it runs with ``invoke``). The
    node's ``undo=`` takes either, so the same dict given to ``store.undo`` must too."""
    return callable(fn) or _is_tool(fn)


def _is_tool(fn: Any) -> bool:
    return hasattr(fn, "invoke") and hasattr(fn, "name")


def _take_lease(store: RecallStore, keeper: LeaseKeeper, agent_id: str) -> HeldLease:
    try:
        return keeper.acquire(agent_id)
    except LeaseHeld as exc:
        holder = exc.details.get("holder")
        if any(
            cp.holder == holder and cp._shared.keeper.is_busy(agent_id)
            for cp in list(store._checkpointers)
        ):
            # A run of this very process: no other process to look for, nothing to wait out.
            raise LeaseHeld(
                f"cannot undo agent {agent_id!r} now: a run of it in this process (checkpointer "
                f"{holder}) holds its lease and is still going. undo cannot run inside that run "
                "(from one of its tools or nodes), nor while a graph.stream()/astream() of it "
                "has not been read to the end or closed. Nothing was undone or recorded; call "
                "undo once the run has returned.",
                **exc.details,
            ) from None
        expires_at = exc.details.get("expires_at")
        left = "" if expires_at is None else f", for {max(0.0, expires_at - time.time()):.1f}s more"
        raise LeaseHeld(
            f"cannot undo agent {agent_id!r} now: {exc.details.get('holder')} holds its lease "
            f"(epoch {exc.details.get('epoch')}{left}): a run of the agent, another undo, or "
            "one that was killed and whose lease has not expired yet. Nothing was undone or "
            "recorded; run undo again once it is free.",
            **exc.details,
        ) from None


def _run(
    store: RecallStore,
    agent_id: str,
    registry: Mapping[str, Callable[..., Any]],
    keeper: LeaseKeeper,
    epoch: int,
) -> UndoReport:
    report = UndoReport()
    # Every undo function the walk will call is checked first (it takes these arguments, and
    # runs in this thread), before any is run or recorded: a bad one found half-way left the
    # undos before it done and its own recorded as failed, never to run again once fixed.
    walk = _walk(store.actions(agent_id), registry, report)
    calls = [_prepare(fn, action) for action, fn in walk.undos]
    for call in calls:
        _check_lease(keeper, agent_id, report)
        outcome = _undo_one(store, agent_id, call, epoch)
        if outcome == "in_doubt":  # the undo is what is open: name it, to be resolved
            return _stopped(report, undo_action_id(call.action.action_id))
        lists = {"done": report.undone, "already": report.already_undone, "failed": report.failed}
        lists[outcome].append(call.action.action_id)
    return _stopped(report, walk.stopped_at) if walk.stopped_at else report


def _check_lease(keeper: LeaseKeeper, agent_id: str, report: UndoReport) -> None:
    """Raise ``LeaseLost`` before the next undo starts if another holder took the lease (this
    process was frozen past it, or its renewals failed): that holder now acts for the agent."""
    try:
        keeper.check_write(agent_id)
    except LeaseLost:
        current = keeper.store.lease(agent_id)
        who = current.holder if current is not None else "nobody"
        raise LeaseLost(
            f"undo of agent {agent_id!r} lost its lease (it now belongs to {who}) after "
            f"undoing {len(report.undone)} action(s); it started no other undo. What it undid "
            "is recorded: run undo again once the agent is free.",
            agent_id=agent_id,
            holder=who,
            undone=list(report.undone),
        ) from None


@dataclasses.dataclass
class _Walk:
    """The done actions to reverse (newest first, each with its function), and where the walk
    stops: the first action or undo in doubt."""

    undos: list[tuple[Action, Callable[..., Any]]] = dataclasses.field(default_factory=list)
    stopped_at: str | None = None


def _walk(
    actions: list[Action], registry: Mapping[str, Callable[..., Any]], report: UndoReport
) -> _Walk:
    walk = _Walk()
    for action in reversed(actions):
        if action.tool.startswith(UNDO_PREFIX):
            if action.status == "open":  # an undo that crashed mid-way: unknown state
                walk.stopped_at = action.action_id
                break
            continue
        if action.in_doubt:
            walk.stopped_at = action.action_id
            break
        # Planned and never started: nothing happened, nothing to reverse.
        if action.status != "done" or action.klass == "pure":
            continue
        fn = registry.get(action.tool)
        if fn is None:
            report.no_undo.append(action.action_id)
            continue
        walk.undos.append((action, fn))
    return walk


def _stopped(report: UndoReport, action_id: str) -> UndoReport:
    return dataclasses.replace(report, stopped_at=action_id)


@dataclasses.dataclass(frozen=True)
class _UndoCall:
    """One undo, checked: its function, the action it reverses, the original arguments, and
    which of ``result``/``action``/``idempotency_key`` the function declares (for a LangChain
    tool: its ``IdempotencyKey`` parameters)."""

    fn: Callable[..., Any]
    action: Action
    args: dict[str, Any]
    extras: frozenset[str]
    is_tool: bool


def _undo_one(store: RecallStore, agent_id: str, call: _UndoCall, epoch: int) -> str:
    action = call.action
    undo_id = undo_action_id(action.action_id)
    claim = store.claim(
        agent_id,
        undo_id,
        tool=UNDO_PREFIX + action.tool,
        args=call.args,
        args_digest=args_digest(UNDO_PREFIX + action.tool, call.args),
        klass="external",
        idempotency_key=undo_id,
        thread_id=action.thread_id,
        epoch=epoch,
    )
    if claim.status == "done":
        return "already"  # an earlier undo() reversed it (the undo is once-only)
    if claim.status == "failed":
        return "failed"
    if claim.status == "in_doubt":
        return "in_doubt"
    attempt = claim.action.attempt
    try:
        with key_scope(undo_id):
            result = _invoke(store, call, key=undo_id)
    except _ReturnedAwaitable as exc:
        # It returned an awaitable instead of running: nothing was done, so the attempt is
        # closed as not done (the next undo() claims it again) and the caller told why.
        store.end(undo_id, attempt, "not_done", note=str(exc.error))
        raise exc.error from None
    except InDoubt:
        # It cannot tell whether its reversal happened (an answer lost after the request
        # left). Recorded failed, a person would read "not refunded" and refund again: it
        # stays open, as a crash would leave it, and the walk stops at it.
        return "in_doubt"
    except Exception as exc:
        store.end(undo_id, attempt, "failed", error=f"{type(exc).__name__}: {exc}")
        return "failed"
    note = f"undid {action.action_id}"
    try:
        dumps_typed(result)
    except RecallError:
        # The undo ran: its end must be recorded, or it would read as in doubt for good and
        # stop every later undo() here. What it returned is for people to read, so its repr.
        note += (
            f"; it returned a {type(result).__name__}, which cannot be recorded: kept as its repr"
        )
        result = repr(result)
    store.end(undo_id, attempt, "done", result=result, note=note)
    return "done"


_EXTRAS = ("result", "action", "idempotency_key")


def _prepare(fn: Callable[..., Any], action: Action) -> _UndoCall:
    """The undo of ``action`` by ``fn``, or ``invalid_value`` saying what ``fn`` must look like."""
    args = dict(action.args) if isinstance(action.args, dict) else {}
    name = getattr(fn, "name", None) or getattr(fn, "__qualname__", None) or repr(fn)
    if _is_tool(fn):  # a LangChain tool
        if getattr(fn, "func", True) is None:
            raise _async_refused(name, action)
        # Its IdempotencyKey parameters get the undo's own key, as a node's tool gets its call's.
        keys = frozenset(key_parameters(cast(BaseTool, fn)))
        _check_tool_args(fn, name, action, args, keys)
        return _UndoCall(fn, action, args, keys, is_tool=True)
    call = type(fn).__call__ if not inspect.isroutine(fn) else None  # an object with __call__
    if inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call)):
        raise _async_refused(name, action)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return _UndoCall(fn, action, args, frozenset(), is_tool=False)
    params = signature.parameters
    extras = frozenset(e for e in _EXTRAS if e in params and e not in args)
    try:
        signature.bind(**args, **dict.fromkeys(extras))
    except TypeError as exc:
        raise _unfit(
            f"function {name!r}",
            action,
            str(exc),
            f"take them as keyword arguments ({_wanted(args)}), and may also declare result, "
            "action and idempotency_key (or **kwargs)",
        ) from None
    return _UndoCall(fn, action, args, extras, is_tool=False)


def _check_tool_args(
    fn: Any, name: str, action: Action, args: dict[str, Any], keys: frozenset[str]
) -> None:
    """A tool's schema must take the original arguments: found only when its undo ran, it was
    recorded failed, never to run again once fixed."""
    schema = getattr(fn, "args_schema", None)
    validate = getattr(schema, "model_validate", None) if isinstance(schema, type) else None
    if validate is None:
        return  # a JSON schema or none: the tool itself says what is wrong when it runs
    try:
        validate({**args, **dict.fromkeys(keys, IdempotencyKey("key"))})
    except ValidationError as exc:
        why = f"{exc.error_count()} error(s): " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
        )
        raise _unfit(
            f"tool {name!r}", action, why, f"take those of {action.tool} ({_wanted(args)})"
        ) from None


def _wanted(args: dict[str, Any]) -> str:
    return ", ".join(sorted(args)) or "no arguments"


def _unfit(what: str, action: Action, why: str, must: str) -> RecallError:
    """An undo function or tool that cannot take the original call's arguments: refused
    before any undo runs, since found only when its undo ran it was recorded failed."""
    return RecallError(
        f"the undo {what} for {action.tool} cannot take the original arguments of "
        f"{action.tool} (action {action.action_id}): {why}. It must {must}. Nothing was "
        "undone or recorded; fix it and run undo again.",
        code="invalid_value",
        action_id=action.action_id,
        tool=action.tool,
    )


def _async_refused(name: str, action: Action) -> RecallError:
    return RecallError(
        f"the undo function {name!r} for {action.tool} is async; undo functions must be plain "
        "(sync) functions (store.aundo runs them in a worker thread). Nothing was undone or "
        "recorded; give a sync function and run undo again.",
        code="invalid_value",
        action_id=action.action_id,
        tool=action.tool,
    )


class _ReturnedAwaitable(Exception):
    def __init__(self, error: RecallError) -> None:
        super().__init__(str(error))
        self.error = error


def _invoke(store: RecallStore, call: _UndoCall, *, key: str) -> Any:
    if call.is_tool:  # ``extras``: its key parameters
        given = {**call.args, **dict.fromkeys(call.extras, IdempotencyKey(key))}
        return call.fn.invoke(given)  # type: ignore[attr-defined]
    extras: dict[str, Any] = {}
    for name in call.extras:
        if name == "result":
            # What the tool answered, whole: a long answer's record keeps only a reference.
            extras[name] = whole_result(store, call.action.result)
        else:
            extras[name] = call.action if name == "action" else key
    out = call.fn(**call.args, **extras)
    if inspect.isawaitable(out):
        if hasattr(out, "close"):
            out.close()
        raise _ReturnedAwaitable(
            _async_refused(getattr(call.fn, "__qualname__", repr(call.fn)), call.action)
        )
    return out
