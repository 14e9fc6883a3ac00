"""What the groups of RecallStore's methods need of the store.

RecallStore's record and action methods are thin: each opens one transaction on the store's
``Database`` and calls a function of ``_records`` or ``_actions``, and its ``a``-prefixed twin
runs it in a worker thread. They are grouped by what they keep (``_records_api``: turns,
working state, pointers, outputs, agents; ``_actions_api``: actions, approvals, leases), and
``RecallStore`` is the store over both. This base declares what each group relies on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._db import Database

T = TypeVar("T")

_caller = threading.local()


def caller_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of the async twin this worker thread runs for, or None (a sync call).

    That loop waits for the thread, free to run a coroutine the sync body needs: an async-only
    embedding function called by a search inside ``abriefing``, say.
    """
    return getattr(_caller, "loop", None)


class StoreBase:
    """The database, the signing secret and the output threshold, as ``RecallStore`` sets them."""

    _db: Database
    _secret: bytes
    output_threshold: int

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()

        def on_thread() -> T:
            _caller.loop = loop
            try:
                return fn(*args, **kwargs)
            finally:
                _caller.loop = None

        return await asyncio.to_thread(on_thread)
