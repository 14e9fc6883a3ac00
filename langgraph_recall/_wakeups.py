"""Async waiters woken from any thread, for state guarded by a ``threading`` lock.

A coroutine that waits for something another thread will do must not wait on a worker thread
(``asyncio.to_thread(cond.wait)``): the loop's default executor has only ``cpu + 4`` workers,
and the thing waited for (a checkpoint's put, a sibling call's tool, a run giving its agent
back) often needs one of them too. With as many waiters as workers, nothing could run, and
every waiter slept to its timeout. Here a waiter parks a future of its own loop instead and
costs no thread.
"""

from __future__ import annotations

import asyncio
import threading


class LoopWakeups:
    """Futures of waiting coroutines, resolved from whichever thread changes the state.

    The owner calls ``add`` under its own lock, after finding the state unready, and
    ``wake_all`` under that lock when it changes the state: a waiter is then registered before
    the change it waits for can be made, and no wake-up is lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the list only; taken inside the owner's lock
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []

    def add(self) -> asyncio.Future[bool]:
        """A future of the running loop, resolved True at the next ``wake_all``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            self._waiting.append((loop, future))
        return future

    def wake_all(self) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for loop, future in waiting:
            try:
                loop.call_soon_threadsafe(_resolve, future, True)
            except RuntimeError:  # its loop closed: that waiter is gone
                pass

    async def wait(self, future: asyncio.Future[bool], timeout: float) -> bool:
        """Wait for ``future`` (from ``add``) at most ``timeout`` seconds; whether it was woken.

        Not ``asyncio.wait_for``: on Python 3.11 and older it can swallow a cancellation that
        lands just after the future resolved, and a cancelled ``ainvoke`` then went on to run
        the tool it was waiting to run. Here a cancellation always propagates.
        """
        loop = asyncio.get_running_loop()
        timer = loop.call_later(max(0.0, timeout), _resolve, future, False)
        try:
            return await future
        finally:
            timer.cancel()
            self._discard(future)  # one that timed out or was cancelled (woken: already gone)

    def _discard(self, future: asyncio.Future[bool]) -> None:
        with self._lock:
            self._waiting = [(loop, f) for loop, f in self._waiting if f is not future]


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():  # woken and timed out in one loop turn, or cancelled meanwhile
        future.set_result(value)
