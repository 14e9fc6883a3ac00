"""Shared fixtures: every storage test runs on SQLite and on the real PostgreSQL server.

PostgreSQL: one throwaway database per test session (dropped at the end) and one schema per
test (``search_path`` in the DSN), so tests never see each other's rows. Set
``RECALL_TEST_PG`` to point elsewhere. If no server answers, PostgreSQL cases are skipped and
the run ends with a loud warning; under CI (``CI=true``) they fail instead, because CI has one.
"""

from __future__ import annotations

import os
import secrets
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_recall.store import RecallStore

os.environ.setdefault("LANGGRAPH_RECALL_SECRET", "test-secret-" + "0" * 32)

PG_ADMIN = os.environ.get("RECALL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_PG_PROBLEM: list[str] = []


def _with_db(dsn: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path="/" + dbname))


def with_schema(dsn: str, schema: str) -> str:
    """The DSN with ``search_path`` set to ``schema`` (created by the caller)."""
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=" + urllib.parse.quote(f"-csearch_path={schema}")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """DSN of a fresh database for this test session (dropped afterwards)."""
    try:
        import psycopg

        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except Exception as exc:  # pragma: no cover - depends on the machine
        reason = f"PostgreSQL at {PG_ADMIN} is not reachable ({exc})"
        _PG_PROBLEM.append(reason)
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI must run the PostgreSQL tests")
        pytest.skip(reason)
    name = f"recall_test_{os.getpid()}_{secrets.token_hex(3)}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(PG_ADMIN, name)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def pg_dsn(pg_database: str) -> str:
    """DSN of a schema of its own for one test, inside the session's database."""
    import psycopg

    schema = "t_" + secrets.token_hex(5)
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return with_schema(pg_database, schema)


@pytest.fixture
def pg_store(pg_dsn: str) -> Iterator[RecallStore]:
    """A PostgreSQL store with one pooled connection: every statement runs in one session, so
    a test can look at that session (what it prepared, what a read ahead left behind)."""
    store = RecallStore.open(pg_dsn, pool_size=1)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.node.add_marker(pytest.mark.postgres)
    return str(request.param)


@pytest.fixture
def store_target(backend: str, tmp_path: object, request: pytest.FixtureRequest) -> str:
    """Where a test's store lives: a SQLite file, or a PostgreSQL schema of its own."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return os.path.join(str(tmp_path), "recall.db")


@pytest.fixture
def store(store_target: str) -> Iterator[RecallStore]:
    s = RecallStore.open(store_target)
    try:
        yield s
    finally:
        s.close()


def pytest_terminal_summary(terminalreporter: object, exitstatus: int, config: object) -> None:
    if _PG_PROBLEM:
        tr = terminalreporter
        tr.write_sep("!", "POSTGRESQL TESTS WERE SKIPPED", red=True, bold=True)  # type: ignore[attr-defined]
        tr.write_line(_PG_PROBLEM[0] + " -- only SQLite was tested.", red=True)  # type: ignore[attr-defined]
        print("", file=sys.stderr)


@pytest.fixture
def saver(store: RecallStore) -> Iterator[Any]:
    """``store.checkpointer()``, closed after the test."""
    cp = store.checkpointer()
    yield cp
    cp.close()


@pytest.fixture
def inner(store: RecallStore) -> Iterator[Any]:
    """LangGraph's own saver on the store's database, to read the history runs wrote."""
    from langgraph_recall.checkpoint._same_db import close_same_database_saver, same_database_saver

    saver = same_database_saver(store)
    yield saver
    close_same_database_saver(saver)


@pytest.fixture
def attach(store_target: str, tmp_path: Path) -> Iterator[Callable[..., list[Any]]]:
    """Start worker processes on the test's database (``fix_checkpoint.attaching``)."""
    from fix_checkpoint import attaching

    with attaching(store_target, tmp_path) as attach_workers:
        yield attach_workers
