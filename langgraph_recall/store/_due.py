"""Ends that ride the task's own write: a finished call's end, committed with its ToolMessage.

A lone durable call's end does not need a commit of its own when the graph's saver is
``store.checkpointer()``'s: the task's write of that call's answer (the saver's
``put_writes``) follows as soon as the node returns, to the same database, and carries the end
in its transaction (``_same_db.put_writes_with``). Until then the end is *due*: held here, in
memory.

Nothing may read the action as open meanwhile, in this process: every transaction the
database opens first makes sure no end is due (``Database.tx``): it waits for a write already
carrying some, and writes the others itself. So a claim, a listing or a person's ``resolve`` in
this process never sees a finished call as in doubt. The briefing is the one reader that does
neither: it takes ``finished()`` first and leaves those calls out of the calls in doubt
(``Database.tx(land=False)``), since it runs before every model call, often before the task's
write has taken the ends it is to carry. The end's statement changes
nothing when the attempt has an end already (one a person or a resolver recorded first stays).
The lease's release is such a transaction, so a run's ends are written before its lease goes;
``RecallStore.close()`` writes what is left. A process killed before any of these loses the
end: the call then reads as in doubt, exactly as after a kill between the tool's answer and
its own commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._db import Database

log = logging.getLogger("langgraph_recall")


@dataclass(frozen=True, slots=True, eq=False)
class DueEnd:
    """One attempt's end: its statement (``?`` and ``{now}``, see ``Database.sql``)."""

    task_id: str
    action_id: str
    attempt: int
    sql: str
    params: tuple[Any, ...]


class DueEnds:
    """The ends due in this process, by the task whose write carries them.

    An end is *due* (held), then *riding* (a write carries it: the task's, or a reader's
    ``land``), then gone once committed, or due again if that write failed. A transaction that
    finds ends riding waits for that write instead of writing them a second time.
    """

    __slots__ = ("_cond", "_by_task", "_riding", "_ended", "_local", "pending")

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._by_task: dict[str, list[DueEnd]] = {}
        self._riding = 0
        # (action id, attempt) of every end due or riding: what ``finished`` reports.
        self._ended: dict[tuple[str, int], int] = {}
        self._local = threading.local()  # set while this thread writes them (no re-entry)
        # Ends due or riding. Read without the lock on every transaction's start (one
        # attribute, no call): an end added by another thread a moment ago may be missed,
        # which no order between threads could promise anyway.
        self.pending = 0

    def __bool__(self) -> bool:
        return self.pending > 0

    def add(self, end: DueEnd) -> None:
        with self._cond:
            self._by_task.setdefault(end.task_id, []).append(end)
            key = (end.action_id, end.attempt)
            self._ended[key] = self._ended.get(key, 0) + 1
            self.pending += 1

    def finished(self) -> frozenset[tuple[str, int]]:
        """(action id, attempt) of the calls whose end is due or on its way, not committed:
        for a reader that leaves them out of what it reports open (``Database.tx(land=False)``).

        Take it before the reads: an end that commits in between is then either read as
        committed or still in this set. Taken after them, an end committing in between would be
        read as open and be gone from here too.
        """
        if not self.pending:
            return frozenset()
        with self._cond:
            return frozenset(self._ended)

    def take(self, task_id: str) -> list[DueEnd]:
        """The ends ``task_id``'s write is to carry; call ``rode`` once it committed or failed."""
        with self._cond:
            ends = self._by_task.pop(task_id, [])
            self._riding += len(ends)
            return ends

    def rode(self, ends: Sequence[DueEnd], committed: bool) -> None:
        """The write carrying ``ends`` is over: forget them, or hold them again if it failed."""
        with self._cond:
            self._riding -= len(ends)
            if committed:
                self.pending -= len(ends)
                for end in ends:
                    key = (end.action_id, end.attempt)
                    left = self._ended.pop(key, 1) - 1
                    if left > 0:
                        self._ended[key] = left
            else:
                for end in ends:
                    self._by_task.setdefault(end.task_id, []).append(end)
            self._cond.notify_all()

    def landing(self) -> bool:
        return bool(getattr(self._local, "busy", False))

    def land(self, db: Database, wait: float = 30.0) -> None:
        """Make sure no end is due: wait for the writes carrying some, write the others in one
        transaction of their own."""
        with self._cond:
            # A task's write in flight commits them soon; writing them too would only queue
            # behind its row locks (PostgreSQL) or its write lock (SQLite).
            self._cond.wait_for(lambda: self._riding == 0, timeout=wait)
            ends = [e for task in self._by_task.values() for e in task]
            self._by_task.clear()
            self._riding += len(ends)
        if not ends:
            return
        committed = False
        self._local.busy = True
        try:
            with db.tx(write=True) as tx:
                for end in ends:
                    tx.run(end.sql, end.params)
            committed = True
        except Exception as exc:  # held again: the next transaction, or close(), tries again
            log.warning("could not record the end of %d finished call(s) yet: %s", len(ends), exc)
        finally:
            self._local.busy = False
            self.rode(ends, committed)


class EndRider:
    """Due ends sent in the task's own write (``_same_db.put_writes_with``)."""

    __slots__ = ("ends", "_render")

    def __init__(self, ends: Sequence[DueEnd], render: Any) -> None:
        self.ends = ends
        self._render = render  # Database.sql

    def send(self, cur: Any) -> None:
        for end in self.ends:
            cur.execute(self._render(end.sql), end.params)
