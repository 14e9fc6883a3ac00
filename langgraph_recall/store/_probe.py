"""What a database holds, looked at without writing anything: whether it is a langgraph-recall
store, at which schema version, and whose (its store id).

``RecallStore.open`` creates the schema on first use. Whatever must be decided about a database
before that (the CLI's read-only commands pointed at an application's file or the wrong
PostgreSQL database; a SQLite file emptied or replaced while its secret file remains) is decided
here first, so that a refusal leaves the database as it was.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .._errors import RecallError
from ._db import _cause, _redact, _scrub, is_postgres_target, postgres_extra_missing, sqlite_path
from ._schema import TABLES

_META = "SELECT key, value FROM recall_meta WHERE key IN ('schema_version', 'store_id')"


@dataclass(frozen=True)
class Found:
    """What a look at a database found."""

    is_store: bool  # it has langgraph-recall's recall_meta table
    schema_version: int | None = None
    store_id: str | None = None
    # Not a store, yet other recall tables are there: it lost recall_meta (records_missing).
    lost_meta: bool = False


def _found(rows: list[tuple[str, str]]) -> Found:
    meta = dict(rows)
    version = meta.get("schema_version")
    return Found(True, int(version) if version is not None else None, meta.get("store_id"))


def sqlite_found(path: str) -> Found | None:
    """Look at an existing SQLite file through a read-only connection.

    None when it cannot be read that way (not a database at all, a lock held past the wait, a
    log that only a writer may recover): the caller leaves the verdict to a normal open, which
    reports such a file in its own words.
    """
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return None
    if not header:
        return Found(False)  # an empty file: SQLite's empty database
    if not header.startswith(b"SQLite format 3\x00") or len(header) < 100:
        return None
    # A WAL database with no log beside it is closed by everyone: all of it is in the file.
    # A read-only connection would still create the log and its index (and leave them), so
    # read it as an unchanging file instead. With a log there, some process has it open and
    # the log may hold the newest pages: read through it (its files exist already).
    closed_wal = header[18] == 2 and not os.path.exists(path + "-wal")
    uri = Path(os.path.abspath(path)).as_uri() + ("?immutable=1" if closed_wal else "?mode=ro")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    except sqlite3.Error:
        return None
    try:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'recall_meta'"
        ).fetchone()
        if has is None:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return Found(False, lost_meta=any(t in names for t in TABLES))
        return _found(conn.execute(_META).fetchall())
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def postgres_found(dsn: str) -> Found:
    """Look at a PostgreSQL database (the DSN's ``search_path`` applies) with plain reads."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise postgres_extra_missing() from exc
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except Exception as exc:
        raise RecallError(
            f"cannot reach PostgreSQL at {_redact(dsn)}: "
            f"{_scrub(str(exc).strip().splitlines()[0], dsn)}. "
            "Check the DSN and that the server is running.",
            code="database",
        ) from _cause(exc, dsn)
    with conn:
        row = conn.execute("SELECT to_regclass('recall_meta')").fetchone()
        if row is None or row[0] is None:
            left = conn.execute(
                "SELECT 1 FROM unnest(CAST(%s AS TEXT[])) AS u(t) WHERE to_regclass(t) IS NOT NULL",
                (list(TABLES),),
            ).fetchone()
            return Found(False, lost_meta=left is not None)
        return _found([(str(k), str(v)) for k, v in conn.execute(_META).fetchall()])


def found_at(target: str) -> Found | None:
    """What is at ``target`` (a SQLite path or a DSN); for a SQLite path with no file there,
    or one that cannot be read without writing, None."""
    if is_postgres_target(target):
        return postgres_found(target)
    path = sqlite_path(target)
    if not os.path.exists(path):
        return None
    return sqlite_found(path)
