"""One order for the questions of calls that share a LangGraph task.

A plain ``ToolNode`` runs every call of an AI message in one task, concurrently, and
``interrupt()`` matches resume values to questions by a counter shared by the whole task: the
k-th ``interrupt()`` of a run of the task gets the k-th answer. So the calls of one task ask in
the order of the AI message's tool calls, on every run: a call may ask (an approval, or an
``interrupt()`` inside its tool) only once every call before it is done with the run, and one
answered from its record takes again the answers it took when it ran (``Asking.replay``).
Otherwise a "yes" given to the question shown went to another call (an approval nobody saw,
or a sibling's question once a finished call stopped asking).

``DurableToolNode`` registers the task's calls before they start (``open_turns``) and gives
each call a view of the task's scratchpad whose counter enforces the order (``Asking``): a
call that reaches ``interrupt()`` early stops (``Deferred``), waits, and runs again, as an
interrupted tool is run again by LangGraph. With one call per task (the ``Send`` layout of
``create_agent``) there is nothing to order.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from .._errors import RecallError
from .._wakeups import LoopWakeups

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
        self._wakeups = LoopWakeups()
        # How far the task's interrupt() counter has gone in this run of the task. Calls ask
        # one at a time, in turn, so only the call whose turn it is moves it (``took``).
        self.position = 0

    def took(self) -> None:
        """An interrupt() of the task ran (it counted, answered or not)."""
        with self._cond:
            self.position += 1

    def answer_waiting(self, pad: Any, resume: bool = True) -> bool:
        """Whether an interrupt() asked now would get an answer: one the task holds at the
        counter's next position, or (``resume``) the one the run was resumed with.

        A run of the task after ``update_state`` or a fork (a new task), or after a crash that
        lost the task's answers (its write was never saved), holds fewer than the calls took
        when they ran. A call answered from its record must not move the counter past the
        answers held (LangGraph's next interrupt() then failed, ``AssertionError(([], 1))``):
        it takes the resume's answer when it may be its own (the same task: a crash), and
        none otherwise, leaving it to the question it was given to."""
        return self.holds(pad) or (resume and pad.get_null_resume(False) is not None)

    def holds(self, pad: Any) -> bool:
        """Whether the task holds an answer at the counter's next position (from its runs)."""
        with self._cond:
            return self.position < len(pad.resume)

    def ready(self, call_id: str) -> bool:
        """Whether every call before ``call_id`` is through."""
        with self._cond:
            return self._ready(call_id)

    def _ready(self, call_id: str) -> bool:
        if call_id not in self._order:
            return True
        before = self._order[: self._order.index(call_id)]
        return all(c in self._passed for c in before)

    def wait(self, call_id: str) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready(call_id), TURN_TIMEOUT):
                raise _waited_too_long(call_id)

    async def await_turn(self, call_id: str) -> None:
        while True:
            with self._cond:
                if self._ready(call_id):
                    return
                woken = self._wakeups.add()
            if not await self._wakeups.wait(woken, TURN_TIMEOUT):
                raise _waited_too_long(call_id)

    def release(self, call_id: str) -> None:
        with self._cond:
            if call_id in self._passed:
                return
            self._passed.add(call_id)
            self._cond.notify_all()
            self._wakeups.wake_all()


def _waited_too_long(call_id: str) -> RecallError:
    return RecallError(
        f"tool call {call_id} waited {TURN_TIMEOUT:.0f}s for the calls before it in the same "
        "step to finish before asking its question",
        code="durability",
    )


# id(scratchpad) -> (scratchpad, turns). The scratchpad is held so its id cannot be reused
# while the entry exists; entries live only while their task runs.
_registry: dict[int, tuple[Any, Turns]] = {}
_registry_lock = threading.Lock()


def scratchpad_of(config: Any) -> Any:
    return ((config or {}).get("configurable") or {}).get(CONFIG_KEY_SCRATCHPAD)


@contextmanager
def open_turns(config: Any, call_ids: Sequence[str]) -> Iterator[None]:
    """Register the order of a task's calls for the duration of the task."""
    pad = scratchpad_of(config)
    if pad is None or len(call_ids) < 2:
        yield
        return
    with _registry_lock:
        _registry[id(pad)] = (pad, Turns(call_ids))
    try:
        yield
    finally:
        with _registry_lock:
            _registry.pop(id(pad), None)


def turns_for(config: Any) -> Turns | None:
    """The ordering registered for the task running with ``config`` (None: no ordering)."""
    asking = asking_of(config)
    if asking is not None:  # a call's own config: its scratchpad is the call's view
        return asking.turns
    pad = scratchpad_of(config)
    if pad is None:
        return None
    with _registry_lock:
        entry = _registry.get(id(pad))
    return entry[1] if entry is not None and entry[0] is pad else None


ASKING_KEY = "__recall_asking"


class Deferred(GraphBubbleUp):
    """A call reached ``interrupt()`` before the calls ahead of it in its task were through.

    Raised inside the tool, like an interrupt: the attempt ends as abandoned, and the call runs
    again, under the same key, once its turn comes (``DurableToolNode._run_one``)."""


class Asking:
    """One call's view of its task's question counter (see the module doc)."""

    def __init__(self, turns: Turns, call_id: str, pad: Any, task_id: str | None) -> None:
        self.turns = turns
        self.call_id = call_id
        self.pad = pad
        self.task_id = task_id  # the LangGraph task the call runs in
        self.asked = 0  # interrupt() calls inside the tool, in this attempt

    def _counter(self) -> int:
        if not self.turns.ready(self.call_id):
            raise Deferred()
        self.asked += 1
        self.turns.took()
        return int(self.pad.interrupt_counter())

    def config(self, config: Any) -> Any:
        """``config`` with this view in place of the task's scratchpad (what the tool sees)."""
        view = dataclasses.replace(self.pad, interrupt_counter=self._counter)
        conf = {**(config.get("configurable") or {}), CONFIG_KEY_SCRATCHPAD: view, ASKING_KEY: self}
        return {**config, "configurable": conf}

    def replay(self, asked: int, *, same_task: bool) -> None:
        """Take again the ``asked`` answers a call answered from its record took when it ran
        (the caller waited for its turn), as far as they are there (``same_task``: it ran in
        this very task, so the run's resume may be one of them): the calls after it then get
        their own."""
        for _ in range(asked):
            if not self.turns.answer_waiting(self.pad, resume=same_task):
                return
            self.turns.took()
            interrupt(None)  # takes that answer as the tool's own interrupt() did


def asking_of(config: Any) -> Asking | None:
    """The ``Asking`` a call of an ordered task runs with (None: a lone call, or no order)."""
    found = ((config or {}).get("configurable") or {}).get(ASKING_KEY)
    return found if isinstance(found, Asking) else None
