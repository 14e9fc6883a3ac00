"""Async waiters woken from any thread, for state guarded by a ``threading`` lock.

A coroutine that waits for something another thread will do must not wait on a worker thread
(``asyncio.to_thread(cond.wait)``): the loop's default executor has only ``cpu + 4`` workers,
and the thing waited for (a checkpoint's put, a sibling call's tool) often needs one of them
too. With as many waiters as workers, nothing could run, and every waiter slept to its
timeout. Here a waiter parks an ``asyncio.Event`` of its own loop instead and costs no thread.
"""

from __future__ import annotations

import asyncio


class LoopWakeups:
    """Events of waiting coroutines, set from whichever thread changes the guarded state.

    The owner calls ``add`` and ``wake_all`` under its own lock, so a waiter that checked the
    state and found it unready is registered before the change it waits for can be made.
    """

    def __init__(self) -> None:
        self._events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def add(self) -> asyncio.Event:
        """A new event of the running loop, set at the next ``wake_all``."""
        event = asyncio.Event()
        self._events.append((asyncio.get_running_loop(), event))
        return event

    def wake_all(self) -> None:
        events, self._events = self._events, []
        for loop, event in events:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # its loop closed: that waiter is gone (timed out, cancelled)
                pass


async def wait_for_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; whether it was set."""
    try:
        await asyncio.wait_for(event.wait(), max(0.0, timeout))
    except asyncio.TimeoutError:
        return False
    return True
