"""``store.undo(agent_id)``: reverse an agent's done actions, newest first.

Each undo is itself a once-only action (its id derived from the action it reverses), so
running ``undo`` twice, or after a crash in the middle, never refunds twice. The walk stops at
the first action (or undo) in doubt: what happened after it is unknown, so reversing what came
before could leave things worse. Done actions whose tool has no undo are reported, not hidden.

An undo function gets the original arguments with their original types as keyword
arguments, plus any of ``result`` (what the action returned), ``action`` (its record) and
``idempotency_key`` (the undo's own key, for the API) that it declares.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import RecallError
from ..store import Action, RecallStore, UndoReport
from ._canonical import args_digest
from ._keys import key_scope

UNDO_PREFIX = "undo:"


def undo_action_id(action_id: str) -> str:
    """The id of the action that reverses ``action_id`` (the same every time)."""
    return "u" + hashlib.sha256(("recall-undo-v1\x1f" + action_id).encode()).hexdigest()[:31]


def run_undo(
    store: RecallStore, agent_id: str, undo: Mapping[str, Callable[..., Any]] | None = None
) -> UndoReport:
    """Reverse the agent's done actions newest first; see the module docstring. ``undo``: undo
    functions by tool name, beside those the store knows from nodes that ran in this process."""
    report = UndoReport()
    registry = {**store._undo_registry, **(undo or {})}
    for name, given in (undo or {}).items():
        if not callable(given):
            raise RecallError(
                f"undo={{{name!r}: ...}} must map a tool name to a function, got {given!r}",
                code="invalid_value",
            )
    for action in reversed(store.actions(agent_id)):
        if action.tool.startswith(UNDO_PREFIX):
            if action.status == "open":  # an undo that crashed mid-way: unknown state
                return _stopped(report, action.action_id)
            continue
        if action.status == "open":
            return _stopped(report, action.action_id)
        if action.status != "done" or action.klass == "pure":
            continue
        fn = registry.get(action.tool)
        if fn is None:
            report.no_undo.append(action.action_id)
            continue
        outcome = _undo_one(store, agent_id, action, fn)
        if outcome == "in_doubt":
            return _stopped(report, action.action_id)
        lists = {"done": report.undone, "already": report.already_undone, "failed": report.failed}
        lists[outcome].append(action.action_id)
    return report


def _stopped(report: UndoReport, action_id: str) -> UndoReport:
    return dataclasses.replace(report, stopped_at=action_id)


def _undo_one(store: RecallStore, agent_id: str, action: Action, fn: Callable[..., Any]) -> str:
    undo_id = undo_action_id(action.action_id)
    args = dict(action.args) if isinstance(action.args, dict) else {}
    claim = store.claim(
        agent_id,
        undo_id,
        tool=UNDO_PREFIX + action.tool,
        args=args,
        args_digest=args_digest(UNDO_PREFIX + action.tool, args),
        klass="external",
        idempotency_key=undo_id,
        thread_id=action.thread_id,
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
            result = _call(fn, args, action=action, key=undo_id)
    except Exception as exc:
        store.end(undo_id, attempt, "failed", error=f"{type(exc).__name__}: {exc}")
        return "failed"
    store.end(undo_id, attempt, "done", result=result, note=f"undid {action.action_id}")
    return "done"


def _call(fn: Callable[..., Any], args: dict[str, Any], *, action: Action, key: str) -> Any:
    extras = {"result": action.result, "action": action, "idempotency_key": key}
    if hasattr(fn, "invoke") and hasattr(fn, "name"):  # a LangChain tool
        return fn.invoke(args)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        params = {}  # type: ignore[assignment]
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = dict(args)
    for name, value in extras.items():
        if name in params and name not in kwargs:
            kwargs[name] = value
    if not takes_all:
        unknown = [k for k in kwargs if k not in params]
        if unknown:
            raise RecallError(
                f"undo function {getattr(fn, '__name__', fn)!r} does not take "
                f"{', '.join(unknown)}; it must accept the original arguments of {action.tool}",
                code="invalid_value",
            )
    out = fn(**kwargs)
    if inspect.isawaitable(out):
        if hasattr(out, "close"):
            out.close()
        raise RecallError(
            "undo functions must be plain (sync) functions; store.aundo runs them in a thread",
            code="invalid_value",
        )
    return out
