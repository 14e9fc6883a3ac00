"""What a database driver's error becomes where it crosses langgraph-recall's API: a
``RecallError(code="database")`` raised from it, whose message says what to do.

Both drivers (``_sqlite``, ``_postgres``) map their transactions' errors here, and the
checkpointer maps its inner saver's (``RecallStore._database_error``), so a user catches one
error whatever failed: the store's pool, LangGraph's saver, a commit, a checkout. Refusals that
mean something else pass through: an ``IntegrityError`` (a constraint the caller handles) and,
on PostgreSQL, a trigger's ``RAISE`` (the fence: ``lease_lost``). A value PostgreSQL cannot
store is ``invalid_value``.

``details["session_lost"]`` is True when the error ended the connection's session (a
terminated backend, a server restart, a dropped network): what was not committed was rolled
back, and the same work may be tried again on a fresh connection.
"""

from __future__ import annotations

import os
import sqlite3
import sys

from .._errors import RecallError
from ._db import _cause, _scrub


def database_error(exc: BaseException, target: str, dsn: str = "") -> RecallError | None:
    """The ``RecallError`` for a driver's ``exc`` about ``target``, or None when ``exc`` is no
    driver error (or one that passes through, see the module doc). ``dsn``: the DSN as given,
    whose password is kept out of the message."""
    if isinstance(exc, RecallError):
        return None
    if isinstance(exc, sqlite3.Error):
        if isinstance(exc, sqlite3.IntegrityError):
            return None
        err = sqlite_error(exc, target)
        err.__cause__ = exc
        return err
    psycopg = sys.modules.get("psycopg")  # not imported: no psycopg error can exist without it
    if psycopg is not None and isinstance(exc, psycopg.Error):
        return postgres_error(exc, target, dsn)
    return None


def postgres_error(exc: BaseException, target: str, dsn: str = "") -> RecallError | None:
    """``database_error`` for a psycopg error (see there)."""
    import psycopg

    if isinstance(exc, (psycopg.errors.IntegrityError, psycopg.errors.RaiseException)):
        return None
    if isinstance(exc, psycopg.DataError):
        err = RecallError(
            f"PostgreSQL cannot store a value given: {exc}. Remove NUL characters and "
            "out-of-range numbers from ids and keys.",
            code="invalid_value",
        )
        err.__cause__ = exc
        return err
    text = _scrub(str(exc).strip(), dsn) or type(exc).__name__
    lost = session_lost(exc)
    if lost:
        advice = (
            "The connection's session ended (the server restarted, or an administrator or a "
            "network fault ended it): what it had not committed was rolled back, and the "
            "next call takes a fresh connection. Run the agent again, or resubmit the same "
            "turn_id, once the server answers."
        )
    elif isinstance(exc, psycopg.OperationalError):
        advice = (
            "Check that the server is running and reachable, then try again; nothing "
            "uncommitted was kept."
        )
    else:
        advice = "Nothing uncommitted was kept."
    err = RecallError(
        f"PostgreSQL at {target} failed: {text}. {advice}",
        code="database",
        session_lost=lost,
    )
    err.__cause__ = _cause(exc, dsn)
    return err


def session_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (a psycopg error) ended its connection's session."""
    import psycopg

    if isinstance(exc, psycopg.errors.AdminShutdown | psycopg.errors.CrashShutdown):
        return True
    if isinstance(exc, psycopg.InterfaceError | psycopg.OperationalError):
        text = str(exc).lower()
        return any(
            s in text
            for s in (
                "server closed the connection",
                "connection is closed",
                "consuming input",
                "connection lost",
                "connection is lost",
                "terminating connection",
                "eof detected",
                "ssl syscall",
            )
        )
    return False


def sqlite_error(exc: sqlite3.Error, path: str) -> RecallError:
    """``database_error`` for a ``sqlite3`` error about the file ``path``."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return RecallError(
            f"{path} is not a readable SQLite database ({text}). Nothing was changed. Restore it "
            "from a backup, or open a different path to start fresh.",
            code="database",
        )
    if "locked" in text or "busy" in text:
        return RecallError(
            f"{path} stayed locked by another process for too long ({text}); retry, or raise "
            "busy_timeout in RecallStore.open.",
            code="database",
        )
    if "full" in text:
        return RecallError(
            f"SQLite error on {path}: {text}. The write was rolled back; everything committed "
            "before it is kept. Free space on the disk holding the file (or raise the limit "
            "that filled it), then run the agent again: its checkpoint holds the messages not "
            "yet recorded, and its next run records them.",
            code="database",
        )
    if "unable to open" in text or "readonly" in text:
        return RecallError(
            f"SQLite error on {path}: {text}. {_why_not_writable(path)}", code="database"
        )
    if "disk i/o" in text.lower():
        return RecallError(
            f"SQLite error on {path}: {text}. The write was rolled back. Check the disk and "
            "the file system holding the file, then try again.",
            code="database",
        )
    return RecallError(f"SQLite error on {path}: {text}", code="database")


def _why_not_writable(path: str) -> str:
    """What to do when SQLite cannot open or write ``path`` (its own message names no cause)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return "That path is a folder: give a file path inside it, such as its recall.db."
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"The folder {folder} is not writable by this process, and SQLite in WAL mode needs "
            f"to create {os.path.basename(path)}-wal and -shm beside the file: open a path in a "
            "writable folder, or make this one writable."
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "The file is not readable and writable by this process: check its permissions."
    return "Check that the path is a file this process can create, read and write."
