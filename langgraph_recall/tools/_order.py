"""One order for the approval questions of calls that share a LangGraph task.

A plain ``ToolNode`` runs every call of an AI message in one task, concurrently, and
``interrupt()`` matches resume values to questions by a counter shared by the whole task. If
two gated calls reached ``interrupt()`` in a different order on the resume than on the first
run, the answer given for one would be applied to the other. So gated calls of one task pass
their ``interrupt()`` one at a time, in the order of the AI message's tool calls, on every run.

``DurableToolNode`` registers the task's gated calls before the calls start (``open_turns``);
with one call per task (the ``Send`` layout of ``create_agent``) there is nothing to order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._errors import RecallError

try:  # pragma: no cover - location differs across langgraph versions
    from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
except ImportError:  # pragma: no cover
    CONFIG_KEY_SCRATCHPAD = "__pregel_scratchpad"

TURN_TIMEOUT = 3600.0


class Turns:
    """Lets each registered call through once all calls before it have passed."""

    def __init__(self, order: Sequence[str]) -> None:
        self._order = list(order)
        self._passed: set[str] = set()
        self._cond = threading.Condition()
        self._wakeups: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def _ready(self, call_id: str) -> bool:
        if call_id not in self._order:
            return True
        before = self._order[: self._order.index(call_id)]
        return all(c in self._passed for c in before)

    def wait(self, call_id: str) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready(call_id), TURN_TIMEOUT):
                raise RecallError(
                    f"tool call {call_id} waited {TURN_TIMEOUT:.0f}s for the approvals of the "
                    "calls before it in the same step",
                    code="durability",
                )

    async def await_turn(self, call_id: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._ready(call_id):
                    return
                event = asyncio.Event()
                self._wakeups.append((loop, event))
            await asyncio.wait_for(event.wait(), TURN_TIMEOUT)

    def release(self, call_id: str) -> None:
        with self._cond:
            if call_id in self._passed:
                return
            self._passed.add(call_id)
            self._cond.notify_all()
            wakeups, self._wakeups = self._wakeups, []
        for loop, event in wakeups:
            loop.call_soon_threadsafe(event.set)


# id(scratchpad) -> (scratchpad, turns). The scratchpad is held so its id cannot be reused
# while the entry exists; entries live only while their task runs.
_registry: dict[int, tuple[Any, Turns]] = {}
_registry_lock = threading.Lock()


def _scratchpad(config: Any) -> Any:
    return ((config or {}).get("configurable") or {}).get(CONFIG_KEY_SCRATCHPAD)


@contextmanager
def open_turns(config: Any, gated_call_ids: Sequence[str]) -> Iterator[None]:
    """Register the order of a task's gated calls for the duration of the task."""
    pad = _scratchpad(config)
    if pad is None or len(gated_call_ids) < 2:
        yield
        return
    with _registry_lock:
        _registry[id(pad)] = (pad, Turns(gated_call_ids))
    try:
        yield
    finally:
        with _registry_lock:
            _registry.pop(id(pad), None)


def turns_for(config: Any) -> Turns | None:
    """The ordering registered for the task running with ``config`` (None: no ordering)."""
    pad = _scratchpad(config)
    if pad is None:
        return None
    with _registry_lock:
        entry = _registry.get(id(pad))
    return entry[1] if entry is not None and entry[0] is pad else None
