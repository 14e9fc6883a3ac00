"""The one schema, written once and rendered for SQLite and PostgreSQL.

Tables are declared with portable column kinds; ``render(dialect)`` turns them into DDL. The
``MIGRATIONS`` list follows LangGraph's savers: its position is the schema version, and each
entry is a list of steps (a ``Table``, an ``Index``, added ``Columns``, a ``Drop``, a
``SetOnce`` guard, or a ``{"sqlite": ..., "postgres": ...}`` dict of raw statements for what
differs by engine: FTS5, triggers, GIN indexes, data copies).

Journal tables (turns, revisions, outputs, actions, approvals, spends) are append-only:
triggers refuse UPDATE and DELETE on them, so "nothing recorded is lost" is enforced by the
database itself rather than by our own discipline. The one exception is written into its
trigger: an action's end columns, empty at the intent, may be filled once (``set_once``).
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


@dataclass(frozen=True)
class Columns:
    """Columns added to an existing table (rows written before get NULL in them)."""

    table: str
    columns: tuple[tuple[str, str], ...]

    def ddl(self, dialect: Dialect) -> list[str]:
        return [
            f"ALTER TABLE {self.table} ADD COLUMN {col} {_TYPES[spec][dialect]}"
            for col, spec in self.columns
        ]


@dataclass(frozen=True)
class Drop:
    """A table dropped, with its indexes and triggers."""

    table: str

    def ddl(self, dialect: Dialect) -> list[str]:
        return [f"DROP TABLE IF EXISTS {self.table}"]


@dataclass(frozen=True)
class SetOnce:
    """The append-only guard of ``table``, except that ``columns`` may be filled once.

    Replaces the plain guard (same trigger names, so ``verify`` finds it either way). An
    UPDATE passes only while ``columns[0]`` is still NULL, must set it, and must leave every
    column in ``fixed`` as it was; DELETE is refused as before. With ``mark``, an UPDATE may
    instead set that one column, once, while ``columns[0]`` stays NULL and nothing else
    changes (an action's start mark: ``_actions.start``); an end leaves the mark as it was.
    """

    table: str
    columns: tuple[str, ...]
    fixed: tuple[str, ...]
    mark: str | None = None

    def ddl(self, dialect: Dialect) -> list[str]:
        first = self.columns[0]
        msg = (
            f"recall: {self.table} is append-only; records are never changed or deleted "
            f"(only an empty {first} may be set, once)"
        )
        differs = (
            "NEW.{0} IS NOT OLD.{0}" if dialect == "sqlite" else "NEW.{0} IS DISTINCT FROM OLD.{0}"
        )
        refuse = f"OLD.{first} IS NOT NULL OR NEW.{first} IS NULL"
        changed = " OR ".join(differs.format(c) for c in self.fixed)
        if self.mark is not None:
            rest = " OR ".join(differs.format(c) for c in self.columns[1:])
            marking = (
                f"NEW.{first} IS NULL AND OLD.{self.mark} IS NULL AND NEW.{self.mark} IS NOT NULL"
            )
            refuse = (
                f"OLD.{first} IS NOT NULL OR (NEW.{first} IS NULL AND NOT ({marking} AND NOT "
                f"({rest}))) OR (NEW.{first} IS NOT NULL AND {differs.format(self.mark)})"
            )
        if dialect == "sqlite":
            return [
                f"DROP TRIGGER IF EXISTS {self.table}_no_update",
                f"CREATE TRIGGER {self.table}_no_update BEFORE UPDATE ON {self.table} "
                f"WHEN {refuse} OR {changed} "
                f"BEGIN SELECT RAISE(ABORT, '{msg}'); END",
                *_append_only_guard(self.table, dialect)[1:],  # the DELETE guard, unchanged
            ]
        return [
            f"CREATE OR REPLACE FUNCTION {self.table}_set_once() RETURNS trigger AS $$ "
            f"BEGIN IF TG_OP = 'DELETE' OR {refuse} "
            f"OR {changed} THEN RAISE EXCEPTION '{msg}'; END IF; RETURN NEW; "
            "END $$ LANGUAGE plpgsql",
            f"DROP TRIGGER IF EXISTS {self.table}_append_only ON {self.table}",
            f"CREATE TRIGGER {self.table}_append_only BEFORE UPDATE OR DELETE ON {self.table} "
            f"FOR EACH ROW EXECUTE FUNCTION {self.table}_set_once()",
        ]


Step = Table | Index | Columns | Drop | SetOnce | dict


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
        *_no_truncate_guard(table),
    ]


def _no_truncate_guard(table: str) -> list[str]:
    """PostgreSQL only: TRUNCATE removes every row without firing row-level triggers, so the
    row guard above never sees it. A statement-level trigger refuses it. (SQLite has no
    TRUNCATE: its truncate optimisation of a bare DELETE is off on a table with triggers.)"""
    return [
        f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION recall_refuse_change()",
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

ITEMS_EXPIRES = Index(
    "recall_items_expires", "recall_items", ("expires_at",), where="expires_at IS NOT NULL"
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
    "recall_action_ends",  # v1-v2: at most one end per attempt (v3 moved them into ACTIONS)
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
    # v1-v2: derived index of attempts with no end yet (v3: the partial index ACTIONS_OPEN).
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

# v3: an attempt's end lives in its own row, in columns empty at the intent and set once.
ACTION_END_COLUMNS = (
    ("outcome", "TEXT"),
    ("result_type", "TEXT"),
    ("result", "BLOB"),
    ("error", "TEXT"),
    ("note", "TEXT"),
    ("resolved_by", "TEXT"),
    ("ended_at", "REAL"),
)
# v9: whether an attempt was written ahead (1, else NULL) and when its tool was about to start.
ACTION_START_COLUMNS = (("planned", "INT"), ("started_at", "REAL"))
# Open attempts (no end yet), in the agent's order: the briefing reads them before every model
# call, so finding them must not read the agent's whole history. An end takes its row out.
ACTIONS_OPEN = Index(
    "recall_actions_open", "recall_actions", ("agent_id", "seq"), where="outcome IS NULL"
)
# PostgreSQL's text parser keeps an email, a URL, a host, a file path, a version or a
# hyphenated word as one compound lexeme ("alice@example.com"), so a query for "alice" missed
# it, where SQLite's FTS5 and the query's own words (``\w+``) split at every punctuation mark.
# What PostgreSQL indexes is the item's text with each run of these ASCII characters (every
# one but letters and digits) turned into one space, cut to SEARCH_BODY_MAX characters: a
# tsvector holds at most 1 MB, and 100,000 characters make at most about 650 kB of one (6.5
# bytes a character, for one-character words of 4-byte characters: a word entry, its bytes and
# a position each). Python's ``re`` and PostgreSQL's regular expressions read the class alike.
SEARCH_SEPARATORS = r"[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]"
SEARCH_BODY_MAX = 100_000
_SEARCH_BODY_PG = f"left(regexp_replace(body, '{SEARCH_SEPARATORS}+', ' ', 'g'), {SEARCH_BODY_MAX})"
_END_SET = ", ".join(c for c, _ in ACTION_END_COLUMNS)
_END_FROM = "e.outcome, e.result_type, e.result, e.error, e.note, e.resolved_by, e.created_at"


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


# SQLite: the FTS5 index of items' text follows recall_items by rowid.
_ITEMS_FTS_TRIGGERS = [
    "CREATE TRIGGER IF NOT EXISTS recall_items_fts_ins AFTER INSERT ON recall_items "
    "BEGIN INSERT INTO recall_items_fts(rowid, body) VALUES (new.rowid, new.body); END",
    "CREATE TRIGGER IF NOT EXISTS recall_items_fts_del AFTER DELETE ON recall_items "
    "BEGIN INSERT INTO recall_items_fts(recall_items_fts, rowid, body) "
    "VALUES ('delete', old.rowid, old.body); END",
    "CREATE TRIGGER IF NOT EXISTS recall_items_fts_upd AFTER UPDATE OF body ON recall_items "
    "BEGIN INSERT INTO recall_items_fts(recall_items_fts, rowid, body) "
    "VALUES ('delete', old.rowid, old.body); "
    "INSERT INTO recall_items_fts(rowid, body) VALUES (new.rowid, new.body); END",
]


def _items_keep_their_rowid() -> list[str]:
    """SQLite: recall_items rebuilt with its rowid as a column of its own (``rid INTEGER
    PRIMARY KEY``), each row keeping the rowid it had, then the FTS5 index rebuilt from it.

    An implicit rowid is not part of a row's values: ``sqlite3 recall.db .dump`` writes the
    rows without it, a restore numbers them afresh, while the FTS5 index (dumped as tables of
    its own) still points at the old numbers, so text queries answered with other items. A
    rowid that is a column is dumped with its row. The rebuild also mends an index that a
    restore made before this version had already broken.
    """
    names = ", ".join(c for c, _ in ITEMS.columns)
    defs = ", ".join(
        f"{c} {_TYPES[kind]['sqlite']}{' ' + rest if rest else ''}"
        for c, (kind, _, rest) in ((c, spec.partition(" ")) for c, spec in ITEMS.columns)
    )
    return [
        f"CREATE TABLE recall_items_v6 (rid INTEGER PRIMARY KEY, {defs}, "
        f"UNIQUE ({', '.join(ITEMS.primary_key)}))",
        f"INSERT INTO recall_items_v6 (rid, {names}) SELECT rowid, {names} FROM recall_items",
        "DROP TABLE recall_items",  # its index and triggers go with it
        "ALTER TABLE recall_items_v6 RENAME TO recall_items",
        *ITEMS_EXPIRES.ddl("sqlite"),
        *_ITEMS_FTS_TRIGGERS,
        "INSERT INTO recall_items_fts(recall_items_fts) VALUES ('rebuild')",
    ]


def _current_tables(migrations: list[list[Step]]) -> list[Table]:
    """The tables ``migrations`` leave in place (created and not dropped), in creation order."""
    dropped = {step.table for steps in migrations for step in steps if isinstance(step, Drop)}
    return [
        s for steps in migrations for s in steps if isinstance(s, Table) and s.name not in dropped
    ]


MIGRATIONS: list[list[Step]] = [
    # v1: the whole first schema.
    [
        {"sqlite": [], "postgres": [_PG_REFUSE_FN]},
        Table("recall_meta", (("key", "KEY NOT NULL"), ("value", "TEXT NOT NULL")), ("key",)),
        ITEMS,
        ITEMS_EXPIRES,
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
                *_ITEMS_FTS_TRIGGERS,
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
    # v3: an attempt's end moves into the attempt's own row. The end of a call was an insert
    # into recall_action_ends plus a delete from recall_open_actions; now it is one UPDATE of
    # the intent's row, allowed once by its trigger, and open attempts are a partial index:
    # a claim and its end write fewer pages (SQLite, bare statements: 127 -> 93 us a pair,
    # benchmarks/results/profile.md). Inside the migration's one transaction, like every step.
    [
        Columns("recall_actions", ACTION_END_COLUMNS),
        # The old guard refuses every UPDATE, the copy below included: replace it first.
        SetOnce(
            "recall_actions",
            tuple(c for c, _ in ACTION_END_COLUMNS),
            tuple(c for c, _ in ACTIONS.columns),
        ),
        {
            dialect: [
                f"UPDATE recall_actions SET ({_END_SET}) = (SELECT {_END_FROM} FROM "
                "recall_action_ends e WHERE e.action_id = recall_actions.action_id AND "
                "e.attempt = recall_actions.attempt) WHERE EXISTS (SELECT 1 FROM "
                "recall_action_ends e WHERE e.action_id = recall_actions.action_id AND "
                "e.attempt = recall_actions.attempt)"
            ]
            for dialect in ("sqlite", "postgres")
        },
        Drop("recall_action_ends"),
        Drop("recall_open_actions"),
        ACTIONS_OPEN,
        # SQLite: an action's first insert creates its agent's row inside the engine, instead
        # of an upsert statement sent with every claim (PostgreSQL's claim upserts the row
        # anyway: it takes the row's lock to number the action).
        {
            "sqlite": [
                "CREATE TRIGGER IF NOT EXISTS recall_actions_agent AFTER INSERT ON recall_actions "
                "BEGIN INSERT OR IGNORE INTO recall_agents (agent_id, created_at, last_activity, "
                "turn_seq, revision_seq, action_seq) VALUES (NEW.agent_id, NEW.created_at, "
                "NEW.created_at, 0, 0, 0); END"
            ],
            "postgres": [],
        },
    ],
    # v4 (SQLite only): recording numbers an agent's turns from their own key and leaves the
    # agent row alone (see ``_records``), so an agent's first turn creates the row inside the
    # engine, as an action's insert does. Every agent with turns already has its row.
    [
        {
            "sqlite": [
                "CREATE TRIGGER IF NOT EXISTS recall_turns_agent AFTER INSERT ON recall_turns "
                "WHEN NEW.seq = 1 BEGIN INSERT OR IGNORE INTO recall_agents (agent_id, "
                "created_at, last_activity, turn_seq, revision_seq, action_seq) VALUES "
                "(NEW.agent_id, NEW.created_at, NEW.created_at, 0, 0, 0); END"
            ],
            "postgres": [],
        },
    ],
    # v5 (PostgreSQL only): the searched text of items written before is rewritten as new
    # puts write it (SEARCH_SEPARATORS, SEARCH_BODY_MAX; see ``_items.search_body``), and the
    # full-text index with it. SQLite's FTS5 splits words at the same characters already.
    [
        {
            "sqlite": [],
            "postgres": [
                f"UPDATE recall_items SET body = {_SEARCH_BODY_PG} WHERE body <> {_SEARCH_BODY_PG}"
            ],
        },
    ],
    # v6 (SQLite only): items keep their rowid through a dump and restore (see
    # ``_items_keep_their_rowid``). PostgreSQL's index is on each row's own text.
    [{"sqlite": _items_keep_their_rowid(), "postgres": []}],
    # v7: a decision made from a person's answer keeps the LangGraph task it was asked in and
    # how many answers its asking took, so a later run of that task takes back exactly those
    # (``tools/_approval``). Rows written before have neither.
    [Columns("recall_approvals", (("task_id", "TEXT"), ("asked", "INT")))],
]
# v8 (PostgreSQL only): the journals refuse TRUNCATE too (``_no_truncate_guard``); before, it
# emptied one past every row trigger and `verify` saw nothing wrong. A journal created by a
# later migration gets the guard from its own DDL.
MIGRATIONS.append(
    [
        {
            "sqlite": [],
            "postgres": [
                sql
                for t in _current_tables(MIGRATIONS)
                if t.append_only
                for sql in _no_truncate_guard(t.name)
            ],
        }
    ]
)

# v9: approvals become a signed chain per action (``_approvals``): each row's place ``seq``,
# the attempt it authorises and its signing key's id (NULL: the store's secret), all covered
# by the v2 signature with the row before it. The unique index makes two writers of one
# place collide and is the one indexed read a spend verifies the chain with. Rows written
# before keep NULL there and are no longer used to decide: their question is asked anew
# (re-signing them now would bless any row an attacker had added under the old signature).
MIGRATIONS.append(
    [
        Columns("recall_approvals", (("seq", "INT"), ("attempt", "INT"), ("key_id", "TEXT"))),
        Index("recall_approvals_chain", "recall_approvals", ("action_id", "seq"), unique=True),
    ]
)
APPROVAL_CHAIN_VERSION = len(MIGRATIONS)

# v10: a durable call written ahead with its AI message's checkpoint (``checkpoint._plans``) is
# told from one whose tool may have begun. ``planned`` is set on an intent written ahead;
# ``started_at`` by the start mark committed right before its tool runs (``_actions.start``).
# An attempt is started when it was not planned or has its mark: rows written before have
# neither column, and are started, as every intent then was taken to be.
MIGRATIONS.append(
    [
        Columns("recall_actions", ACTION_START_COLUMNS),
        SetOnce(
            "recall_actions",
            tuple(c for c, _ in ACTION_END_COLUMNS),
            (*(c for c, _ in ACTIONS.columns), "planned"),
            mark="started_at",
        ),
    ]
)

SCHEMA_VERSION = len(MIGRATIONS)

_CURRENT = _current_tables(MIGRATIONS)
TABLES: tuple[str, ...] = tuple(dict.fromkeys(t.name for t in _CURRENT))  # as of SCHEMA_VERSION
APPEND_ONLY_TABLES: tuple[str, ...] = tuple(
    dict.fromkeys(t.name for t in _CURRENT if t.append_only)
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
