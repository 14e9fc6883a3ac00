"""A dict that keeps only its most recently set keys: per-agent memory of a long-lived process.

A server's agents are usually its conversations (``agent_id`` defaults to the thread), so a
dict keyed by agent that only ever grows would grow with every conversation the process has
served. What such a dict remembers only saves I/O (a read skipped, a marker not rewritten):
forgetting an old agent costs that agent's next run the I/O, nothing else.
"""

from __future__ import annotations

import threading
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

RECENT_AGENTS = 4096
"""How many agents a process remembers, per kind of memory."""


class Recent(dict[K, V]):
    """Keeps the ``limit`` keys set most recently; setting a key again makes it the newest."""

    def __init__(self, limit: int = RECENT_AGENTS) -> None:
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()

    def __setitem__(self, key: K, value: V) -> None:
        # Under a lock: runs of different agents end on different threads, and the oldest key
        # is found by iterating, which another thread's insert in between would break.
        with self._lock:
            super().pop(key, None)
            super().__setitem__(key, value)
            if len(self) > self.limit:
                super().__delitem__(next(iter(self)))

    def pop(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        with self._lock:
            return super().pop(key, default)
