"""The agent's journal: agents, turns, revisions, outputs, leases (actions and approvals are
in ``_actions``).

Every function takes an open ``Tx`` and is written once for both engines. Anything that decides
on what it read (a lease, a turn's number) runs in a write transaction, which is ``BEGIN
IMMEDIATE`` on SQLite and relies on a primary key or a single conditional statement on
PostgreSQL, so two processes can never both win.

Turns are numbered 1, 2, 3... per agent, without gaps. On PostgreSQL from the agent row's
``turn_seq``, whose upsert takes the row lock that makes two recorders of one agent take turns.
On SQLite the write transaction already holds the file's only write lock, so the number comes
from the turns' own primary key (``max(seq)``) and recording writes no agent row: one page and
one statement fewer per batch (a page is about 5 µs of log writes here). ``turn_seq`` is then
left as it was on SQLite; nothing reads it there. An agent's first turn creates its agent row
inside the engine (a trigger, schema v4).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Container, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from .._errors import InvalidNamespace, LeaseHeld, RecallError
from ._codec import dump_json, dumps_typed, load_json, loads_fields, loads_typed
from ._db import Tx
from ._models import AgentInfo, Lease, Pointer, Turn, TurnView

# --- agents ----------------------------------------------------------------------------------


def touch_agent(tx: Tx, agent_id: str) -> None:
    """Create the agent row if needed and mark activity.

    The upsert also takes the row lock on PostgreSQL, which serialises concurrent appends for
    one agent (so sequence numbers are handed out without gaps or duplicates).
    """
    check_agent_id(agent_id)
    # One upsert: its DO UPDATE takes the row lock on PostgreSQL like a plain UPDATE would.
    tx.run(
        "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, revision_seq, "
        "action_seq) VALUES (?, {now}, {now}, 0, 0, 0) "
        "ON CONFLICT (agent_id) DO UPDATE SET last_activity = excluded.last_activity",
        (agent_id,),
    )


def check_agent_id(agent_id: str) -> None:
    """Refuse an agent id no record may be written under. Only writes check: an agent recorded
    before a rule was added stays readable (``show``, ``turns``) under the id it has."""
    # Whitespace alone names nobody: it is what a template or an unset variable leaves, and such
    # records could only be found again by pasting the exact blanks.
    if not isinstance(agent_id, str) or not agent_id.strip() or "\x00" in agent_id:
        raise RecallError(
            f"agent_id must be a non-empty string, not only whitespace, without NUL characters "
            f"(got {agent_id!r}); pass the agent's name, e.g. "
            '{"configurable": {"thread_id": "t-1", "agent_id": "billing"}}',
            code="invalid_value",
        )


def bump(tx: Tx, agent_id: str, column: str, n: int) -> int:
    """Reserve ``n`` numbers of the agent's ``column``; returns the first. One statement that
    also creates the agent row if needed and marks it active (as ``touch_agent``), and on
    PostgreSQL takes its lock, which is what hands the numbers out without gaps or doubles."""
    check_agent_id(agent_id)
    row = tx.one(
        "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, revision_seq, "
        f"action_seq) VALUES (?, {{now}}, {{now}}, {_SEQ_START[column]}) {_bumped(column)}",
        (agent_id, n),
    )
    assert row is not None
    return int(row[0]) - n + 1


# A new agent row's three counters when ``bump`` creates it: ``n`` (the "?") for the column
# bumped, 0 for the others.
_SEQ_START = {
    "turn_seq": "?, 0, 0",
    "revision_seq": "0, ?, 0",
    "action_seq": "0, 0, ?",
}


def _bumped(column: str) -> str:
    """The upsert's tail: an existing agent row is marked active and ``column`` moves by what
    the row offered for insertion holds there (the numbers reserved); returns the new value."""
    return (
        "ON CONFLICT (agent_id) DO UPDATE SET last_activity = excluded.last_activity, "
        f"{column} = recall_agents.{column} + excluded.{column} RETURNING {column}"
    )


def agents(tx: Tx) -> list[AgentInfo]:
    # The newest turn by its key (numbers have no gaps: its seq is the count), an index seek per
    # agent; its time counts as activity (SQLite's recording leaves the agent row alone).
    rows = tx.all(
        "SELECT a.agent_id, a.created_at, a.last_activity, "
        "(SELECT COUNT(*) FROM recall_actions o WHERE o.agent_id = a.agent_id "
        "AND o.outcome IS NULL), "
        "l.holder, l.expires_at, t.seq, t.created_at "
        "FROM recall_agents a LEFT JOIN recall_leases l ON l.agent_id = a.agent_id "
        "LEFT JOIN recall_turns t ON t.agent_id = a.agent_id AND t.seq = "
        "(SELECT max(seq) FROM recall_turns m WHERE m.agent_id = a.agent_id) "
        "ORDER BY a.agent_id"
    )
    now = time.time()
    out = []
    for r in rows:
        live = r[5] is not None and r[5] > now
        out.append(
            AgentInfo(
                agent_id=r[0],
                created_at=r[1],
                last_activity=max(r[2], r[7] or 0.0),
                turns=int(r[6] or 0),
                open_actions=int(r[3]),
                lease_holder=r[4] if live else None,
                lease_expires_at=r[5] if live else None,
            )
        )
    return out


def agent_exists(tx: Tx, agent_id: str) -> bool:
    return tx.one("SELECT 1 FROM recall_agents WHERE agent_id = ?", (agent_id,)) is not None


# --- turns -----------------------------------------------------------------------------------


def message_id(message: BaseMessage, occurrence: int) -> str:
    """The message's own id, or a stable one derived from its content.

    Two identical id-less messages in one call are told apart by their occurrence number.
    """
    if message.id:
        return str(message.id)
    _, data = dumps_typed(message)
    return f"h-{hashlib.sha256(data).hexdigest()[:24]}-{occurrence}"


def _message_ids(messages: Sequence[BaseMessage]) -> list[str]:
    """Each message's id (own, or derived from its content), checking that they are messages."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for m in messages:
        if not isinstance(m, BaseMessage):
            raise RecallError(
                f"record() takes LangChain messages, got {type(m).__name__}; convert with "
                "langchain_core.messages.convert_to_messages first",
                code="invalid_value",
            )
        if m.id:
            ids.append(str(m.id))
            continue
        base = message_id(m, 0)[:-2]
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.append(f"{base}-{n}")
    return ids


def record(
    tx: Tx,
    agent_id: str,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str | None,
    output_threshold: int,
) -> int:
    if not messages:
        return 0
    ids = _message_ids(messages)
    check_agent_id(agent_id)
    if tx.dialect == "sqlite" and len(ids) <= _SQLITE_ONE_INSERT_MAX:
        done = _record_new_sqlite(tx, agent_id, ids, messages, thread_id, output_threshold)
        if done is not None:
            return done
    if tx.dialect == "postgres":
        # The agent row's lock before the read: concurrent recorders of one agent then read
        # which ids are new one after the other. (SQLite's write transaction already does.)
        touch_agent(tx, agent_id)
    existing: set[str] = set()
    unique = list(dict.fromkeys(ids))
    for i in range(0, len(unique), 500):
        chunk = unique[i : i + 500]
        marks = ",".join("?" * len(chunk))
        existing.update(
            r[0]
            for r in tx.all(
                f"SELECT msg_id FROM recall_turns WHERE agent_id = ? AND msg_id IN ({marks})",
                [agent_id, *chunk],
                # Planned for these values: a generic plan made on a small table read every
                # turn of the agent per id (see record_pg's docstring).
                fresh_plan=True,
            )
        )
    fresh: list[tuple[str, BaseMessage]] = []
    for mid, m in zip(ids, messages, strict=False):
        if mid not in existing:
            existing.add(mid)
            fresh.append((mid, m))
    if not fresh:
        return 0
    first = _first_seq(tx, agent_id, len(fresh))
    rows = []
    for offset, (mid, m) in enumerate(fresh):
        ref = None
        content = m.content if isinstance(m.content, str) else None
        stored = m
        if content is not None and len(content) > output_threshold:
            # Large turns live whole in outputs; the turn keeps a reference, so a briefing can
            # point at it without reading it.
            ref = put_output(tx, agent_id, content)
            stored = m.model_copy(update={"content": ""})
        dtype, data = dumps_typed(stored)
        rows.append(
            (
                agent_id,
                first + offset,
                mid,
                thread_id,
                m.type,
                dtype,
                data,
                len(data) + (len(content) if ref and content else 0),
                ref,
            )
        )
    tx.many(
        "INSERT INTO recall_turns (agent_id, seq, msg_id, thread_id, role, dtype, data, size, "
        "output_ref, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {now})",
        rows,
    )
    return len(fresh)


def _first_seq(tx: Tx, agent_id: str, n: int) -> int:
    """The number of the first of ``n`` turns about to be inserted (see the module's docstring
    for where it comes from on each engine)."""
    if tx.dialect == "postgres":
        return bump(tx, agent_id, "turn_seq", n)
    row = tx.one("SELECT coalesce(max(seq), 0) FROM recall_turns WHERE agent_id = ?", (agent_id,))
    assert row is not None  # an aggregate answers one row
    return int(row[0]) + 1


# A short batch on SQLite (a chat turn's messages, a short run's hand-over) goes as one INSERT
# taking every message as new; a longer one reads which ids are recorded already, then inserts.
_SQLITE_ONE_INSERT_MAX = 16
_sqlite_inserts: dict[int, str] = {}


def _sqlite_insert(n: int) -> str:
    """One INSERT of ``n`` turns numbered after the agent's last (0 for a new agent)."""
    sql = _sqlite_inserts.get(n)
    if sql is None:
        rows = ", ".join(f"({k}, ?, ?, ?, ?)" for k in range(1, n + 1))
        sql = _sqlite_inserts[n] = (
            "WITH base(s) AS (SELECT coalesce((SELECT max(seq) FROM recall_turns "
            "WHERE agent_id = ?), 0)) "
            "INSERT INTO recall_turns (agent_id, seq, msg_id, thread_id, role, dtype, data, "
            "size, output_ref, created_at) SELECT ?, base.s + v.column1, v.column2, ?, "
            "v.column3, v.column4, v.column5, length(v.column5), NULL, {now} "
            f"FROM base, (VALUES {rows}) AS v"
        )
    return sql


def _all_new_batch(
    ids: list[str], messages: Sequence[BaseMessage], output_threshold: int
) -> dict[str, tuple[str, str, bytes]] | None:
    """The first occurrence of each id, in order, as (role, dtype, data), for a statement that
    takes every message as new; None if a message is large enough to go to the outputs table
    (which that statement does not write)."""
    batch: dict[str, tuple[str, str, bytes]] = {}
    for mid, m in zip(ids, messages, strict=False):
        if mid in batch:
            continue
        if isinstance(m.content, str) and len(m.content) > output_threshold:
            return None
        dtype, data = dumps_typed(m)
        batch[mid] = (m.type, dtype, data)
    return batch


def _record_new_sqlite(
    tx: Tx,
    agent_id: str,
    ids: list[str],
    messages: Sequence[BaseMessage],
    thread_id: str | None,
    output_threshold: int,
) -> int | None:
    """SQLite, in the caller's write transaction: a short batch as one statement, without
    reading which ids are recorded already.

    Returns None, having written nothing, when it cannot decide alone: a message large enough
    to go to the outputs table, or one recorded before (the unique index on (agent_id,
    msg_id) refuses the whole INSERT, which is one statement, so none of its rows stay). The
    caller then reads which messages are new. The rows are numbered after the agent's last
    turn, which nothing else can add in between: the transaction holds SQLite's write lock.
    """
    batch = _all_new_batch(ids, messages, output_threshold)
    if batch is None:
        return None
    params: list[Any] = [agent_id, agent_id, thread_id]
    for mid, (role, dtype, data) in batch.items():
        params += (mid, role, dtype, data)
    try:
        tx.run(_sqlite_insert(len(batch)), params)
    except sqlite3.IntegrityError as exc:
        # Only a message recorded already sends the batch to the reading path: the numbers
        # cannot collide under the write lock, so any other refusal is a fault to report.
        if "recall_turns.msg_id" not in str(exc):
            raise
        return None
    return len(batch)


# record_pg's statement, in parts: the agent row's count moves by the batch (its upsert is what
# makes two recorders of one agent take turns), and the batch is numbered after it.
_PG_BUMP = _bumped("turn_seq")
_PG_INSERT = (
    "ins AS (INSERT INTO recall_turns (agent_id, seq, msg_id, thread_id, role, dtype, "
    "data, size, output_ref, created_at) SELECT ?, ag.turn_seq - ? + i.ord, i.msg_id, "
    "?, i.role, i.dtype, i.data, octet_length(i.data), NULL, {now} FROM "
)
_PG_ROWS = " AS i(msg_id, role, dtype, data, ord) CROSS JOIN ag RETURNING 1)"
# A batch as arrays, one per column: one statement text for any size.
_PG_ARRAYS = (
    "unnest(CAST({b} AS TEXT[]), CAST({b} AS TEXT[]), CAST({b} AS TEXT[]), "
    "CAST({b} AS BYTEA[])) WITH ORDINALITY"
)
# Up to this many messages (a chat turn's) go as VALUES rows instead: the server unpacks no
# arrays, which saved 35 to 40 us of a run's end with 2 messages here, for one statement text
# (and one prepared statement per connection) per size.
_PG_VALUES_MAX = 4
_pg_turns: dict[int, str] = {}


def _pg_turns_part(n: int) -> str:
    """record_pg's insert of ``n`` messages: the CTE ``ins``, reading the agent's count from
    the CTE ``ag``."""
    part = _pg_turns.get(n)
    if part is None:
        if n <= _PG_VALUES_MAX:
            rows = ", ".join(f"(?, ?, ?, CAST({{b}} AS BYTEA), {k})" for k in range(1, n + 1))
            source = f"(VALUES {rows})"
        else:
            source = _PG_ARRAYS
        part = _pg_turns[n] = _PG_INSERT + source + _PG_ROWS
    return part


# record_pg takes every message it is given as new, and a message recorded before makes it hand
# the whole batch to the locking path: right for a run's new messages (the recorder hands over
# at most 64 at a time, each recorded once), wasteful for a long history that is mostly
# recorded already, which goes to the locking path at once.
ONE_STATEMENT_MAX = 256


def record_pg(
    tx: Tx,
    agent_id: str,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str | None,
    output_threshold: int,
    release: tuple[str, int] | None = None,
) -> int | None:
    """PostgreSQL: ``record`` as ONE statement, run outside a transaction (it commits alone).

    ``record`` takes six round trips there (BEGIN, the agent row, the ids already recorded,
    the sequence numbers, the rows, COMMIT), each a pool checkout and a wait on the server.
    Here the messages go as arrays (a short batch as VALUES rows), all taken as new: the
    agent's count moves by their number and they are numbered after it, all or nothing.

    Returns None, having written nothing, when this statement cannot decide alone: a message
    large enough to go to the outputs table, or a message recorded already (a history sent
    again, or a concurrent recorder of the same agent that got there first; the unique index
    on (agent_id, msg_id) then refuses the whole statement). The caller then runs ``record``,
    which locks the agent row and reads which messages are new before it writes.

    The statement reads no recorded turn. It used to skip recorded messages itself, with an
    index probe per message; a generic plan of that probe, made while the table was small or
    never analyzed (autovacuum off), read the agent's whole history per message (2.5 ms a
    message at 5.7k turns), so it had to be planned afresh on every call (0.17 ms). Without
    the probe there is no plan to get wrong, psycopg may prepare it, and a batch of 42 new
    messages costs 0.83 ms instead of 1.11 ms here.

    ``release=(holder, epoch)``: the same statement also gives that lease up (``end_run``),
    and records only if it did; returns -1 when the lease was no longer that holder's.
    """
    import psycopg

    if not messages:
        return 0
    ids = _message_ids(messages)
    batch = _all_new_batch(ids, messages, output_threshold)
    if batch is None:
        return None
    check_agent_id(agent_id)
    values = list(batch.values())
    rows: tuple[Any, ...] = (agent_id, len(batch), thread_id)
    if len(batch) <= _PG_VALUES_MAX:
        for mid, (role, dtype, data) in batch.items():
            rows += (mid, role, dtype, data)
    else:
        rows += (
            list(batch),
            [v[0] for v in values],
            [v[1] for v in values],
            [v[2] for v in values],
        )
    turns = _pg_turns_part(len(batch))
    try:
        if release is None:
            row = tx.one(
                "WITH ag AS (INSERT INTO recall_agents (agent_id, created_at, last_activity, "
                "turn_seq, revision_seq, action_seq) VALUES (?, {now}, {now}, ?, 0, 0) "
                f"{_PG_BUMP}), {turns} SELECT count(*) FROM ins",
                (agent_id, len(batch), *rows),
            )
        else:
            row = tx.one(
                # The lease goes first. No row from it (another holder's now) leaves the agent
                # row and the turns untouched: that holder's catch-up records them, in order.
                "WITH rel AS (UPDATE recall_leases SET expires_at = 0 WHERE agent_id = ? AND "
                "holder = ? AND epoch = ? RETURNING 1), "
                "ag AS (INSERT INTO recall_agents (agent_id, created_at, last_activity, "
                "turn_seq, revision_seq, action_seq) SELECT ?, {now}, {now}, ?, 0, 0 FROM rel "
                f"{_PG_BUMP}), {turns} "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM rel) THEN (SELECT count(*) FROM ins) "
                "ELSE -1 END",
                (agent_id, release[0], release[1], agent_id, len(batch), *rows),
            )
    except psycopg.errors.UniqueViolation as exc:
        # A message of the batch is recorded already (sent again, or by a concurrent recorder
        # that got there first): nothing of ours was written (one statement), and the locking
        # path sorts it out. Only that: the numbers cannot collide (the agent row's lock
        # orders recorders), so any other violation is a fault to report, not to hide behind
        # the slower path.
        if exc.diag.constraint_name != "recall_turns_msg":
            raise
        return None
    assert row is not None
    return int(row[0])


_TURN_COLS = "agent_id, seq, msg_id, role, dtype, data, thread_id, created_at, output_ref, size"


def _turn(tx: Tx, r: Sequence[Any], *, resolve_outputs: bool) -> Turn:
    msg = loads_typed(r[4], r[5])
    if r[8] and resolve_outputs:
        msg = msg.model_copy(update={"content": fetch_output(tx, r[8])})
    return Turn(
        agent_id=r[0],
        seq=int(r[1]),
        msg_id=r[2],
        role=r[3],
        message=msg,
        thread_id=r[6],
        created_at=r[7],
        output_ref=r[8],
        size=int(r[9]),
    )


def turns(
    tx: Tx,
    agent_id: str,
    last: int | None,
    *,
    resolve_outputs: bool = True,
    before: int | None = None,
) -> list[Turn]:
    """Turns oldest first; with ``last`` only the newest N, read backwards on the primary key."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
        # Checked here: SQLite reads a negative LIMIT as none, PostgreSQL refuses it.
        raise RecallError(
            f"last must be a non-negative int (the number of newest turns) or None for all, "
            f"got {last!r}",
            code="invalid_value",
        )
    cond = "agent_id = ?"
    params: list[Any] = [agent_id]
    if before is not None:
        cond += " AND seq < ?"
        params.append(before)
    if last is None:
        rows = tx.all(f"SELECT {_TURN_COLS} FROM recall_turns WHERE {cond} ORDER BY seq", params)
    else:
        rows = tx.all(
            f"SELECT {_TURN_COLS} FROM recall_turns WHERE {cond} ORDER BY seq DESC LIMIT ?",
            [*params, last],
        )
        rows.reverse()
    return [_turn(tx, r, resolve_outputs=resolve_outputs) for r in rows]


def turn_page(
    tx: Tx,
    agent_id: str,
    limit: int,
    *,
    before: int | None = None,
    skip_ids: Container[str] = (),
) -> tuple[list[TurnView], int | None]:
    """Up to ``limit`` turns before seq ``before``, newest first, as ``TurnView``s (fields as
    recorded, large outputs left as references).

    Rows whose msg_id is in ``skip_ids`` are read but never decoded. Returns the views and the
    seq to pass as ``before`` for the next page (None once the oldest turn has been read).
    """
    cond = "agent_id = ?"
    params: list[Any] = [agent_id]
    if before is not None:
        cond += " AND seq < ?"
        params.append(before)
    rows = tx.all(
        "SELECT seq, msg_id, role, dtype, data, output_ref, size FROM recall_turns "
        f"WHERE {cond} ORDER BY seq DESC LIMIT ?",
        [*params, int(limit)],
    )
    out = [
        TurnView(int(r[0]), r[1], r[2], loads_fields(r[3], r[4]), r[5], int(r[6]))
        for r in rows
        if r[1] not in skip_ids
    ]
    lowest = int(rows[-1][0]) if rows else 1
    return out, (lowest if len(rows) == int(limit) and lowest > 1 else None)


# --- working state and pointers ----------------------------------------------------------------

STATE_NS = "state"
POINTER_NS = "pointers"
OUTPUT_NS = "outputs"


# Kinds under ("recall", <agent>, kind) that the records keep themselves: their items are views
# of the journals (the working state of its revisions) or markers the checkpointer relies on (the
# thread noted at a run's start, the turns already submitted). A plain put or delete there would
# change them without a revision or undo a guarantee, so BaseStore writes are refused; get and
# search read them. Memories and any other kind stay plain items.
RECORD_KINDS: dict[str, str] = {
    STATE_NS: "store.update_working_state(agent_id, field=...) or store.milestone(agent_id, text)",
    POINTER_NS: "store.set_pointer(agent_id, name, target)",
    OUTPUT_NS: "store.put_output(agent_id, text) (outputs are kept as written)",
    "runs": "nothing: the checkpointer writes it at each run's start",
    "submitted_turns": "nothing: the checkpointer writes it for each configurable['turn_id']",
}


def refuse_record_write(namespace: tuple[str, ...], key: str, delete: bool) -> None:
    """Raise ``invalid_namespace`` for a BaseStore put or delete of a record's own item."""
    if len(namespace) != 3 or namespace[0] != "recall" or namespace[2] not in RECORD_KINDS:
        return
    what = "delete" if delete else "put"
    raise InvalidNamespace(
        f"{namespace!r} holds an agent's records, which a plain {what} would change without a "
        f"trace (key {key!r}); they are read with get and search, and written with "
        f"{RECORD_KINDS[namespace[2]]}. Keep your own items (memories, notes) in another "
        'namespace, e.g. ("recall", <agent>, "memories").',
        namespace=list(namespace),
        key=key,
    )


def agent_label(agent_id: str) -> str:
    """The agent id as one namespace label: "." (the label separator) and "%" are escaped,
    so agent ``x.y`` cannot read or shadow the items of agent ``x``."""
    return agent_id.replace("%", "%25").replace(".", "%2E")


def agent_ns(agent_id: str, kind: str) -> tuple[str, ...]:
    """Where an agent's working state, pointers, outputs and memories live as store items."""
    return ("recall", agent_label(agent_id), kind)


# The records' own items (working state, pointers, the thread marker): written without a TTL.
_ITEM_UPSERT = (
    "INSERT INTO recall_items (prefix, key, value, body, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, {now}, {now}) ON CONFLICT (prefix, key) DO UPDATE SET "
    "value = excluded.value, body = excluded.body, updated_at = excluded.updated_at"
)


def _put_item(
    tx: Tx,
    namespace: tuple[str, ...],
    key: str,
    value: dict[str, Any],
    *,
    searchable: bool = True,
) -> None:
    from ._items import body_text, encode_ns

    body = body_text(value, None) if searchable else ""
    tx.run(_ITEM_UPSERT, (encode_ns(namespace), key, dump_json(value), body))


def _get_item(tx: Tx, namespace: tuple[str, ...], key: str) -> dict[str, Any] | None:
    from ._items import encode_ns

    row = tx.one(
        "SELECT value FROM recall_items WHERE prefix = ? AND key = ?", (encode_ns(namespace), key)
    )
    return None if row is None else load_json(row[0])


def switch_thread(tx: Tx, agent_id: str, thread_id: str) -> str | None:
    """Note that the agent runs on ``thread_id`` now; returns the thread noted before, if other.

    The note is the item ``("recall", <agent>, "runs") / "thread"``, not searchable (as a
    ``put`` with ``index=False``). SQLite: a read and an upsert in the caller's write
    transaction. PostgreSQL: one autocommitted statement (its CTEs all see the row as it was
    before the upsert), one round trip instead of three.
    """
    from ._items import encode_ns

    ns = agent_ns(agent_id, "runs")
    note = {"thread_id": thread_id}
    if tx.dialect == "postgres":
        prefix = encode_ns(ns)
        row = tx.one(
            "WITH old AS (SELECT value FROM recall_items WHERE prefix = ? AND key = 'thread'), "
            f"up AS ({_ITEM_UPSERT} WHERE recall_items.value IS DISTINCT FROM excluded.value) "
            "SELECT (SELECT value FROM old)",
            (prefix, prefix, "thread", dump_json(note), ""),
        )
        before = load_json(row[0]) if row is not None and row[0] is not None else None
    else:
        before = _get_item(tx, ns, "thread")
        if before != note:
            _put_item(tx, ns, "thread", note, searchable=False)
    noted = None if before is None else before.get("thread_id")
    previous = None if noted is None else str(noted)
    return previous if previous != thread_id else None


def remember_turn(tx: Tx, agent_id: str, turn_id: str, thread_id: str) -> None:
    """Note that ``turn_id`` was submitted on ``thread_id``: not searchable, never expiring (a
    TTL would let a late resubmission run again)."""
    _put_item(
        tx,
        agent_ns(agent_id, "submitted_turns"),
        turn_id,
        {"thread_id": thread_id},
        searchable=False,
    )


def _revise(tx: Tx, agent_id: str, kind: str, name: str | None, data: dict[str, Any]) -> None:
    seq = bump(tx, agent_id, "revision_seq", 1)
    tx.run(
        "INSERT INTO recall_revisions (agent_id, seq, kind, name, data, created_at) "
        "VALUES (?, ?, ?, ?, ?, {now})",
        (agent_id, seq, kind, name, dump_json(data, what=f"{kind} fields")),
    )


def working_state(tx: Tx, agent_id: str) -> dict[str, Any]:
    return _get_item(tx, agent_ns(agent_id, STATE_NS), "current") or {}


def update_working_state(tx: Tx, agent_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Append a revision and return the merged view (a field set to None is removed)."""
    if not fields:
        return working_state(tx, agent_id)
    _revise(tx, agent_id, "state", None, fields)
    merged = working_state(tx, agent_id)
    for k, v in fields.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    _put_item(tx, agent_ns(agent_id, STATE_NS), "current", merged)
    # As stored (a datetime becomes its ISO text): what working_state() will answer, not the
    # objects given, which a caller could otherwise mistake for what was kept.
    return load_json(dump_json(merged))


def milestone(tx: Tx, agent_id: str, text: str) -> dict[str, Any]:
    if not isinstance(text, str) or not text.strip():
        raise RecallError("a milestone needs some text", code="invalid_value")
    _revise(tx, agent_id, "milestone", None, {"text": text})
    merged = working_state(tx, agent_id)
    merged["last_milestone"] = text
    _put_item(tx, agent_ns(agent_id, STATE_NS), "current", merged)
    return merged


def revisions(tx: Tx, agent_id: str) -> list[tuple[int, str, str | None, dict[str, Any], float]]:
    rows = tx.all(
        "SELECT seq, kind, name, data, created_at FROM recall_revisions WHERE agent_id = ? "
        "ORDER BY seq",
        (agent_id,),
    )
    return [(int(r[0]), r[1], r[2], load_json(r[3]), r[4]) for r in rows]


def set_pointer(tx: Tx, agent_id: str, name: str, target: str, note: str | None) -> Pointer:
    if not isinstance(name, str) or not name.strip():
        raise RecallError("a pointer needs a name", code="invalid_value")
    if not isinstance(target, str) or not target.strip():
        given = "" if isinstance(target, str) else f", got {type(target).__name__} {target!r}"
        raise RecallError(
            f"pointer {name!r} needs a target as text (a path, URL, branch...){given}",
            code="invalid_value",
        )
    data = {"name": name, "target": target, "note": note}
    _revise(tx, agent_id, "pointer", name, data)
    _put_item(tx, agent_ns(agent_id, POINTER_NS), name, data)
    return Pointer(name=name, target=target, note=note)


def pointers(tx: Tx, agent_id: str) -> dict[str, Pointer]:
    from ._items import encode_ns

    rows = tx.all(
        "SELECT value FROM recall_items WHERE prefix = ? ORDER BY key",
        (encode_ns(agent_ns(agent_id, POINTER_NS)),),
    )
    out: dict[str, Pointer] = {}
    for (v,) in rows:
        d = load_json(v)
        out[d["name"]] = Pointer(d["name"], d["target"], d.get("note"))
    return out


# --- outputs ---------------------------------------------------------------------------------


def put_output(tx: Tx, agent_id: str, content: str) -> str:
    """Store content whole; the reference is derived from agent and content (stored once)."""
    data = content.encode("utf-8", "surrogatepass")
    ref = "out-" + hashlib.sha256(agent_id.encode() + b"\0" + data).hexdigest()[:16]
    inserted = tx.run(
        "INSERT INTO recall_outputs (ref, agent_id, size, data, created_at) "
        "VALUES (?, ?, ?, ?, {now}) ON CONFLICT (ref) DO NOTHING",
        (ref, agent_id, len(content), data),
    )
    if inserted:
        # The preview is a JSON item: NUL and lone surrogates, which the output itself keeps
        # exactly, would make it (and the whole record() call) fail, so they are replaced.
        preview = content[:200].replace("\x00", "\ufffd").encode("utf-8", "replace").decode()
        _put_item(
            tx,
            agent_ns(agent_id, OUTPUT_NS),
            ref,
            {"ref": ref, "size": len(content), "preview": preview},
        )
    return ref


def fetch_output(tx: Tx, ref: str, offset: int = 0, length: int | None = None) -> str:
    row = tx.one("SELECT data FROM recall_outputs WHERE ref = ?", (ref,))
    if row is None:
        raise RecallError(
            f"no output {ref!r} is recorded; use a reference exactly as the briefing shows it",
            code="unknown_output",
        )
    text = bytes(row[0]).decode("utf-8", "surrogatepass")
    offset = max(0, int(offset))
    return text[offset:] if length is None else text[offset : offset + max(0, int(length))]


# --- leases ----------------------------------------------------------------------------------


def lease(tx: Tx, agent_id: str) -> Lease | None:
    row = tx.one(
        "SELECT agent_id, holder, epoch, expires_at FROM recall_leases WHERE agent_id = ?",
        (agent_id,),
    )
    return None if row is None else Lease(row[0], row[1], int(row[2]), float(row[3]))


def acquire_lease(tx: Tx, agent_id: str, holder: str, ttl: float) -> Lease:
    """Take the lease if it is free, expired or already ours, in one conditional statement.

    The epoch grows whenever the holder changes: it is the fencing token written with every
    checkpoint, so a holder that was frozen past its expiry can be told apart from the new one.
    It grows too when a holder id takes its own lease while that lease is still live: one
    process never does (its runs of an agent take turns, each releasing first), so that is
    another process given the same ``holder=`` (a worker restarted under its name). It takes
    over at once, but the old one, if it still runs or is only frozen, is fenced out: with the
    epoch kept, both acted and the old one's late writes landed.
    """
    check_agent_id(agent_id)
    row = tx.one(
        "INSERT INTO recall_leases (agent_id, holder, epoch, expires_at, acquired_at) "
        "VALUES (?, ?, 1, {now} + ?, {now}) ON CONFLICT (agent_id) DO UPDATE SET "
        "epoch = CASE WHEN recall_leases.holder = excluded.holder "
        "AND recall_leases.expires_at <= {now} THEN recall_leases.epoch "
        "ELSE recall_leases.epoch + 1 END, holder = excluded.holder, "
        "expires_at = excluded.expires_at, acquired_at = excluded.acquired_at "
        "WHERE recall_leases.expires_at <= {now} OR recall_leases.holder = excluded.holder "
        "RETURNING agent_id, holder, epoch, expires_at",
        (agent_id, holder, float(ttl)),
    )
    if row is None:
        current = lease(tx, agent_id)
        assert current is not None
        left = max(0.0, current.expires_at - time.time())
        raise LeaseHeld(
            f"agent {agent_id!r} is being run by {current.holder} (lease epoch {current.epoch}, "
            f"expires in {left:.1f}s); nothing ran here. Wait for it to finish, pass wait= to "
            "queue, or run a different agent_id.",
            agent_id=agent_id,
            holder=current.holder,
            expires_at=current.expires_at,
            epoch=current.epoch,
        )
    return Lease(row[0], row[1], int(row[2]), float(row[3]))


def renew_lease(tx: Tx, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
    # Not a released lease (expires_at 0): the renewer picks its leases, then renews them
    # outside its lock, so a run that ended in between would otherwise have its lease held
    # again, by nobody, for a whole ttl, and the next process would wait that long.
    return bool(
        tx.run(
            "UPDATE recall_leases SET expires_at = {now} + ? WHERE agent_id = ? AND holder = ? "
            "AND epoch = ? AND expires_at > 0",
            (float(ttl), agent_id, holder, epoch),
        )
    )


def release_lease(tx: Tx, agent_id: str, holder: str, epoch: int) -> bool:
    # The row stays (expired) so the epoch keeps growing across holders.
    return bool(
        tx.run(
            "UPDATE recall_leases SET expires_at = 0 WHERE agent_id = ? AND holder = ? AND epoch = ?",
            (agent_id, holder, epoch),
        )
    )
