"""What the groups of RecallStore's methods need of the store.

RecallStore's record and action methods are thin: each opens one transaction on the store's
``Database`` and calls a function of ``_records`` or ``_actions``, and its ``a``-prefixed twin
runs it in a worker thread. They are grouped by what they keep (``_records_api``: turns,
working state, pointers, outputs, agents; ``_actions_api``: actions, approvals, leases), and
``RecallStore`` is the store over both. This base declares what each group relies on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from ._db import Database

T = TypeVar("T")


class StoreBase:
    """The database, the signing secret and the output threshold, as ``RecallStore`` sets them."""

    _db: Database
    _secret: bytes
    output_threshold: int

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)
