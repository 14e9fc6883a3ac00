"""The agent's turns: every message of every run, recorded once, in order.

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
import operator
import sqlite3
from collections.abc import Container, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from .._errors import RecallError
from ._codec import dumps_typed, loads_fields, loads_typed
from ._db import Tx
from ._models import Turn, TurnView
from ._records import bump, bumped, check_agent_id, fetch_output, put_output, touch_agent


def content_text(content: Any) -> str:
    """The text of a message's content (a string, or a list of content blocks)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") in ("image", "image_url"):
            parts.append("<image>")
    return " ".join(parts)


def output_text(message: BaseMessage, output_threshold: int) -> str | None:
    """The text to keep as an output of its own instead of in the turn, or None.

    A string content over the threshold, and a tool result given as content blocks whose text
    is: such a result (a page fetched, a file read) is as long as a string one, and kept whole
    in the turn it was read by every briefing that decoded the turn. Its blocks are kept as
    their text (``content_text``). An AI message's blocks stay in the turn: a replay of the
    recorded replies needs them as they were.
    """
    content = message.content
    if isinstance(content, str):
        return content if len(content) > output_threshold else None
    if message.type != "tool" or not all(map(_plain_text_block, content)):
        # Blocks beside text (an image, a file) are not text: kept in the turn as they are, or
        # the output (its text alone) would be all the records hold of them.
        return None
    text = content_text(content)
    return text if len(text) > output_threshold else None


def _plain_text_block(block: Any) -> bool:
    """A string, or a text block holding nothing but its text (its text is all of it)."""
    if isinstance(block, str):
        return True
    return isinstance(block, dict) and block.get("type") == "text" and set(block) <= _TEXT_KEYS


_TEXT_KEYS = frozenset({"type", "text", "id"})


def message_id(message: BaseMessage, thread_id: str | None, position: int) -> str:
    """The message's own id, or a stable key made from its content, its thread and its
    position in that thread's messages channel.

    The position is what tells two identical id-less messages apart ("ok" said twice), and
    it is the same each time the message is looked at, whatever else is sent with it: the
    occurrence within one call, used before, changed with where the call started, so a hook
    sending only the new messages recorded the second "ok" never, or the first twice.
    """
    if message.id:
        return str(message.id)
    _, data = dumps_typed(message)
    where = f"{thread_id or ''}\0{position}\0".encode()
    return f"h-{hashlib.sha256(where + data).hexdigest()[:24]}"


_ID = operator.attrgetter("id")


def own_ids(messages: Sequence[Any]) -> list[Any] | None:
    """Each message's own id (None where it has none), fetched in C: the passes over a whole
    conversation (10k messages and more) that a hook or a run's start makes cost a fraction of
    a microsecond a message this way, several in Python. None when one is not a message."""
    try:
        return list(map(_ID, messages))
    except AttributeError:  # a dict or other non-message in the channel: nothing to go by
        return None


def with_stable_ids(messages: Sequence[Any], thread_id: str | None, start: int = 0) -> list[Any]:
    """``messages`` (found at ``start`` of the thread's messages channel) with each id-less
    message replaced by a copy named by ``message_id``. Messages with an id are kept as they
    are (the same objects), so the usual list, all ids, costs one pass."""
    out = list(messages)
    for i, m in enumerate(out):
        if isinstance(m, BaseMessage) and not m.id:
            out[i] = m.model_copy(update={"id": message_id(m, thread_id, start + i)})
    return out


def _message_ids(messages: Sequence[BaseMessage], thread_id: str | None) -> list[str]:
    """Each message's id (own, or ``message_id``'s key with its place in this call as its
    position), checking that they are messages."""
    ids: list[str] = []
    for position, m in enumerate(messages):
        if not isinstance(m, BaseMessage):
            raise RecallError(
                f"record() takes LangChain messages, got {type(m).__name__}; convert with "
                "langchain_core.messages.convert_to_messages first",
                code="invalid_value",
            )
        ids.append(message_id(m, thread_id, position))
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
    ids = _message_ids(messages, thread_id)
    check_agent_id(agent_id)
    if tx.dialect == "sqlite" and len(ids) <= _SQLITE_ONE_INSERT_MAX:
        done = _record_new_sqlite(tx, agent_id, ids, messages, thread_id, output_threshold)
        if done is not None:
            return done
    if tx.dialect == "postgres":
        # The agent row's lock before the read: concurrent recorders of one agent then read
        # which ids are new one after the other. (SQLite's write transaction already does.)
        touch_agent(tx, agent_id)
    existing = recorded_ids(tx, agent_id, ids)
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
        content = output_text(m, output_threshold)
        stored = m
        if content is not None:
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


def recorded_ids(tx: Tx, agent_id: str, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the agent has recorded (an index lookup each, no turn decoded)."""
    check_agent_id(agent_id, write=False)
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
    return existing


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
        if output_text(m, output_threshold) is not None:
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
_PG_BUMP = bumped("turn_seq")
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
    ids = _message_ids(messages, thread_id)
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
    check_agent_id(agent_id, write=False)
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
    check_agent_id(agent_id, write=False)
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
