"""The agent's actions (one row per attempt: the intent, then its end); approvals are in
``_approvals``.

Every function takes an open ``Tx`` and is written once for both engines. A claim and a spend
decide on what they read, so they run in a write transaction (``BEGIN IMMEDIATE`` on SQLite)
or rely on a primary key or a single conditional statement (PostgreSQL): two processes can
never both win.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ApprovalMismatch, LeaseHeld, RecallError
from ._codec import dumps_typed, loads_record, loads_typed
from ._db import Tx
from ._ids import check_id
from ._models import Action, CallRecord, Claim
from ._records import bump, check_agent_id

# --- actions ---------------------------------------------------------------------------------

_ACTION_COLS = (
    "a.action_id, a.agent_id, a.tool, a.klass, a.args_type, a.args, a.args_digest, "
    "a.idempotency_key, a.attempt, a.created_at, a.thread_id, a.outcome, a.result_type, a.result, "
    "a.error, a.note, a.resolved_by, a.ended_at, a.planned, a.started_at"
)


def action_key(agent_id: str, ai_message_id: str, tool_call_id: str, tool: str) -> str:
    """The id of one tool call, stable across crashes and resumes (32 hex characters): what
    the durable tool node claims it under, and what the briefing looks its outcome up by."""
    h = hashlib.sha256(b"recall-action-v1")
    for part in (agent_id, ai_message_id, tool_call_id, tool):
        data = part.encode("utf-8", "surrogatepass")
        # Length-prefixed, so no choice of ids can make two different calls share a key.
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:32]


def action_of(r: Sequence[Any]) -> Action:
    result = loads_record(r[12], r[13]) if r[12] is not None and r[13] is not None else None
    # Every field set at once in the instance's dict: a frozen dataclass's __init__ sets its
    # 16 fields one object.__setattr__ at a time (1.9 µs against 0.3 here), a tenth of a
    # repeat lookup that reads the row from the database. The same object, field for field.
    action = _new(Action)
    action.__dict__.update(
        action_id=r[0],
        agent_id=r[1],
        tool=r[2],
        klass=r[3],
        args=loads_typed(r[4], r[5]),
        args_digest=r[6],
        idempotency_key=r[7],
        attempt=int(r[8]),
        status=r[11] or "open",
        created_at=r[9],
        thread_id=r[10],
        result=result,
        error=r[14],
        note=r[15],
        resolved_by=r[16],
        ended_at=r[17],
        # Written ahead (``planned_insert``) and not marked since: its tool never began.
        started=r[18] is None or r[19] is not None,
    )
    return action


_new = object.__new__


def latest_row(tx: Tx, action_id: str) -> Sequence[Any] | None:
    """The action's latest attempt as its row (``_ACTION_COLS``), or None."""
    return tx.one(
        f"SELECT {_ACTION_COLS} FROM recall_actions a WHERE a.action_id = ? "
        "ORDER BY a.attempt DESC LIMIT 1",
        (action_id,),
    )


def latest_action(tx: Tx, action_id: str) -> Action | None:
    row = latest_row(tx, action_id)
    return None if row is None else action_of(row)


def find_action(tx: Tx, action_id: str) -> Action:
    """An action by id or unique id prefix (for people typing ids from the CLI)."""
    check_id("action_id", action_id, write=False, hint=ACTION_HINT)
    found = latest_action(tx, action_id)
    if found is not None:
        return found
    rows = tx.all(
        "SELECT DISTINCT action_id FROM recall_actions WHERE action_id >= ? AND action_id < ? LIMIT 2",
        (action_id, action_id + "\uffff"),
    )
    if len(rows) == 1:
        found = latest_action(tx, rows[0][0])
        assert found is not None
        return found
    if len(rows) > 1:
        raise RecallError(
            f"action id {action_id!r} is ambiguous; give more characters", code="unknown_action"
        )
    raise RecallError(
        f"no action {action_id!r} is recorded; list them with `langgraph-recall actions AGENT`",
        code="unknown_action",
    )


def settled_claim(prev: Action | None, action_id: str, args_digest: str) -> Claim | None:
    """What a claim answers from the action's latest attempt alone; None when a new attempt
    is due (no attempt yet, or the last was abandoned or not done)."""
    if prev is None:
        return None
    if prev.status == "open":
        # Planned and never started: not in doubt; the claim starts it (``insert_attempt``).
        return Claim("in_doubt", prev) if prev.started else None
    if prev.status in ("done", "failed"):
        return Claim(prev.status, prev)
    if prev.resolved_by == NOT_STARTED:
        # A planned attempt closed before its tool ever started (see ``planned_insert``): its
        # key never left this process, so new arguments (a call edited while the run was
        # paused before the tool node) may take the next attempt under it.
        return None
    if prev.args_digest != args_digest:
        raise ApprovalMismatch(
            f"action {action_id} was recorded for other arguments; it will not run with new ones",
            code="approval_mismatch",
        )
    return None


@dataclass(frozen=True, slots=True)
class Intent:
    """One attempt's intent: what a claim records before the tool runs."""

    agent_id: str
    action_id: str
    tool: str
    klass: str
    args: Any
    args_digest: str
    idempotency_key: str
    thread_id: str | None
    epoch: int | None

    def row(self, attempt: int, args_type: str, args_data: bytes, seq: Any) -> tuple[Any, ...]:
        """The insert's parameters, in ``_INSERT_COLS`` order."""
        return (
            self.action_id,
            attempt,
            self.agent_id,
            self.thread_id,
            self.tool,
            self.klass,
            args_type,
            args_data,
            self.args_digest,
            self.idempotency_key,
            self.epoch,
            seq,
        )

    def claimed(
        self, attempt: int, args_type: str, args_data: bytes, created_at: Any, started: bool = True
    ) -> Claim:
        """The claim of the attempt just inserted: all of it is known, nothing is read back."""
        return Claim(
            "claimed",
            Action(
                action_id=self.action_id,
                agent_id=self.agent_id,
                tool=self.tool,
                klass=self.klass,
                args=loads_typed(args_type, args_data),
                args_digest=self.args_digest,
                idempotency_key=self.idempotency_key,
                attempt=attempt,
                status="open",
                created_at=float(created_at),
                thread_id=self.thread_id,
                started=started,
            ),
        )


_INSERT_COLS = (
    "action_id, attempt, agent_id, thread_id, tool, klass, args_type, args, args_digest, "
    "idempotency_key, epoch, seq"
)
# SQLite numbers an agent's attempts inside the insert (its one writer holds the lock).
_SQLITE_NEXT_SEQ = "(SELECT coalesce(max(seq), 0) + 1 FROM recall_actions WHERE agent_id = ?)"


ACTION_HINT = "pass an action id as `langgraph-recall actions AGENT` lists it, or Action.action_id"


def check_intent_ids(intent: Intent) -> None:
    """The identifiers an intent writes (``_ids``), checked before any statement is sent."""
    check_agent_id(intent.agent_id)
    check_id("action_id", intent.action_id, hint=ACTION_HINT)
    check_id("tool", intent.tool, hint="name the tool as the model calls it")
    if intent.thread_id is not None:
        check_id("thread_id", intent.thread_id)


def insert_attempt(tx: Tx, prev: Action | None, intent: Intent) -> Claim:
    """Insert the attempt after ``prev`` (which may have been read before this transaction).

    The primary key (action_id, attempt) decides every race: of the claimers that saw the same
    ``prev``, one inserts and the others conflict, then answer from the attempt that won.
    """
    check_intent_ids(intent)
    args_type, args_data = dumps_typed(intent.args)
    if tx.dialect == "sqlite":
        # SQLite has one writer at a time (the caller's BEGIN IMMEDIATE), so the agent's next
        # number is its highest + 1, read from the (agent_id, seq) index inside the insert: no
        # update of the agent's row, and no page of it rewritten, on every call. The row is
        # created, when missing, by the insert's trigger (recall_actions_agent, schema v3);
        # last_activity moves with the agent's turns.
        seq: Any = intent.agent_id
        seq_sql = _SQLITE_NEXT_SEQ
    else:
        # PostgreSQL writers run at once: the agent row's lock hands the numbers out.
        seq = bump(tx, intent.agent_id, "action_seq", 1)
        seq_sql = "?"
    while True:
        if prev is not None and prev.status == "open":
            # Written ahead and never started (``settled_claim``): this claim takes that very
            # attempt, with the start mark deciding between claimers; planned for other
            # arguments, the attempt is closed unused and the next one is claimed.
            if prev.args_digest == intent.args_digest:
                if start(tx, prev.action_id, prev.attempt):
                    return Claim("claimed", _started(prev))
            else:
                end(
                    tx,
                    prev.action_id,
                    prev.attempt,
                    "not_done",
                    note="planned for other arguments than the call claimed now; never started",
                    resolved_by=NOT_STARTED,
                )
            prev = latest_action(tx, intent.action_id)
            settled = settled_claim(prev, intent.action_id, intent.args_digest)
            if settled is not None:
                return settled
            continue
        attempt = 1 if prev is None else prev.attempt + 1
        inserted = tx.one(
            f"INSERT INTO recall_actions ({_INSERT_COLS}, created_at) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {seq_sql}, {{now}}) "
            "ON CONFLICT (action_id, attempt) DO NOTHING RETURNING created_at",
            intent.row(attempt, args_type, args_data, seq),
        )
        if inserted is not None:
            return intent.claimed(attempt, args_type, args_data, inserted[0])
        # Another claimer inserted this attempt after our read: answer from theirs (it may
        # even have been abandoned since, in which case the next attempt is ours to try).
        prev = latest_action(tx, intent.action_id)
        settled = settled_claim(prev, intent.action_id, intent.args_digest)
        if settled is not None:
            return settled


# ``resolved_by`` of a planned attempt that its run closed before the tool started.
NOT_STARTED = "recall:not-started"

# PostgreSQL: this transaction's COMMIT returns once the server has it in memory (``start``,
# ``end``). set_config(..., true) is SET LOCAL; as a condition on no row, PostgreSQL runs it
# once, before the update (an init plan), whether or not a row matches.
_RELAX_PG = " AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"


def start(tx: Tx, action_id: str, attempt: int, relaxed: bool = False) -> bool:
    """The start mark of a planned attempt: committed before its tool may begin, so that a
    crash before it leaves the call "planned" (never started, safe to run once) and a crash
    after it leaves it in doubt. True when this call marked it; False when the attempt was
    marked or ended already (another claimer took it, or a run-start settle closed it): the
    caller must not run it.

    ``relaxed`` (PostgreSQL): the commit does not wait for the server's disk. A server crash
    (not a client's) within about three ``wal_writer_delay`` (0.6 s by default) of the mark
    can then lose it, and the call reads as planned, never started, though its tool began: a
    resume runs it again under the same key. Only for idempotent tools, for which that is
    what a resume does with one in doubt anyway; an external call's mark always waits.
    """
    relax = _RELAX_PG if relaxed and tx.dialect == "postgres" else ""
    return 0 < tx.run(
        "UPDATE recall_actions SET started_at = {now} WHERE action_id = ? AND attempt = ? "
        "AND outcome IS NULL AND started_at IS NULL AND planned IS NOT NULL" + relax,
        (action_id, attempt),
    )


def _started(action: Action) -> Action:
    marked = _new(Action)
    marked.__dict__.update(action.__dict__, started=True)
    return marked


@dataclass(frozen=True, slots=True)
class Planned:
    """A first attempt written ahead, inside the transaction of the checkpoint that holds the
    AI message asking for it (``store.checkpointer()`` only: the same database)."""

    intent: Intent
    args_type: str
    args_data: bytes
    sql: str  # in the engine's own placeholders (``Database.sql``), for the saver's cursor
    params: tuple[Any, ...]

    def claimed(self, created_at: Any) -> Claim:
        """The planned attempt: claimed by this run, its tool not started (no mark yet)."""
        return self.intent.claimed(1, self.args_type, self.args_data, created_at, started=False)


# PostgreSQL: the agent's next number, from its row (created when missing; ``%s``: a condition
# on the upsert), then attempt 1 of the intent under that number, unless it exists already.
_PG_NUMBER = (
    "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, revision_seq, "
    "action_seq) SELECT ?, {now}, {now}, 0, 0, 1%s ON CONFLICT (agent_id) DO UPDATE SET "
    "last_activity = excluded.last_activity, action_seq = recall_agents.action_seq + 1 "
    "RETURNING action_seq"
)
_PG_INSERT_NUMBERED = (
    f"INSERT INTO recall_actions ({_INSERT_COLS}, created_at, planned) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS INT), ag.action_seq, {now}, %s FROM ag "
    "ON CONFLICT (action_id, attempt) DO NOTHING RETURNING created_at"
)


def planned_insert(render: Any, dialect: str, intent: Intent) -> Planned:
    """The statement that writes ``intent`` as attempt 1, unless the action has one already.

    It returns ``created_at`` when it inserted: only then is the attempt this run's to run;
    a conflict means the action was claimed before (a replay), and the tool node's own claim
    then answers from what is recorded. ``render`` is ``Database.sql``.
    """
    check_intent_ids(intent)
    args_type, args_data = dumps_typed(intent.args)
    values = intent.row(1, args_type, args_data, intent.agent_id)
    if dialect == "sqlite":
        # The same numbering as ``insert_attempt`` (the saver holds the one write lock).
        sql = (
            f"INSERT INTO recall_actions ({_INSERT_COLS}, created_at, planned) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {_SQLITE_NEXT_SEQ}, {{now}}, 1) "
            "ON CONFLICT (action_id, attempt) DO NOTHING RETURNING created_at"
        )
        params: tuple[Any, ...] = values
    else:
        # The agent row's lock hands the number out, as in ``claim_first_pg``.
        sql = f"WITH ag AS ({_PG_NUMBER % ''}) {_PG_INSERT_NUMBERED % '1'}"
        params = (intent.agent_id, *values[:-1])
    return Planned(intent, args_type, args_data, render(sql), params)


def claim_first_pg(tx: Tx, intent: Intent) -> tuple[Claim | None, Sequence[Any] | None]:
    """PostgreSQL: read the action's latest attempt and, if it has none, claim attempt 1, in
    ONE statement (one round trip, for a new call and for a repeat alike).

    Returns (the claim, None) when attempt 1 was inserted; else (None, the latest attempt's row
    as the statement saw it, or None). Run outside a transaction the statement commits on its
    own, so the intent is durable when it returns. The agent upsert, the sequence number and
    the intent are data-modifying parts of the one statement: all or nothing; neither runs when
    an attempt already exists. When a concurrent claimer inserted attempt 1 first, the insert
    does nothing and the statement's snapshot shows no attempt: (None, None), and the caller
    takes the general path, where the primary key settles it as before.
    """
    check_intent_ids(intent)
    args_type, args_data = dumps_typed(intent.args)
    row = tx.one(
        f"WITH prev AS (SELECT {_ACTION_COLS} FROM recall_actions a WHERE a.action_id = ? "
        "ORDER BY a.attempt DESC LIMIT 1), "
        f"ag AS ({_PG_NUMBER % ' WHERE NOT EXISTS (SELECT 1 FROM prev)'}), "
        f"ins AS ({_PG_INSERT_NUMBERED % 'NULL'}) "
        "SELECT (SELECT created_at FROM ins), prev.* FROM (SELECT 1) AS one "
        "LEFT JOIN prev ON TRUE",
        (intent.action_id, intent.agent_id, *intent.row(1, args_type, args_data, None)[:-1]),
    )
    assert row is not None
    if row[0] is None:
        return None, (row[1:] if row[1] is not None else None)
    return intent.claimed(1, args_type, args_data, row[0]), None


END_OUTCOMES = ("done", "failed", "abandoned", "not_done")


def end_statement(
    dialect: str,
    action_id: str,
    attempt: int,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    note: str | None = None,
    resolved_by: str | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The one statement that records an attempt's end (``?`` and ``{now}`` placeholders).

    It sets the end only while the attempt has none: of two enders, the second finds outcome
    set and changes nothing; the table's trigger refuses any other change. The typed NULL keeps
    PostgreSQL from reading a missing result as text.
    """
    rtype, rdata = (None, None) if outcome != "done" else dumps_typed(result)
    blob = "BYTEA" if dialect == "postgres" else "BLOB"
    return (
        "UPDATE recall_actions SET outcome = ?, result_type = ?, "
        f"result = CAST(? AS {blob}), error = ?, note = ?, resolved_by = ?, ended_at = {{now}} "
        "WHERE action_id = ? AND attempt = ? AND outcome IS NULL",
        (outcome, rtype, rdata, error, note, resolved_by, action_id, attempt),
    )


# An UPDATE's RETURNING names the columns unqualified (no alias "a" there).
_RETURNING = " RETURNING " + ", ".join(c.strip()[2:] for c in _ACTION_COLS.split(","))


def end(
    tx: Tx,
    action_id: str,
    attempt: int,
    outcome: str,
    *,
    result: Any = None,
    error: str | None = None,
    note: str | None = None,
    resolved_by: str | None = None,
    ended: list[Sequence[Any]] | None = None,
) -> bool:
    """Record how an attempt ended. Only once, only for an attempt that exists.

    ``ended``: a done or failed end that changed the attempt appends its row as ended there
    (for ``FinishedActions``, once the transaction has committed).
    """
    if outcome not in END_OUTCOMES:
        raise RecallError(
            f"outcome must be one of {END_OUTCOMES}, got {outcome!r}", code="invalid_value"
        )
    sql, params = end_statement(
        tx.dialect, action_id, attempt, outcome, result, error, note, resolved_by
    )
    # A commit that need not wait for the disk (Database.tx's flush_later) on PostgreSQL: the
    # setting, local to this statement's transaction, is read by its COMMIT; the session's own
    # stays as it was for the next statement on this pooled connection (a claim must wait).
    relax = _RELAX_PG if tx.flush_later and tx.dialect == "postgres" else ""
    if ended is not None and outcome in ("done", "failed"):
        row = tx.one(sql + relax + _RETURNING, params)
        if row is not None:
            ended.append(row)
            return True
    elif tx.run(sql + relax, params):
        return True
    if (
        tx.one(
            "SELECT 1 FROM recall_actions WHERE action_id = ? AND attempt = ?", (action_id, attempt)
        )
        is None
    ):
        raise RecallError(
            f"no intent for action {action_id} attempt {attempt}", code="unknown_action"
        )
    return False


def actions(tx: Tx, agent_id: str, open_only: bool) -> list[Action]:
    """Latest attempt of each action, oldest first (open ones: only those without an end)."""
    check_agent_id(agent_id, write=False)
    if open_only:
        # An open attempt is always its action's latest (a new attempt follows an end), and
        # the partial index recall_actions_open holds exactly these rows, in the agent's order
        # (seq is unique per agent: no tie to break, so no sort after the index).
        rows = tx.all(
            f"SELECT {_ACTION_COLS} FROM recall_actions a WHERE a.agent_id = ? AND "
            "a.outcome IS NULL ORDER BY a.seq",
            (agent_id,),
        )
    else:
        rows = tx.all(
            f"SELECT {_ACTION_COLS} FROM recall_actions a WHERE a.agent_id = ? AND "
            "a.attempt = (SELECT MAX(b.attempt) FROM recall_actions b WHERE b.action_id = a.action_id) "
            "ORDER BY a.seq, a.action_id",
            (agent_id,),
        )
    return [action_of(r) for r in rows]


_NO_ACTION = ", ".join(["NULL"] * _ACTION_COLS.count(","))


def call_records(tx: Tx, agent_id: str, action_ids: Sequence[str]) -> dict[str, CallRecord]:
    """The latest attempt and the latest approval decision of each of ``action_ids`` (those
    with neither are left out), in ONE statement: both halves are primary-key or index
    lookups by id, so the cost follows the number of ids asked, never the agent's history.

    The decision is the last place of the action's chain (``_approvals``), read unverified: it
    only words the briefing's line. Nothing runs on it (a spend verifies the whole chain), so a
    forged row can at worst mislabel a call, never authorise one."""
    ids = list(dict.fromkeys(action_ids))
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = tx.all(
        f"SELECT 'a', {_ACTION_COLS}, NULL, NULL FROM recall_actions a WHERE a.action_id IN "
        f"({marks}) AND a.agent_id = ? AND a.attempt = (SELECT MAX(b.attempt) FROM "
        "recall_actions b WHERE b.action_id = a.action_id) "
        f"UNION ALL SELECT 'd', r.action_id, {_NO_ACTION}, r.decision, r.message "
        f"FROM recall_approvals r WHERE r.action_id IN ({marks}) AND r.agent_id = ? AND "
        "r.seq IS NOT NULL AND NOT EXISTS (SELECT 1 FROM recall_approvals d WHERE "
        "d.action_id = r.action_id AND d.seq > r.seq)",
        (*ids, agent_id, *ids, agent_id),
    )
    actions = {r[1]: action_of(r[1:]) for r in rows if r[0] == "a"}
    decisions = {r[1]: (r[-2], r[-1]) for r in rows if r[0] == "d"}
    return {
        i: CallRecord(actions.get(i), *decisions.get(i, (None, None)))
        for i in ids
        if i in actions or i in decisions
    }


def resolve(tx: Tx, action_id: str, outcome: str, note: str | None, by: str) -> Action:
    action = find_action(tx, action_id)
    if action.status != "open":
        raise RecallError(
            f"action {action.action_id} is already {action.status}; only open (in doubt) actions "
            "can be resolved",
            code="not_open",
        )
    if outcome not in ("done", "not_done"):
        raise RecallError("resolve with outcome 'done' or 'not_done'", code="invalid_value")
    _refuse_while_running(tx, action)
    end(tx, action.action_id, action.attempt, outcome, note=note, resolved_by=by)
    found = latest_action(tx, action.action_id)
    assert found is not None
    return found


def _refuse_while_running(tx: Tx, action: Action) -> None:
    """Refuse to settle an open action while its agent's lease is live.

    An open action is in doubt only once the run that claimed it is gone. While a process still
    holds the agent's lease, the call may be executing right now: a person's "not_done" would
    discard its own end when it returns and let the next resume run the call a second time; a
    "done" would record as done a call that may yet fail (and drop its real result). Read in the
    resolve's own write transaction, by the database's clock, as the lease itself is.
    """
    row = tx.one(
        "SELECT holder, epoch, expires_at, expires_at - {now} FROM recall_leases "
        "WHERE agent_id = ? AND expires_at > {now}",
        (action.agent_id,),
    )
    if row is None:
        return
    raise LeaseHeld(
        f"action {action.action_id} ({action.tool}) is open but agent {action.agent_id!r} is "
        f"still being run by {row[0]} (lease epoch {row[1]}, expires in {float(row[3]):.1f}s): "
        "the call may still be running, so nothing was recorded. Wait for that run to end or "
        "its lease to expire, then resolve the action if it is still open.",
        agent_id=action.agent_id,
        holder=row[0],
        epoch=int(row[1]),
        expires_at=float(row[2]),
    )
