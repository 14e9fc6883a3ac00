"""Schema version and migrations, append-only journals, the signing secret, and refusing a
SQLite database that lost its records (deleted, emptied, swapped or corrupt)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import threading
from typing import Any

import pytest
from fix_store import write_planned
from langchain_core.messages import HumanMessage

from langgraph_recall import RecallError
from langgraph_recall._errors import RecordsMissing
from langgraph_recall.store import RecallStore, _db
from langgraph_recall.store._codec import dumps_typed
from langgraph_recall.store._schema import (
    APPEND_ONLY_TABLES,
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES,
    Drop,
)
from langgraph_recall.store._verify import verify

# --- schema version and migrations ---------------------------------------------------------


def _meta(store: RecallStore, key: str) -> str | None:
    with store._db.tx() as tx:
        row = tx.one("SELECT value FROM recall_meta WHERE key = ?", (key,))
    return None if row is None else str(row[0])


def _tables(store: RecallStore) -> set[str]:
    with store._db.tx() as tx:
        if store.dialect == "sqlite":
            rows = tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            rows = tx.all("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {r[0] for r in rows}


def test_a_new_store_has_every_table_and_the_current_version(store: RecallStore) -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS)
    assert _meta(store, "schema_version") == str(SCHEMA_VERSION)
    assert set(TABLES) <= _tables(store)
    dropped = {s.table for steps in MIGRATIONS for s in steps if isinstance(s, Drop)}
    assert dropped == {"recall_action_ends", "recall_open_actions"}
    assert not dropped & _tables(store)


def test_reopening_keeps_records_and_version(store_target: str) -> None:
    with RecallStore.open(store_target) as s:
        s.record("ag", [HumanMessage("hi", id="1")])
        s.put(("docs",), "k", {"v": 1})
    with RecallStore.open(store_target) as s:
        assert [t.msg_id for t in s.turns("ag")] == ["1"]
        assert s.get(("docs",), "k").value == {"v": 1}
        assert _meta(s, "schema_version") == str(SCHEMA_VERSION)


def _next_migration() -> list[Any]:
    return [
        {
            "sqlite": [
                "CREATE TABLE recall_future (x INTEGER)",
                "INSERT INTO recall_future VALUES (7)",
            ],
            "postgres": [
                "CREATE TABLE recall_future (x BIGINT)",
                "INSERT INTO recall_future VALUES (7)",
            ],
        }
    ]


def test_an_upgrade_runs_the_new_migration_once_and_keeps_records(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RecallStore.open(store_target) as s:
        s.record("ag", [HumanMessage("before the upgrade", id="1")])
    # The next release appends a migration: the list position is the version.
    monkeypatch.setattr(_db, "MIGRATIONS", [*MIGRATIONS, _next_migration()])
    monkeypatch.setattr(_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for _ in range(2):  # the second open must not run it again
        with RecallStore.open(store_target) as s:
            assert _meta(s, "schema_version") == str(SCHEMA_VERSION + 1)
            with s._db.tx() as tx:
                assert tx.all("SELECT x FROM recall_future") == [(7,)]
            assert [t.message.content for t in s.turns("ag")] == ["before the upgrade"]


def _write_old_actions(store: RecallStore) -> None:
    """Actions as the v1 and v2 schemas kept them: intents, a table of ends, a table of the
    open ones. Written with SQL, since this version's code no longer knows those tables."""
    rtype, rdata = dumps_typed({"sent": True})
    now = 1_700_000_000.0
    intents = [  # (action_id, attempt, seq, end or None)
        ("a-done", 1, 1, ("done", rtype, rdata, None, None, None)),
        ("a-failed", 1, 2, ("failed", None, None, "ValueError: no", None, None)),
        ("a-retry", 1, 3, ("abandoned", None, None, None, "paused", None)),
        ("a-retry", 2, 4, None),
        ("a-open", 1, 5, None),
        ("a-resolved", 1, 6, ("not_done", None, None, None, "checked", "person")),
    ]
    atype, adata = dumps_typed({"n": 1})
    with store._db.tx(write=True) as tx:
        tx.run(
            "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, "
            "revision_seq, action_seq) VALUES ('ag', ?, ?, 0, 0, 6)",
            (now, now),
        )
        for action_id, attempt, seq, end in intents:
            tx.run(
                "INSERT INTO recall_actions (action_id, attempt, agent_id, thread_id, tool, "
                "klass, args_type, args, args_digest, idempotency_key, epoch, seq, created_at) "
                "VALUES (?, ?, 'ag', 't', 'send', 'external', ?, ?, 'd1', ?, 1, ?, ?)",
                (action_id, attempt, atype, adata, action_id, seq, now + seq),
            )
            if end is None:
                tx.run(
                    "INSERT INTO recall_open_actions (action_id, attempt, agent_id) "
                    "VALUES (?, ?, 'ag')",
                    (action_id, attempt),
                )
            else:
                tx.run(
                    "INSERT INTO recall_action_ends (action_id, attempt, outcome, result_type, "
                    "result, error, note, resolved_by, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (action_id, attempt, *end, now + seq + 0.5),
                )


@pytest.mark.parametrize("old_version", [1, 2])
def test_an_old_file_is_upgraded_to_one_action_table_with_every_record_kept(
    backend: str, store_target: str, monkeypatch: pytest.MonkeyPatch, old_version: int
) -> None:
    # A database written by an earlier release: ends and open actions in tables of their own.
    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:old_version])
        old_code.setattr(_db, "SCHEMA_VERSION", old_version)
        with RecallStore.open(store_target) as old:
            _write_old_actions(old)
            assert _meta(old, "schema_version") == str(old_version)
    with RecallStore.open(store_target) as new:
        assert _meta(new, "schema_version") == str(SCHEMA_VERSION)
        assert not {"recall_action_ends", "recall_open_actions"} & _tables(new)
        if backend == "sqlite":
            with new._db.tx() as tx:
                sql = tx.one("SELECT sql FROM sqlite_master WHERE name = 'recall_actions'")
                assert sql is not None and "WITHOUT ROWID" in sql[0]
        # Every end kept, with its result, error, note and who settled it.
        done = new.action("a-done")
        assert (done.status, done.result, done.ended_at) == (
            "done",
            {"sent": True},
            1_700_000_001.5,
        )
        assert (new.action("a-failed").status, new.action("a-failed").error) == (
            "failed",
            "ValueError: no",
        )
        resolved = new.action("a-resolved")
        assert (resolved.status, resolved.note, resolved.resolved_by) == (
            "not_done",
            "checked",
            "person",
        )
        retry = new.action("a-retry")
        assert (retry.attempt, retry.status) == (2, "open")
        assert [a.action_id for a in new.actions("ag", open_only=True)] == ["a-retry", "a-open"]
        assert new.agents()[0].open_actions == 2
        # A finished call answers from its record; an open one is in doubt; the guard holds.
        assert new.claim("ag", "a-done", tool="send", args={"n": 1}, args_digest="d1").status == (
            "done"
        )
        assert new.claim("ag", "a-open", tool="send", args={"n": 1}, args_digest="d1").status == (
            "in_doubt"
        )
        with pytest.raises(Exception, match="append-only"):
            with new._db.tx(write=True) as tx:
                tx.run("DELETE FROM recall_actions WHERE action_id = 'a-done'")
        with pytest.raises(Exception, match="append-only"):
            with new._db.tx(write=True) as tx:
                tx.run("UPDATE recall_actions SET outcome = 'failed' WHERE action_id = 'a-done'")
        # New calls work on it: numbered after the old ones, claimed once, ended once.
        fresh = new.claim("ag", "a-new", tool="t", args={"n": 3}, args_digest="d3")
        assert fresh.status == "claimed"
        assert [a.action_id for a in new.actions("ag", open_only=True)] == [
            "a-retry",
            "a-open",
            "a-new",
        ]
        assert new.end("a-new", fresh.action.attempt, "done", result="ok") is True
        assert new.end("a-new", fresh.action.attempt, "done", result="again") is False
        assert new.action("a-new").result == "ok"
        assert new.end("a-open", 1, "not_done", note="checked by hand") is True
        # An agent whose first record is an action is listed (its row made with the intent).
        assert new.claim("ag2", "b-1", tool="t", args={}, args_digest="d").status == "claimed"
        assert [(a.agent_id, a.open_actions) for a in new.agents()] == [("ag", 1), ("ag2", 1)]
        assert [a.action_id for a in new.actions("ag", open_only=True)] == ["a-retry"]
        assert [a.action_id for a in new.actions("ag")] == [
            "a-done",
            "a-failed",
            "a-retry",
            "a-open",
            "a-resolved",
            "a-new",
        ]
        assert verify(new).problems == []


def test_turns_recorded_before_v4_are_numbered_after_and_counted(
    backend: str, store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Up to v3 every recording moved the agent row's count; from v4 SQLite numbers turns from
    # their own key and leaves that row alone. Turns written the old way (rows and count, in
    # SQL, as that code wrote them) must be followed, not overwritten or renumbered.
    mtype, mdata = dumps_typed(HumanMessage("old", id="old-1"))
    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:3])
        old_code.setattr(_db, "SCHEMA_VERSION", 3)
        with RecallStore.open(store_target) as old:
            with old._db.tx(write=True) as tx:
                tx.run(
                    "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, "
                    "revision_seq, action_seq) VALUES ('ag', 1.0, 2.0, 2, 0, 0)"
                )
                for seq in (1, 2):
                    tx.run(
                        "INSERT INTO recall_turns (agent_id, seq, msg_id, thread_id, role, "
                        "dtype, data, size, output_ref, created_at) "
                        "VALUES ('ag', ?, ?, 't', 'human', ?, ?, ?, NULL, ?)",
                        (seq, f"old-{seq}", mtype, mdata, len(mdata), float(seq)),
                    )
    with RecallStore.open(store_target) as new:
        assert _meta(new, "schema_version") == str(SCHEMA_VERSION)
        # A short batch (one statement) and a long one (the reading path) both follow on.
        assert new.record("ag", [HumanMessage("a", id="new-1"), HumanMessage("b", id="old-1")])
        assert new.record("ag", [HumanMessage(str(i), id=f"bulk-{i}") for i in range(20)]) == 20
        turns = new.turns("ag")
        assert [t.seq for t in turns] == list(range(1, 24))
        assert [t.msg_id for t in turns[:3]] == ["old-1", "old-2", "new-1"]
        # An agent whose first record is a turn is listed; its activity is its newest turn.
        new.record("fresh", [HumanMessage("hello", id="f-1")])
        listed = {a.agent_id: a for a in new.agents()}
        assert listed["ag"].turns == 23 and listed["fresh"].turns == 1
        assert listed["ag"].last_activity >= turns[-1].created_at > 2.0
        assert new.has_agent("fresh")
        assert verify(new).problems == []


def test_opening_a_newer_schema_fails_clearly_and_changes_nothing(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as newer:
        newer.setattr(_db, "MIGRATIONS", [*MIGRATIONS, _next_migration()])
        newer.setattr(_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
        with RecallStore.open(store_target) as s:
            s.record("ag", [HumanMessage("written by the newer version", id="1")])
    # This (older) version must refuse it rather than write into a schema it does not know.
    with pytest.raises(RecallError) as err:
        RecallStore.open(store_target)
    e = err.value
    assert e.code == "schema_too_new"
    assert e.details == {"found": SCHEMA_VERSION + 1, "supported": SCHEMA_VERSION}
    assert "pip install -U langgraph-recall" in str(e)
    with monkeypatch.context() as newer:
        newer.setattr(_db, "MIGRATIONS", [*MIGRATIONS, _next_migration()])
        newer.setattr(_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
        with RecallStore.open(store_target) as s:
            assert [t.msg_id for t in s.turns("ag")] == ["1"]


# --- append-only journals ------------------------------------------------------------------

JOURNALS = {
    "recall_turns",
    "recall_revisions",
    "recall_outputs",
    "recall_actions",
    "recall_approvals",
    "recall_approval_spends",
}


def _fill_every_journal(store: RecallStore) -> None:
    store.record("ag", [HumanMessage("hi", id="1")])
    store.update_working_state("ag", goal="g")
    store.put_output("ag", "a large output")
    store.claim("ag", "act-1", tool="t", args={}, args_digest="d")
    store.end("act-1", 1, "done", result="ok")
    store.record_decision("ag", "act-2", "approve", args_digest="d")
    claimed = store.claim("ag", "act-2", tool="t", args={}, args_digest="d")
    store.spend_approval("ag", "act-2", "d", claimed.action.attempt)
    store.end("act-2", claimed.action.attempt, "done", result="ok")


def _count(store: RecallStore, table: str) -> int:
    with store._db.tx() as tx:
        row = tx.one(f"SELECT COUNT(*) FROM {table}")
    assert row is not None
    return int(row[0])


def test_every_journal_table_is_append_only() -> None:
    assert set(APPEND_ONLY_TABLES) == JOURNALS


@pytest.mark.parametrize("table", sorted(JOURNALS))
def test_the_database_refuses_update_and_delete_on_journals(store: RecallStore, table: str) -> None:
    _fill_every_journal(store)
    before = _count(store, table)
    assert before >= 1
    for sql in (f"UPDATE {table} SET created_at = created_at + 1", f"DELETE FROM {table}"):
        with pytest.raises(Exception, match="append-only") as err:
            with store._db.tx(write=True) as tx:
                tx.run(sql)
        assert not isinstance(err.value, AssertionError)
    assert _count(store, table) == before


@pytest.mark.postgres
def test_postgres_journals_refuse_truncate(pg_store: RecallStore) -> None:
    """TRUNCATE fires no row trigger: without a statement-level guard it empties a journal."""
    _fill_every_journal(pg_store)
    for table in sorted(JOURNALS):
        before = _count(pg_store, table)
        assert before >= 1
        with pytest.raises(Exception, match="append-only") as err:
            with pg_store._db.tx(write=True) as tx:
                tx.run(f"TRUNCATE {table} CASCADE")
        assert not isinstance(err.value, AssertionError)
        assert _count(pg_store, table) == before
    assert verify(pg_store).problems == []


def _truncate_triggers(store: RecallStore) -> set[str]:
    with store._db.tx() as tx:
        rows = tx.all(  # this test's schema only: other tests share the database
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace "
            "AND t.tgname LIKE '%no_truncate'"
        )
    return {r[0] for r in rows}


@pytest.mark.postgres
def test_a_v7_postgres_store_gains_the_truncate_guard_and_verify_asks_for_it(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:7])
        old_code.setattr(_db, "SCHEMA_VERSION", 7)
        with RecallStore.open(pg_dsn) as s:
            s.record("ag", [HumanMessage("kept", id="1")])
            with s._db.tx(write=True) as tx:  # as v7 left a journal: row triggers only
                for table in JOURNALS:
                    tx.run(f"DROP TRIGGER {table}_no_truncate ON {table}")
            assert _truncate_triggers(s) == set()
            lost = {f"{t} has lost its append-only trigger" for t in JOURNALS}
            assert lost <= set(verify(s).problems)
    with RecallStore.open(pg_dsn) as s:
        assert _meta(s, "schema_version") == str(SCHEMA_VERSION)
        assert _truncate_triggers(s) == {f"{t}_no_truncate" for t in JOURNALS}
        assert verify(s).problems == []
        assert [t.message.content for t in s.turns("ag")] == ["kept"]


@pytest.mark.postgres
def test_an_upgrade_the_role_may_not_make_is_refused_clearly_and_changes_nothing(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose role uses the tables but does not own them cannot add v8's triggers. It
    got psycopg's InsufficientPrivilege from open, saying nothing of the upgrade or what to do."""
    import secrets
    import urllib.parse

    import psycopg

    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:7])
        old_code.setattr(_db, "SCHEMA_VERSION", 7)
        with RecallStore.open(pg_dsn) as s:
            s.record("ag", [HumanMessage("kept", id="1")])
    role = "recall_app_" + secrets.token_hex(4)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
    parts = urllib.parse.urlsplit(pg_dsn)
    as_role = parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}").geturl()
    try:
        with pytest.raises(RecallError) as err:
            RecallStore.open(as_role)
        assert err.value.code == "database"
        says = str(err.value)
        assert f"v7 to v{SCHEMA_VERSION}" in says and "owner" in says, says
        with RecallStore.open(pg_dsn) as s:  # the owner upgrades it; nothing was lost
            assert [t.message.content for t in s.turns("ag")] == ["kept"]
            assert _meta(s, "schema_version") == str(SCHEMA_VERSION)
        with RecallStore.open(as_role) as s:  # and then the role uses it
            assert [t.message.content for t in s.turns("ag")] == ["kept"]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_an_actions_end_is_set_once_and_nothing_else_changes(store: RecallStore) -> None:
    """recall_actions' one allowed change: an open attempt's empty end columns, filled once."""
    store.claim("ag", "act-1", tool="t", args={"n": 1}, args_digest="d")
    store.claim("ag", "act-2", tool="t", args={"n": 2}, args_digest="d")
    store.end("act-2", 1, "done", result="ok")
    refused = [
        # an open attempt: its intent may not change, even while ending it
        "UPDATE recall_actions SET outcome = 'done', args_digest = 'x' WHERE action_id = 'act-1'",
        "UPDATE recall_actions SET outcome = 'done', tool = 'other' WHERE action_id = 'act-1'",
        # end columns without an outcome would read as still open
        "UPDATE recall_actions SET note = 'n', ended_at = 1 WHERE action_id = 'act-1'",
        # an ended attempt: nothing at all
        "UPDATE recall_actions SET outcome = 'failed' WHERE action_id = 'act-2'",
        "UPDATE recall_actions SET note = 'later' WHERE action_id = 'act-2'",
        "UPDATE recall_actions SET outcome = NULL WHERE action_id = 'act-2'",
    ]
    for sql in refused:
        with pytest.raises(Exception, match="append-only"):
            with store._db.tx(write=True) as tx:
                tx.run(sql)
    assert [(a.action_id, a.status) for a in store.actions("ag")] == [
        ("act-1", "open"),
        ("act-2", "done"),
    ]
    assert store.action("act-2").result == "ok"
    assert store.end("act-1", 1, "failed", error="E: x") is True
    assert store.end("act-1", 1, "done", result="late") is False
    assert (store.action("act-1").status, store.action("act-1").error) == ("failed", "E: x")


def _plan(store: RecallStore, action_id: str) -> None:
    write_planned(store, "ag", action_id, "t", {"n": 1})


def test_a_planned_attempts_start_mark_is_set_once_and_nothing_else_with_it(
    store: RecallStore,
) -> None:
    """The start mark: set once, on an open planned attempt, changing nothing else."""
    _plan(store, "p-1")
    assert not store.action("p-1").started
    refused = [
        # the mark with anything else of the row, or an end column without an outcome
        "UPDATE recall_actions SET started_at = 1, tool = 'other' WHERE action_id = 'p-1'",
        "UPDATE recall_actions SET started_at = 1, note = 'n' WHERE action_id = 'p-1'",
        "UPDATE recall_actions SET planned = NULL WHERE action_id = 'p-1'",
    ]
    for sql in refused:
        with pytest.raises(Exception, match="append-only"):
            with store._db.tx(write=True) as tx:
                tx.run(sql)
    assert store.mark_started("p-1", 1) is True
    assert store.mark_started("p-1", 1) is False  # once: a second claimer may not run it
    assert store.action("p-1").started and store.action("p-1").in_doubt
    for sql in [
        "UPDATE recall_actions SET started_at = NULL WHERE action_id = 'p-1'",
        "UPDATE recall_actions SET started_at = 2 WHERE action_id = 'p-1'",
        # an end may not move the mark
        "UPDATE recall_actions SET outcome = 'done', started_at = 3 WHERE action_id = 'p-1'",
    ]:
        with pytest.raises(Exception, match="append-only"):
            with store._db.tx(write=True) as tx:
                tx.run(sql)
    assert store.end("p-1", 1, "done", result="ok") is True
    _plan(store, "p-2")
    assert store.end("p-2", 1, "not_done") is True
    assert store.mark_started("p-2", 1) is False  # closed before it started: never runs
    assert store.action("p-2").status == "not_done"


def test_a_claim_takes_a_planned_attempt_that_never_started(store: RecallStore) -> None:
    """A claim in a new process finds the planned, unstarted attempt: it is not in doubt, and
    the claim starts that very attempt (once: a second claimer finds it in doubt)."""
    _plan(store, "p-3")
    first = store.claim("ag", "p-3", tool="t", args={"n": 1}, args_digest="d")
    assert (first.status, first.action.attempt, first.action.started) == ("claimed", 1, True)
    again = store.claim("ag", "p-3", tool="t", args={"n": 1}, args_digest="d")
    assert again.status == "in_doubt"
    # Planned for other arguments: closed unused, and the claim takes the next attempt.
    _plan(store, "p-4")
    other = store.claim("ag", "p-4", tool="t", args={"n": 2}, args_digest="e")
    assert (other.status, other.action.attempt) == ("claimed", 2)
    assert [a.status for a in store.actions("ag") if a.action_id == "p-4"] == ["open"]


def test_sweeping_and_item_deletes_do_not_touch_journals(store: RecallStore) -> None:
    _fill_every_journal(store)
    store.put(("recall", "ag", "memories"), "m1", {"text": "a memory"})
    counts = {t: _count(store, t) for t in JOURNALS}
    deleted = refused = 0
    for ns in store.list_namespaces(prefix=("recall",)):
        for item in store.search(ns, limit=100):
            try:
                store.delete(ns, item.key)
                deleted += 1
            except RecallError as err:  # the records' own items (working state, outputs...)
                assert err.code == "invalid_namespace"
                refused += 1
    assert deleted >= 1 and refused >= 2
    store.sweep_ttl()
    assert {t: _count(store, t) for t in JOURNALS} == counts


# --- the secret ----------------------------------------------------------------------------


def _approve(store: RecallStore, action_id: str) -> None:
    store.record_decision("ag", action_id, "approve", args_digest="d")


def test_sqlite_secret_file_is_created_0600_beside_the_database(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    old = os.umask(0)  # even a permissive umask must not widen it
    try:
        store = RecallStore.open(path)
    finally:
        os.umask(old)
    with store:
        secret_file = path + ".secret"
        assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
        saved = json.load(open(secret_file))
        assert saved["store_id"] == _meta(store, "store_id")
        assert bytes.fromhex(saved["secret"]) == store._secret and len(store._secret) >= 32
        _approve(store, "a1")
    with RecallStore.open(path) as again:
        assert again._secret == store._secret
        assert again.verify_approvals() == []


def test_sqlite_without_its_secret_file_is_refused(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path) as s:
        _approve(s, "a1")
    os.remove(path + ".secret")
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "secret_missing" and "Restore" in str(err.value)


def _spoil(saved: dict[str, Any], how: str) -> str:
    if how == "empty":
        return ""
    if how == "cut_short":
        return json.dumps(saved)[:20]
    if how == "not_an_object":
        return json.dumps([saved["store_id"], saved["secret"]])
    if how == "no_store_id":
        return json.dumps({"secret": saved["secret"]})
    assert how == "secret_not_hex"
    return json.dumps({**saved, "secret": "not hex"})


@pytest.mark.parametrize(
    "how", ["empty", "cut_short", "not_an_object", "no_store_id", "secret_not_hex"]
)
def test_a_spoiled_secret_file_is_secret_missing_and_says_what_to_do(
    tmp_path: Any, how: str
) -> None:
    # An empty or cut-short file read as "no store id" (records_missing: "belongs to another
    # store"); a missing or non-hex secret escaped as a raw KeyError or ValueError.
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    secret_file = path + ".secret"
    with open(secret_file) as f:
        spoiled = _spoil(json.load(f), how)
    with open(secret_file, "w") as f:
        f.write(spoiled)
    before = _files(tmp_path)
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "secret_missing", err.value
    text = str(err.value)
    assert f"{secret_file} is not a usable secret file" in text
    assert "Restore it from a backup" in text and f"delete {secret_file}" in text
    assert _files(tmp_path) == before, "nothing was written"


def test_sqlite_opened_with_a_secret_keeps_only_the_store_id_beside_it(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, secret="app-" + "s" * 32) as s:
        assert s._secret == b"app-" + b"s" * 32
        _approve(s, "a1")
        store_id = _meta(s, "store_id")
    secret_file = path + ".secret"
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    with open(secret_file) as f:
        assert json.load(f) == {"store_id": store_id}, "the id only: the secret is the caller's"
    with RecallStore.open(path, secret="app-" + "s" * 32) as s:
        assert s.verify_approvals() == []


def test_a_deleted_database_opened_with_a_secret_is_refused(tmp_path: Any) -> None:
    # With secret= no file was kept beside the database: deleted, it started again empty.
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, secret="app-secret") as s:
        s.record("ag", [HumanMessage("precious", id="1")])
    _remove_db(path)
    with pytest.raises(RecordsMissing, match="does not exist") as err:
        RecallStore.open(path, secret="app-secret")
    assert err.value.code == "records_missing"
    assert not os.path.exists(path), "the refusal created an empty database in its place"
    other = str(tmp_path / "other.db")
    with RecallStore.open(other, secret="app-secret") as s:
        s.record("ag", [HumanMessage("elsewhere", id="1")])
    shutil.copy(other, path)
    with pytest.raises(RecordsMissing, match="belongs to another store"):
        RecallStore.open(path, secret="app-secret")


def test_a_store_opened_with_a_secret_before_it_kept_an_id_file_gets_one(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, secret="app-secret") as s:
        s.record("ag", [HumanMessage("kept", id="1")])
        store_id = _meta(s, "store_id")
    os.remove(path + ".secret")  # as such a store was left before
    with RecallStore.open(path, secret="app-secret") as s:
        assert [t.message.content for t in s.turns("ag")] == ["kept"]
    with open(path + ".secret") as f:
        assert json.load(f) == {"store_id": store_id}


def test_a_store_whose_file_keeps_only_its_id_needs_its_secret_given(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, secret="app-secret") as s:
        _approve(s, "a1")
    monkeypatch.delenv("LANGGRAPH_RECALL_SECRET", raising=False)
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "secret_missing"
    assert "pass the same secret=" in str(err.value) and "LANGGRAPH_RECALL_SECRET" in str(err.value)
    monkeypatch.setenv("LANGGRAPH_RECALL_SECRET", "app-secret")  # what the CLI reads
    with RecallStore.open(path) as s:
        assert s._secret == b"app-secret" and s.verify_approvals() == []


def _as_left_by_a_secret_given_before_id_files(path: str) -> None:
    """What a SQLite store opened with secret= was before it kept an id file: no secret file
    beside it, and no store id on record (only the secret file's code path wrote one)."""
    os.remove(path + ".secret")
    with RecallStore.open(path, secret="app-secret") as s, s._db.tx(write=True) as tx:
        tx.run("DELETE FROM recall_meta WHERE key = 'store_id'")
    os.remove(path + ".secret")


def test_an_old_store_opened_with_a_secret_is_not_given_a_made_up_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Opened without secret= (the CLI, a notebook), such a store was given a new random
    # secret in a full secret file: every approval then read as tampered with (`verify`),
    # for good, since that file's secret won over LANGGRAPH_RECALL_SECRET from then on.
    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, secret="app-secret") as s:
        _approve(s, "a1")
    _as_left_by_a_secret_given_before_id_files(path)
    monkeypatch.delenv("LANGGRAPH_RECALL_SECRET", raising=False)
    before = _files(tmp_path)
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "secret_missing"
    assert "secret=" in str(err.value) and "LANGGRAPH_RECALL_SECRET" in str(err.value)
    assert not os.path.exists(path + ".secret"), "a made-up secret was kept"
    assert set(_files(tmp_path)) == set(before)
    monkeypatch.setenv("LANGGRAPH_RECALL_SECRET", "app-secret")  # what the CLI reads
    with RecallStore.open(path) as s:
        assert s._secret == b"app-secret" and s.verify_approvals() == []
        store_id = _meta(s, "store_id")
    with open(path + ".secret") as f:
        assert json.load(f) == {"store_id": store_id}, "the id only: the secret is the caller's"
    with RecallStore.open(path, secret="app-secret") as s:
        assert s.verify_approvals() == []


def test_postgres_secret_comes_from_the_argument_or_the_environment(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGGRAPH_RECALL_SECRET", "from-the-environment-" + "e" * 32)
    with RecallStore.open(pg_dsn, secret="given-" + "g" * 32) as s:
        assert s._secret == b"given-" + b"g" * 32
        _approve(s, "a1")
    with RecallStore.open(pg_dsn) as s:
        assert s._secret == ("from-the-environment-" + "e" * 32).encode()
        assert [a.action_id for a in s.verify_approvals()] == ["a1"]
    with RecallStore.open(pg_dsn, secret=b"given-" + b"g" * 32) as s:
        assert s.verify_approvals() == []


def test_an_empty_secret_counts_as_not_given_on_postgres_too(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite takes secret="" / b"" as not given; PostgreSQL refused it with "pass secret=...
    # or set LANGGRAPH_RECALL_SECRET" while the variable was set.
    monkeypatch.setenv("LANGGRAPH_RECALL_SECRET", "from-the-environment")
    for empty in ("", b""):
        with RecallStore.open(pg_dsn, secret=empty) as s:
            assert s._secret == b"from-the-environment"
    monkeypatch.delenv("LANGGRAPH_RECALL_SECRET")
    with pytest.raises(RecallError) as err:
        RecallStore.open(pg_dsn, secret="")
    assert err.value.code == "secret_missing"


def test_postgres_without_a_secret_fails_clearly(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGGRAPH_RECALL_SECRET", raising=False)
    with pytest.raises(RecallError) as err:
        RecallStore.open(pg_dsn)
    assert err.value.code == "secret_missing"
    assert "LANGGRAPH_RECALL_SECRET" in str(err.value) and "secret=" in str(err.value)
    import psycopg

    with psycopg.connect(pg_dsn) as conn:  # the refusal came first: it created no tables
        assert conn.execute("SELECT to_regclass('recall_meta')").fetchone() == (None,)


# --- records missing -----------------------------------------------------------------------


def _make_store_with_records(path: str) -> None:
    with RecallStore.open(path) as s:
        s.record("ag", [HumanMessage("precious", id="1")])
    assert not os.path.exists(path + "-wal") or os.path.getsize(path + "-wal") == 0


def _remove_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def _assert_records_missing(path: str) -> None:
    with pytest.raises(RecordsMissing) as err:
        RecallStore.open(path)
    e = err.value
    assert e.code == "records_missing" and e.details["path"] == path
    text = str(e)
    assert "Restore the database from a backup" in text
    assert f"delete {path}.secret" in text, "says how to start fresh on purpose"


def test_a_deleted_database_is_refused(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    _remove_db(path)
    _assert_records_missing(path)
    assert not os.path.exists(path), "the refusal created an empty database in its place"
    _assert_records_missing(path)  # still refused on the next try: nothing started fresh


def test_an_emptied_database_is_refused(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    _remove_db(path)
    open(path, "wb").close()
    _assert_records_missing(path)


def test_a_swapped_database_is_refused(tmp_path: Any) -> None:
    path, other = str(tmp_path / "recall.db"), str(tmp_path / "other.db")
    _make_store_with_records(path)
    _make_store_with_records(other)
    _remove_db(path)
    shutil.copy(other, path)
    with pytest.raises(RecordsMissing, match="belongs to another store"):
        RecallStore.open(path)


def _files(folder: Any) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_an_emptied_database_is_refused_before_anything_is_written(tmp_path: Any) -> None:
    # The schema was written into the emptied file first, then the open was refused with a
    # message saying "Nothing was written".
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    _remove_db(path)
    open(path, "wb").close()
    before = _files(tmp_path)
    _assert_records_missing(path)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_database_replaced_by_another_file_is_refused_untouched(
    tmp_path: Any, journal: str
) -> None:
    """A restore that put another application's SQLite file in its place."""
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    _remove_db(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA journal_mode={journal}")
        conn.execute("CREATE TABLE invoices (id INTEGER)")
        conn.commit()
    before = _files(tmp_path)
    with pytest.raises(RecordsMissing, match="holds no langgraph-recall records"):
        RecallStore.open(path)
    assert _files(tmp_path) == before, "no schema, no log, no index file"
    # Another store's file put back instead is refused as untouched.
    other = tmp_path / "elsewhere"
    other.mkdir()
    _make_store_with_records(str(other / "recall.db"))
    _remove_db(path)
    shutil.copy(other / "recall.db", path)
    before = _files(tmp_path)
    with pytest.raises(RecordsMissing, match="belongs to another store"):
        RecallStore.open(path)
    assert _files(tmp_path) == before


def _read_on_a_new_connection(store: RecallStore) -> list[Any]:
    """A read from another thread while the store's one idle reader is lent out: it opens a
    new connection. What it returned, or raised."""
    got: list[Any] = []

    def read() -> None:
        try:
            got.append(store.get(("docs",), "kept"))
        except BaseException as exc:
            got.append(exc)

    with store._db.tx():
        reader = threading.Thread(target=read)
        reader.start()
        reader.join(30)
    return got


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_deleted_or_replaced_while_open_is_refused_on_a_new_connection(
    tmp_path: Any, how: str
) -> None:
    # A new connection opened whatever was at the path: deleted, it created an empty database
    # there ("no such table"); replaced, it read and wrote the other store's records.
    path, other = str(tmp_path / "recall.db"), str(tmp_path / "other.db")
    with RecallStore.open(other) as s:
        s.put(("docs",), "kept", {"v": "another store's"})
    store = RecallStore.open(path)
    try:
        store.put(("docs",), "kept", {"v": "ours"})
        if how == "deleted":
            os.remove(path)
        else:
            shutil.copy(other, path + ".restored")
            os.replace(path + ".restored", path)
        got = _read_on_a_new_connection(store)
        assert len(got) == 1 and isinstance(got[0], RecordsMissing), got
        what = "was deleted" if how == "deleted" else "was replaced by another file"
        assert f"{path} {what} while this store had it open" in str(got[0])
        assert "Restore the database from a backup" in str(got[0])
        if how == "deleted":
            assert not os.path.exists(path), "no empty database was created in its place"
        assert store.get(("docs",), "kept").value == {"v": "ours"}, "open connections go on"
    finally:
        store.close()


def test_starting_fresh_on_purpose_works(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    _remove_db(path)
    _assert_records_missing(path)
    os.remove(path + ".secret")  # what the message says to do
    _remove_db(path)
    with RecallStore.open(path) as s:
        assert s.turns("ag") == []


def test_a_corrupt_file_is_refused_and_left_as_it_was(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    garbage = bytes(range(256)) * 64
    with open(path, "wb") as f:
        f.write(garbage)
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "database"
    assert "not a readable SQLite database" in str(err.value) and "backup" in str(err.value)
    assert open(path, "rb").read() == garbage
    assert not os.path.exists(path + ".secret")


def test_a_damaged_header_loses_nothing_once_repaired(tmp_path: Any) -> None:
    path = str(tmp_path / "recall.db")
    _make_store_with_records(path)
    with open(path, "r+b") as f:
        header = f.read(100)
        f.seek(0)
        f.write(b"\xde\xad\xbe\xef" * 25)
    with pytest.raises(RecallError) as err:
        RecallStore.open(path)
    assert err.value.code == "database"
    with open(path, "r+b") as f:
        f.write(header)
    with RecallStore.open(path) as s:
        assert [t.message.content for t in s.turns("ag")] == ["precious"]


@pytest.mark.parametrize("table", ["recall_actions", "recall_turns"])
def test_a_dropped_table_is_refused_at_open(store_target: str, table: str) -> None:
    with RecallStore.open(store_target) as s:
        s.record("ag", [HumanMessage("kept", id="m-1")])
    if store_target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_target, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table} CASCADE")
    else:
        with contextlib.closing(sqlite3.connect(store_target)) as conn:
            conn.execute(f"DROP TABLE {table}")
            conn.commit()
    # Without the check the store opened, then failed call by call ("no such table").
    with pytest.raises(RecordsMissing, match=f"not its tables {table}") as err:
        RecallStore.open(store_target)
    assert err.value.details["missing"] == [table]
    assert "Restore the database from a backup" in str(err.value)


def _drop_table(target: str, table: str) -> None:
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table} CASCADE")
    else:
        with contextlib.closing(sqlite3.connect(target)) as conn:
            conn.execute(f"DROP TABLE {table}")
            conn.commit()


def _has_meta(target: str) -> bool:
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            return conn.execute("SELECT to_regclass('recall_meta')").fetchone() != (None,)
    with contextlib.closing(sqlite3.connect(target)) as conn:
        return bool(
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'recall_meta'").fetchall()
        )


def test_a_database_that_lost_only_its_meta_table_is_refused_untouched(store_target: str) -> None:
    with RecallStore.open(store_target) as s:
        s.record("ag", [HumanMessage("kept", id="m-1")])
    _drop_table(store_target, "recall_meta")
    if not store_target.startswith("postgresql"):
        # Without its secret file a SQLite store has nothing beside it to say it held records.
        os.remove(store_target + ".secret")
    # Without the check the open created recall_meta again and re-ran every migration over
    # the records (failing half-way on columns already there), as if the store were new.
    with pytest.raises(RecordsMissing, match="but not recall_meta") as err:
        RecallStore.open(store_target)
    assert err.value.code == "records_missing"
    assert err.value.details["missing"] == ["recall_meta"]
    assert "Restore the database from a backup" in str(err.value)
    assert not _has_meta(store_target), "the refusal wrote nothing"


def test_a_folder_given_as_the_database_says_so(tmp_path: Any) -> None:
    # SQLite says only "unable to open database file".
    with pytest.raises(RecallError) as err:
        RecallStore.open(str(tmp_path))
    assert err.value.code == "database"
    assert "That path is a folder: give a file path inside it" in str(err.value)
    assert os.listdir(tmp_path) == []
