"""Finished actions this process has seen, so a repeat of one needs no round trip.

A repeat lookup (a resume, or a node re-run after a sibling's interrupt, asking for a call that
already finished) is one read on SQLite (about 11 µs of the 20) and one round trip on
PostgreSQL (about 200 µs, whatever the statement). Its answer cannot change: an attempt's end is
written once (the end statement changes nothing when one is there, and the table's trigger
refuses any other change), a done or failed attempt is never followed by another (a claim
answers it instead of inserting), and no statement deletes an action. So the row of an action
whose latest attempt is done or failed, once committed, holds for good, in every process.

What is kept is that row as the database returned it, and each hit builds a new ``Action``
from it, exactly as a read would: the caller gets objects of its own, never ones another hit
shares (LangGraph's reducers set ids on messages in place).

Rows enter only as committed truth: read by a claim before it writes anything, or returned by
this process's own end statement (``RETURNING``) after its transaction committed. An end that
found an end already there returns no row, so the first end stays the one remembered. Ends
that ride a task's write (``_due``) are not kept: a lone call is rarely asked again in the
process that ran it (its node's write follows at once).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

# Rows kept per database. A row is one action's arguments and its (small: large ones go to an
# output) result, so a full cache holds a few MB at most; the oldest goes first.
MAX_KEPT = 4096

# Where a row of ``_actions._ACTION_COLS`` has the outcome (tests/test_store_finished.py checks
# it against the columns), and the outcomes that are final.
_OUTCOME = 11
_FINAL = ("done", "failed")


class FinishedActions:
    """Rows of finished actions, by action id (see the module docstring)."""

    __slots__ = ("_rows", "_lock", "max_kept")

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._lock = threading.Lock()  # for eviction's iteration; a hit takes no lock
        self.max_kept = max_kept

    def get(self, action_id: str) -> tuple[Any, ...] | None:
        return self._rows.get(action_id)

    def keep(self, row: Sequence[Any] | None) -> None:
        """Remember ``row`` if its attempt is finished for good; anything else is ignored."""
        if row is None or row[_OUTCOME] not in _FINAL:
            return
        with self._lock:
            rows = self._rows
            rows[row[0]] = tuple(row)
            while len(rows) > self.max_kept:
                del rows[next(iter(rows))]

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def __len__(self) -> int:
        return len(self._rows)
