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
import logging
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langgraph.errors import GraphBubbleUp

from .._errors import RecallError
from . import _barrier
from ._bound import BoundCall, reset_bound, set_bound
from ._keys import key_scope
from ._order import Turns
from ._outcome import ActionEnd

log = logging.getLogger("langgraph_recall")

R = TypeVar("R")


@dataclass(frozen=True)
class Io:
    """A blocking call (store or database): inline when sync, in a worker thread when async."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Execute:
    """Run the tool (through the rest of the wrapper chain) with ``key`` as the current key
    and ``bound`` as the call its tool may run as (``_bound``)."""

    handler: Callable[[Any], Any]
    request: Any
    key: str | None
    bound: BoundCall | None = None
    # Under ``adrive``, ``ahandler(request)`` instead when given (a tool's own ``ainvoke``).
    ahandler: Callable[[Any], Any] | None = None


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


def _resolution(step: Resolve, found: Any) -> Any:
    """The resolver's answer, or ``invalid_value`` naming it when it is not one it may give."""
    if found is None or isinstance(found, ActionEnd):
        return found
    action = step.action
    raise RecallError(
        f"the resolver {name_of(step.resolver)} returned {type(found).__name__} {found!r:.80} for "
        f"{action.tool} (action {action.action_id}); it must return ActionEnd('done', "
        "result=...), ActionEnd('not_done') or None (cannot tell). The call stays open, not run.",
        code="invalid_value",
        action_id=action.action_id,
    )


def _resolver_failed(step: Resolve, exc: Exception) -> None:
    # A resolver that cannot reach what it checks (the mail API is down) knows no more than one
    # that returns None: the call stays in doubt, reported to the model and the operator, and
    # the next resume asks again. Raising instead failed every resume of the agent until the
    # API came back, with an error that named neither the resolver nor the call.
    action = step.action
    log.warning(
        "the resolver %s raised %s for %s (action %s); the call stays in doubt, not run",
        name_of(step.resolver),
        type(exc).__name__,
        action.tool,
        action.action_id,
        exc_info=exc,
    )
    return None


def name_of(fn: Any) -> str:
    """A function's name for messages (its class's for a callable object)."""
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _do_sync(step: Step) -> Any:
    if isinstance(step, Io):
        return step.fn(*step.args, **step.kwargs)
    if isinstance(step, Execute):
        token = set_bound(step.bound)
        try:
            with key_scope(step.key):
                return step.handler(step.request)
        finally:
            reset_bound(token)
    if isinstance(step, Resolve):
        try:
            found = step.resolver(step.action)
            if inspect.iscoroutine(found):
                # An async resolver under invoke: run it to its end on an event loop of its
                # own. Refused, it failed the whole run as soon as a tool raised InDoubt.
                found = _run_coroutine(found)
        except GraphBubbleUp:
            raise  # an interrupt() asking a person: LangGraph's to handle
        except Exception as exc:
            return _resolver_failed(step, exc)
        if inspect.isawaitable(found):
            if hasattr(found, "close"):
                found.close()  # type: ignore[union-attr]
            raise RecallError(
                "the resolver is async but the graph runs synchronously; use ainvoke/astream, "
                "or give a plain function as resolver=",
                code="invalid_value",
            )
        return _resolution(step, found)
    if isinstance(step, WaitDurable):
        return _barrier.wait_sync(step.target, step.timeout)
    step.turns.wait(step.call_id)
    return None


def _run_coroutine(coro: Any) -> Any:
    """``coro``'s result, on a new event loop: in this thread, or, when one runs here already
    (a Jupyter cell's), in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="recall-resolver", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _do_async(step: Step) -> Any:
    if isinstance(step, Io):
        return await asyncio.to_thread(step.fn, *step.args, **step.kwargs)
    if isinstance(step, Execute):
        token = set_bound(step.bound)
        try:
            with key_scope(step.key):
                out = (step.ahandler or step.handler)(step.request)
                return await out if inspect.isawaitable(out) else out
        finally:
            reset_bound(token)
    if isinstance(step, Resolve):
        call = type(step.resolver).__call__ if not inspect.isroutine(step.resolver) else None
        try:
            if inspect.iscoroutinefunction(step.resolver) or inspect.iscoroutinefunction(call):
                found = await step.resolver(step.action)
            else:
                # A plain resolver may call a slow API: keep it off the event loop.
                found = await asyncio.to_thread(step.resolver, step.action)
                found = await found if inspect.isawaitable(found) else found
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return _resolver_failed(step, exc)
        return _resolution(step, found)
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
