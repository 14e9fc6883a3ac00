"""Sync and async drivers for the durable-call logic, which is written once as a generator.

The logic (``_durable``, ``_approval``, ``_settle``) yields what it needs done and gets the
answer back; only here does sync differ from async: a store call runs inline or in a worker
thread, the tool runs through ``handler(request)`` or ``await handler(request)``, a wait
blocks or awaits. Exceptions raised while doing a step are thrown back into the logic at the
exact point that asked for it, so its ``try``/``except`` reads as if the call were direct.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._errors import RecallError
from . import _barrier
from ._keys import key_scope
from ._order import Turns

R = TypeVar("R")


@dataclass(frozen=True)
class Io:
    """A blocking call (store or database): inline when sync, in a worker thread when async."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Execute:
    """Run the tool (through the rest of the wrapper chain) with ``key`` as the current key."""

    handler: Callable[[Any], Any]
    request: Any
    key: str | None


@dataclass(frozen=True)
class Resolve:
    """Ask the user's resolver about an action in doubt."""

    resolver: Callable[[Any], Any]
    action: Any


@dataclass(frozen=True)
class WaitDurable:
    """Wait until the checkpoint holding the AI message is saved."""

    target: _barrier.Target
    timeout: float


@dataclass(frozen=True)
class WaitTurn:
    """Wait until the gated calls before this one in the same task have asked their question."""

    turns: Turns
    call_id: str


Step = Io | Execute | Resolve | WaitDurable | WaitTurn
Logic = Generator[Step, Any, R]


def _do_sync(step: Step) -> Any:
    if isinstance(step, Io):
        return step.fn(*step.args, **step.kwargs)
    if isinstance(step, Execute):
        with key_scope(step.key):
            return step.handler(step.request)
    if isinstance(step, Resolve):
        found = step.resolver(step.action)
        if inspect.isawaitable(found):
            if hasattr(found, "close"):
                found.close()  # type: ignore[union-attr]
            raise RecallError(
                "the resolver is async but the graph runs synchronously; use ainvoke/astream, "
                "or give a plain function as resolver=",
                code="invalid_value",
            )
        return found
    if isinstance(step, WaitDurable):
        return _barrier.wait_sync(step.target, step.timeout)
    step.turns.wait(step.call_id)
    return None


async def _do_async(step: Step) -> Any:
    if isinstance(step, Io):
        return await asyncio.to_thread(step.fn, *step.args, **step.kwargs)
    if isinstance(step, Execute):
        with key_scope(step.key):
            out = step.handler(step.request)
            return await out if inspect.isawaitable(out) else out
    if isinstance(step, Resolve):
        call = type(step.resolver).__call__ if not inspect.isroutine(step.resolver) else None
        if inspect.iscoroutinefunction(step.resolver) or inspect.iscoroutinefunction(call):
            return await step.resolver(step.action)
        # A plain resolver may call a slow API: keep it off the event loop.
        found = await asyncio.to_thread(step.resolver, step.action)
        return await found if inspect.isawaitable(found) else found
    if isinstance(step, WaitDurable):
        return await _barrier.wait_async(step.target, step.timeout)
    await step.turns.await_turn(step.call_id)
    return None


def drive(logic: Logic[R]) -> R:
    """Run ``logic`` to the end, doing each step inline."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = logic.throw(error) if error is not None else logic.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = _do_sync(step)
        except BaseException as exc:  # thrown back in: the logic decides (or re-raises)
            error = exc


async def adrive(logic: Logic[R]) -> R:
    """Run ``logic`` to the end, awaiting each step."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = logic.throw(error) if error is not None else logic.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = await _do_async(step)
        except BaseException as exc:
            error = exc
