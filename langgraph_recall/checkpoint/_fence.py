"""The fencing trigger: the database refuses a checkpoint written under a stale lease epoch.

Every checkpoint a run writes carries ``recall_agent`` and ``recall_epoch`` in its metadata
(LangGraph's savers store metadata as JSON, SQLite as a JSON blob, PostgreSQL as JSONB). When
the saver's ``checkpoints`` table lives in the store's database, a ``BEFORE INSERT`` trigger
compares that epoch with the agent's row in ``recall_leases`` inside the insert's own
transaction. A holder frozen past its lease (a GC pause, a suspended VM, SIGSTOP) whose lease
another process has since taken holds an older epoch: its late write fails in the database,
whatever the process believes, so the history cannot fork.

Writes without ``recall_epoch`` (reads never write; direct ``put`` calls outside a run) pass,
and so do writes for an agent that has no lease row. ``writes``/``checkpoint_writes`` (pending
task results) are not fenced: the savers keep the first write of a task, and side effects are
guarded by the action records, not by the checkpoint history.
"""

from __future__ import annotations

import sqlite3
from typing import Any

FENCE_MARK = "recall_fence"

# SQLite serialises writers, so the lease row cannot change between this read and the insert.
SQLITE_FENCE = f"""
CREATE TRIGGER IF NOT EXISTS recall_fence_checkpoints BEFORE INSERT ON checkpoints
WHEN json_extract(CAST(NEW.metadata AS TEXT), '$.recall_epoch') IS NOT NULL
 AND CAST(json_extract(CAST(NEW.metadata AS TEXT), '$.recall_epoch') AS INTEGER) < (
     SELECT epoch FROM recall_leases
     WHERE agent_id = json_extract(CAST(NEW.metadata AS TEXT), '$.recall_agent'))
BEGIN
  SELECT RAISE(ABORT, '{FENCE_MARK}: stale lease epoch; another process took over this agent');
END
"""

# PostgreSQL: FOR SHARE makes the check and a concurrent takeover (which updates the row)
# serialise: either this insert commits before the new epoch exists, and the new holder then
# reads it as the head, or it waits for the takeover and sees the new epoch.
# ``SET search_path FROM CURRENT`` pins the schema that holds both tables, whatever the
# session's search_path later is.
PG_FENCE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION recall_fence_checkpoint_v1() RETURNS trigger AS $$
DECLARE current_epoch bigint;
BEGIN
  IF NEW.metadata ? 'recall_epoch' AND NEW.metadata ? 'recall_agent' THEN
    SELECT epoch INTO current_epoch FROM recall_leases
      WHERE agent_id = NEW.metadata->>'recall_agent' FOR SHARE;
    IF current_epoch IS NOT NULL AND (NEW.metadata->>'recall_epoch')::bigint < current_epoch THEN
      RAISE EXCEPTION '{FENCE_MARK}: stale lease epoch % < % for agent %; another process took over',
        NEW.metadata->>'recall_epoch', current_epoch, NEW.metadata->>'recall_agent';
    END IF;
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql SET search_path FROM CURRENT
"""

PG_FENCE_TRIGGER = (
    "CREATE TRIGGER recall_fence_checkpoints BEFORE INSERT OR UPDATE ON checkpoints "
    "FOR EACH ROW EXECUTE FUNCTION recall_fence_checkpoint_v1()"
)

# Same key space as the store's migration lock, a different key: several workers may open a
# fresh database at once, and concurrent DDL on one table fails instead of waiting.
PG_FENCE_LOCK = 7260031123


def install_sqlite_fence(conn: sqlite3.Connection) -> None:
    """Create the trigger on ``checkpoints`` (idempotent; the saver's setup() must have run)."""
    conn.execute(SQLITE_FENCE)
    conn.commit()


def install_pg_fence(conn: Any) -> None:
    """Create the function and trigger if missing (``conn``: autocommit; the caller holds the
    setup lock, so no other process runs this DDL at the same time)."""
    with conn.transaction():
        row = conn.execute(
            "SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname = 'recall_fence_checkpoints' AND c.oid = 'checkpoints'::regclass"
        ).fetchone()
        if row is None:
            conn.execute(PG_FENCE_FUNCTION)
            conn.execute(PG_FENCE_TRIGGER)


def is_fence_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a stale-epoch checkpoint."""
    return FENCE_MARK in str(exc)
