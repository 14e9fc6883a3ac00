"""Which process a store or checkpointer belongs to: nothing of theirs crosses a fork.

A forked child inherits the parent's objects as they were: its SQLite connections (SQLite's own
documentation forbids using one across ``fork()``: the child holds none of the file locks the
connection believes it holds), its psycopg pool (the sockets are shared with the parent, whose
worker threads are gone in the child) and its lease holder id. That last one is what breaks
the lease: two children of one parent take the same agent's lease as one holder, so both act,
which is the forked history the lease exists to prevent. Measured before this module: two
forked children ran one thread at once on SQLite, and on PostgreSQL the second child hung on
the inherited pool.

So a store or checkpointer refuses to work in a process forked after it was opened, with a
``RecallError`` (code ``forked``) that says to open it in the child. ``os.register_at_fork``
counts forks; an object remembers the count it was opened at, and comparing the two costs an
attribute read per transaction.
"""

from __future__ import annotations

import os

from ._errors import RecallError

# How many forks lie between the interpreter's start and this process (0 in the first one).
GENERATION = 0


def _forked() -> None:
    global GENERATION
    GENERATION += 1


if hasattr(os, "register_at_fork"):  # every platform that has fork()
    os.register_at_fork(after_in_child=_forked)


class Birth:
    """The process an object was opened in: ``forked()`` is true in any child forked since."""

    __slots__ = ("generation", "pid")

    def __init__(self) -> None:
        self.generation = GENERATION
        self.pid = os.getpid()

    def forked(self) -> bool:
        return self.generation != GENERATION

    def check(self, what: str) -> None:
        """Raise ``refuse(what)`` in a forked child; nothing (a compare) in the process itself."""
        if self.generation != GENERATION:
            raise self.refuse(what)

    def refuse(self, what: str) -> RecallError:
        """The error for using the object in a forked child (raise it)."""
        return RecallError(
            f"this {what} was opened in process {self.pid} and is used in process "
            f"{os.getpid()}, forked from it: database connections and leases cannot cross a "
            "fork (two children would act for one agent under one lease). Open the store and "
            "its checkpointer in each process after it starts: in a multiprocessing Pool's "
            "initializer, gunicorn's post_fork hook, or the worker function itself. "
            "Nothing was read or written.",
            code="forked",
            opened_in=self.pid,
            used_in=os.getpid(),
        )


def not_picklable(what: str) -> RecallError:
    """The error for pickling a store or checkpointer (sending it to another process)."""
    return RecallError(
        f"a {what} cannot be pickled or sent to another process: it holds open database "
        "connections and this process's leases. Pass the path or DSN instead and open it "
        "there with RecallStore.open(...) (and store.checkpointer()).",
        code="invalid_value",
    )
