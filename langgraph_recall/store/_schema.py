"""The one schema, written once and rendered for SQLite and PostgreSQL.

Tables are declared with portable column kinds; ``render(dialect)`` turns them into DDL. The
``MIGRATIONS`` list follows LangGraph's savers: its position is the schema version, and each
entry is a list of steps (a ``Table``, an ``Index``, or a ``{"sqlite": ..., "postgres": ...}``
dict of raw statements for what only one engine has: FTS5, triggers, GIN indexes).

Journal tables (turns, revisions, outputs, actions, action ends, approvals, spends) are
append-only: triggers refuse UPDATE and DELETE on them, so "nothing recorded is lost" is
enforced by the database itself rather than by our own discipline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Dialect = Literal["sqlite", "postgres"]

# Portable column kinds -> engine types. KEY columns take part in ordering and prefix ranges,
# so on PostgreSQL they use the C collation (byte order), which makes "a.b." <= x < "a.b/"
# a correct namespace-prefix range whatever the server's default locale.
_TYPES: dict[str, dict[Dialect, str]] = {
    "KEY": {"sqlite": "TEXT", "postgres": 'TEXT COLLATE "C"'},
    "TEXT": {"sqlite": "TEXT", "postgres": "TEXT"},
    "INT": {"sqlite": "INTEGER", "postgres": "BIGINT"},
    "REAL": {"sqlite": "REAL", "postgres": "DOUBLE PRECISION"},
    "BLOB": {"sqlite": "BLOB", "postgres": "BYTEA"},
    "JSON": {"sqlite": "TEXT", "postgres": "JSONB"},
}


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, "KIND" or "KIND NOT NULL" ...)
    primary_key: tuple[str, ...]
    append_only: bool = False
    # SQLite: rows stored in the primary key's own b-tree (no rowid table beside it), so an
    # insert writes one page fewer. PostgreSQL has no such choice; the flag is ignored there.
    without_rowid: bool = False

    def ddl(self, dialect: Dialect, name: str | None = None) -> list[str]:
        name = name or self.name
        cols = []
        for col, spec in self.columns:
            kind, _, rest = spec.partition(" ")
            cols.append(f"{col} {_TYPES[kind][dialect]}{' ' + rest if rest else ''}")
        cols.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        tail = " WITHOUT ROWID" if self.without_rowid and dialect == "sqlite" else ""
        out = [f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)}){tail}"]
        if self.append_only and name == self.name:
            out += _append_only_guard(self.name, dialect)
        return out


@dataclass(frozen=True)
class Index:
    name: str
    table: str
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None

    def ddl(self, dialect: Dialect) -> list[str]:
        u = "UNIQUE " if self.unique else ""
        w = f" WHERE {self.where}" if self.where else ""
        return [
            f"CREATE {u}INDEX IF NOT EXISTS {self.name} ON {self.table} ({', '.join(self.columns)}){w}"
        ]


Step = Table | Index | dict


def _append_only_guard(table: str, dialect: Dialect) -> list[str]:
    msg = f"recall: {table} is append-only; records are never changed or deleted"
    if dialect == "sqlite":
        return [
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{msg}'); END",
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{msg}'); END",
        ]
    return [
        f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION recall_refuse_change()",
    ]


_PG_REFUSE_FN = """
CREATE OR REPLACE FUNCTION recall_refuse_change() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'recall: % is append-only; records are never changed or deleted', TG_TABLE_NAME;
END $$ LANGUAGE plpgsql
"""

ITEMS = Table(
    "recall_items",
    (
        ("prefix", "KEY NOT NULL"),
        ("key", "KEY NOT NULL"),
        ("value", "JSON NOT NULL"),
        ("body", "TEXT"),  # the text searched by a `query` when no embedding index is set
        ("created_at", "REAL NOT NULL"),
        ("updated_at", "REAL NOT NULL"),
        ("expires_at", "REAL"),
        ("ttl_minutes", "REAL"),
    ),
    ("prefix", "key"),
)

ACTIONS = Table(
    "recall_actions",  # one row per attempt: the intent, written before the tool runs
    (
        ("action_id", "KEY NOT NULL"),
        ("attempt", "INT NOT NULL"),
        ("agent_id", "KEY NOT NULL"),
        ("thread_id", "TEXT"),
        ("tool", "TEXT NOT NULL"),
        ("klass", "TEXT NOT NULL"),
        ("args_type", "TEXT NOT NULL"),
        ("args", "BLOB NOT NULL"),
        ("args_digest", "TEXT NOT NULL"),
        ("idempotency_key", "TEXT NOT NULL"),
        ("epoch", "INT"),
        # Order of the agent's attempts (undo walks it backwards); clocks tick in
        # milliseconds on SQLite and drift between machines, a counter does neither.
        ("seq", "INT NOT NULL"),
        ("created_at", "REAL NOT NULL"),
    ),
    ("action_id", "attempt"),
    append_only=True,
)

ACTION_ENDS = Table(
    "recall_action_ends",  # at most one end per attempt: the primary key enforces "once"
    (
        ("action_id", "KEY NOT NULL"),
        ("attempt", "INT NOT NULL"),
        ("outcome", "TEXT NOT NULL"),
        ("result_type", "TEXT"),
        ("result", "BLOB"),
        ("error", "TEXT"),
        ("note", "TEXT"),
        ("resolved_by", "TEXT"),
        ("created_at", "REAL NOT NULL"),
    ),
    ("action_id", "attempt"),
    append_only=True,
)

OPEN_ACTIONS = Table(
    # Derived index of attempts with no end yet, so the briefing and the CLI find open
    # actions without reading an agent's whole action history. Not a record itself.
    "recall_open_actions",
    (
        ("action_id", "KEY NOT NULL"),
        ("attempt", "INT NOT NULL"),
        ("agent_id", "KEY NOT NULL"),
    ),
    ("action_id",),
)
ACTIONS_AGENT = Index("recall_actions_agent", "recall_actions", ("agent_id", "seq"))
OPEN_ACTIONS_AGENT = Index("recall_open_actions_agent", "recall_open_actions", ("agent_id",))


def _rowless(table: Table, indexes: tuple[Index, ...] = ()) -> dict[Dialect, list[str]]:
    """SQLite: rebuild ``table`` WITHOUT ROWID, rows and indexes and guards kept; PostgreSQL:
    nothing to do. Inside the migration's one transaction, so a crash leaves the old table."""
    new = replace(table, without_rowid=True)
    cols = ", ".join(c for c, _ in table.columns)
    tmp = f"{table.name}_v2"
    steps = [
        *new.ddl("sqlite", name=tmp),
        f"INSERT INTO {tmp} ({cols}) SELECT {cols} FROM {table.name}",
        f"DROP TABLE {table.name}",  # its indexes and triggers go with it
        f"ALTER TABLE {tmp} RENAME TO {table.name}",
        *(stmt for index in indexes for stmt in index.ddl("sqlite")),
    ]
    if table.append_only:
        steps += _append_only_guard(table.name, "sqlite")
    return {"sqlite": steps, "postgres": []}


MIGRATIONS: list[list[Step]] = [
    # v1: the whole first schema.
    [
        {"sqlite": [], "postgres": [_PG_REFUSE_FN]},
        Table("recall_meta", (("key", "KEY NOT NULL"), ("value", "TEXT NOT NULL")), ("key",)),
        ITEMS,
        Index(
            "recall_items_expires", "recall_items", ("expires_at",), where="expires_at IS NOT NULL"
        ),
        Table(
            "recall_vectors",
            (
                ("prefix", "KEY NOT NULL"),
                ("key", "KEY NOT NULL"),
                ("field", "TEXT NOT NULL"),
                ("vector", "JSON NOT NULL"),
            ),
            ("prefix", "key", "field"),
        ),
        {
            "sqlite": [
                "CREATE VIRTUAL TABLE IF NOT EXISTS recall_items_fts USING fts5("
                "body, content='recall_items', content_rowid='rowid')",
                "CREATE TRIGGER IF NOT EXISTS recall_items_fts_ins AFTER INSERT ON recall_items "
                "BEGIN INSERT INTO recall_items_fts(rowid, body) VALUES (new.rowid, new.body); END",
                "CREATE TRIGGER IF NOT EXISTS recall_items_fts_del AFTER DELETE ON recall_items "
                "BEGIN INSERT INTO recall_items_fts(recall_items_fts, rowid, body) "
                "VALUES ('delete', old.rowid, old.body); END",
                "CREATE TRIGGER IF NOT EXISTS recall_items_fts_upd AFTER UPDATE OF body ON recall_items "
                "BEGIN INSERT INTO recall_items_fts(recall_items_fts, rowid, body) "
                "VALUES ('delete', old.rowid, old.body); "
                "INSERT INTO recall_items_fts(rowid, body) VALUES (new.rowid, new.body); END",
            ],
            "postgres": [
                "CREATE INDEX IF NOT EXISTS recall_items_body_fts ON recall_items "
                "USING GIN (to_tsvector('simple', coalesce(body, '')))",
            ],
        },
        Table(
            "recall_agents",
            (
                ("agent_id", "KEY NOT NULL"),
                ("created_at", "REAL NOT NULL"),
                ("last_activity", "REAL NOT NULL"),
                ("turn_seq", "INT NOT NULL"),
                ("revision_seq", "INT NOT NULL"),
                ("action_seq", "INT NOT NULL"),
            ),
            ("agent_id",),
        ),
        Table(
            "recall_turns",
            (
                ("agent_id", "KEY NOT NULL"),
                ("seq", "INT NOT NULL"),
                ("msg_id", "KEY NOT NULL"),
                ("thread_id", "TEXT"),
                ("role", "TEXT NOT NULL"),
                ("dtype", "TEXT NOT NULL"),
                ("data", "BLOB NOT NULL"),
                ("size", "INT NOT NULL"),
                ("output_ref", "TEXT"),
                ("created_at", "REAL NOT NULL"),
            ),
            ("agent_id", "seq"),
            append_only=True,
        ),
        Index("recall_turns_msg", "recall_turns", ("agent_id", "msg_id"), unique=True),
        Table(
            "recall_revisions",  # working-state updates, milestones and pointer changes
            (
                ("agent_id", "KEY NOT NULL"),
                ("seq", "INT NOT NULL"),
                ("kind", "TEXT NOT NULL"),
                ("name", "TEXT"),
                ("data", "JSON NOT NULL"),
                ("created_at", "REAL NOT NULL"),
            ),
            ("agent_id", "seq"),
            append_only=True,
        ),
        Table(
            "recall_outputs",
            (
                ("ref", "KEY NOT NULL"),
                ("agent_id", "KEY NOT NULL"),
                ("size", "INT NOT NULL"),
                ("data", "BLOB NOT NULL"),
                ("created_at", "REAL NOT NULL"),
            ),
            ("ref",),
            append_only=True,
        ),
        ACTIONS,
        ACTIONS_AGENT,
        ACTION_ENDS,
        OPEN_ACTIONS,
        OPEN_ACTIONS_AGENT,
        Table(
            "recall_approvals",
            (
                ("approval_id", "KEY NOT NULL"),
                ("agent_id", "KEY NOT NULL"),
                ("action_id", "KEY NOT NULL"),
                ("decision", "TEXT NOT NULL"),
                ("args_type", "TEXT"),
                ("args", "BLOB"),
                ("args_digest", "TEXT"),
                ("message", "TEXT"),
                ("signature", "TEXT NOT NULL"),
                ("created_at", "REAL NOT NULL"),
            ),
            ("approval_id",),
            append_only=True,
        ),
        Index("recall_approvals_action", "recall_approvals", ("action_id", "created_at")),
        Index("recall_approvals_agent", "recall_approvals", ("agent_id", "approval_id")),
        Table(
            "recall_approval_spends",  # the primary key makes spending an approval happen once
            (
                ("approval_id", "KEY NOT NULL"),
                ("action_id", "KEY NOT NULL"),
                ("attempt", "INT NOT NULL"),
                ("created_at", "REAL NOT NULL"),
            ),
            ("approval_id",),
            append_only=True,
        ),
        Table(
            "recall_leases",
            (
                ("agent_id", "KEY NOT NULL"),
                ("holder", "TEXT NOT NULL"),
                ("epoch", "INT NOT NULL"),
                ("expires_at", "REAL NOT NULL"),
                ("acquired_at", "REAL NOT NULL"),
            ),
            ("agent_id",),
        ),
    ],
    # v2 (SQLite only): the three tables every durable tool call writes keep their rows in
    # their primary key's b-tree. A claim and its end then write 7 pages to the log instead of
    # 11 (each a frame of two writes), measured with strace in benchmarks/results/profile.md.
    [
        _rowless(ACTIONS, (ACTIONS_AGENT,)),
        _rowless(ACTION_ENDS),
        _rowless(OPEN_ACTIONS, (OPEN_ACTIONS_AGENT,)),
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)

APPEND_ONLY_TABLES: tuple[str, ...] = tuple(
    step.name
    for steps in MIGRATIONS
    for step in steps
    if isinstance(step, Table) and step.append_only
)


def render(steps: list[Step], dialect: Dialect) -> list[str]:
    """DDL statements for one migration on one engine, in order."""
    out: list[str] = []
    for step in steps:
        if isinstance(step, dict):
            out += step[dialect]
        else:
            out += step.ddl(dialect)
    return out
