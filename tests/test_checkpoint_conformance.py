"""``langgraph-checkpoint-conformance``: the wrapper passes exactly what the wrapped saver passes.

The kit (``validate``) calls only async methods and detects a capability by whether the saver's
class overrides the async method. LangGraph's sync-only savers (SqliteSaver, PostgresSaver)
cannot be measured bare (every async call raises), so their reference is the bare saver behind
``fix_checkpoint.threaded``: each method it implements run in a thread, nothing more. For the
others the reference is the bare saver itself. Each capability suite gets a fresh saver on a
fresh file or PostgreSQL schema, as the kit expects.
"""

from __future__ import annotations

import itertools
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import with_schema
from fix_checkpoint import threaded
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_recall.checkpoint import RecallCheckpointer
from langgraph_recall.checkpoint._same_db import close_same_database_saver, same_database_saver
from langgraph_recall.store import RecallStore

KINDS = [
    "InMemorySaver",
    "SqliteSaver",
    "AsyncSqliteSaver",
    "PostgresSaver",
    "AsyncPostgresSaver",
    "store.checkpointer() on SQLite",
    "store.checkpointer() on PostgreSQL",
]
_counter = itertools.count()


class Places:
    """Fresh SQLite files and PostgreSQL schemas for one test."""

    def __init__(self, tmp: Path, request: pytest.FixtureRequest, kind: str) -> None:
        self.tmp = tmp
        self.pg = request.getfixturevalue("pg_database") if "Postgre" in kind else None

    def sqlite(self) -> str:
        return str(self.tmp / f"c{next(_counter)}.db")

    def postgres(self) -> str:
        import psycopg

        assert self.pg is not None
        schema = "c_" + secrets.token_hex(5)
        with psycopg.connect(self.pg, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return with_schema(self.pg, schema)


def factory(kind: str, places: Places, *, wrapped: bool) -> Callable[[], AsyncIterator[Any]]:
    """An async generator yielding one fresh saver (bare reference, or wrapped)."""

    async def make() -> AsyncIterator[Any]:
        leases = RecallStore.open(places.sqlite())  # the wrapper's store for non-store kinds
        try:
            async for saver in _inner(kind, places, wrapped=wrapped, leases=leases):
                yield saver
        finally:
            leases.close()

    return make


async def _inner(
    kind: str, places: Places, *, wrapped: bool, leases: RecallStore
) -> AsyncIterator[Any]:
    def wrap(inner: Any, store: RecallStore = leases) -> Any:
        return RecallCheckpointer(inner, store=store) if wrapped else threaded(inner)

    if kind == "InMemorySaver":
        yield wrap(InMemorySaver())
    elif kind == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(places.sqlite(), check_same_thread=False)
        yield wrap(SqliteSaver(conn))
        conn.close()
    elif kind == "AsyncSqliteSaver":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(places.sqlite()) as saver:
            yield wrap(saver)
    elif kind == "PostgresSaver":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(places.postgres()) as saver:
            saver.setup()
            yield wrap(saver)
    elif kind == "AsyncPostgresSaver":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(places.postgres()) as saver:
            await saver.setup()
            yield wrap(saver)
    else:
        store = RecallStore.open(places.postgres() if "PostgreSQL" in kind else places.sqlite())
        try:
            if wrapped:
                cp = store.checkpointer()
                yield cp
                cp.close()
            else:
                inner = same_database_saver(store)
                yield threaded(inner)
                close_same_database_saver(inner)
        finally:
            store.close()


def summary(report: Any) -> dict[str, Any]:
    return {
        "level": report.conformance_level(),
        **{
            name: (r.detected, r.passed, r.tests_passed, r.tests_failed, r.tests_skipped)
            for name, r in report.results.items()
        },
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_wrapper_conforms_exactly_like_the_saver_it_wraps(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    places = Places(tmp_path, request, kind)
    bare = await validate(
        checkpointer_test(name=f"bare {kind}")(factory(kind, places, wrapped=False))
    )
    mine = await validate(
        checkpointer_test(name=f"wrapped {kind}")(factory(kind, places, wrapped=True))
    )
    failures = {name: r.failures[:2] for name, r in mine.results.items() if r.failures}
    assert summary(mine) == summary(bare), failures
    assert bare.passed_all_base(), f"the reference itself fails: {summary(bare)}"
    if os.environ.get("RECALL_SHOW_CONFORMANCE"):
        mine.print_report()
