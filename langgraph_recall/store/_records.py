"""The agent's journal: agents, working state, milestones, pointers and outputs (turns are in
``_transcript``, leases in ``_leases``, actions and approvals in ``_actions``).

Every function takes an open ``Tx`` and is written once for both engines. Anything that decides
on what it read runs in a write transaction, which is ``BEGIN IMMEDIATE`` on SQLite and relies
on a primary key or a single conditional statement on PostgreSQL, so two processes can never
both win.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from .._errors import InvalidNamespace, RecallError
from ._codec import dump_json, load_json
from ._db import Tx
from ._ids import check_id
from ._models import AgentInfo, Pointer

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


def check_agent_id(agent_id: Any, *, write: bool = True) -> str:
    """``agent_id`` if records may be written (``write``) or read under it, else
    ``invalid_value`` saying why (``_ids``: the one rule for identifiers). Only writes check
    blanks and length: an agent recorded before a rule was added stays readable (``show``,
    ``turns``) under the id it has."""
    return check_id("agent_id", agent_id, write=write, hint=AGENT_HINT if write else AGENTS_HINT)


AGENTS_HINT = "store.agents(), or `langgraph-recall agents`, lists the agents with records"
TURN_HINT = 'name the turn, e.g. {"configurable": {"thread_id": "t-1", "turn_id": "msg-42"}}'
AGENT_HINT = (
    'pass the agent\'s name, e.g. {"configurable": {"thread_id": "t-1", "agent_id": "billing"}}'
)


def bump(tx: Tx, agent_id: str, column: str, n: int) -> int:
    """Reserve ``n`` numbers of the agent's ``column``; returns the first. One statement that
    also creates the agent row if needed and marks it active (as ``touch_agent``), and on
    PostgreSQL takes its lock, which is what hands the numbers out without gaps or doubles."""
    check_agent_id(agent_id)
    row = tx.one(
        "INSERT INTO recall_agents (agent_id, created_at, last_activity, turn_seq, revision_seq, "
        f"action_seq) VALUES (?, {{now}}, {{now}}, {_SEQ_START[column]}) {bumped(column)}",
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


def bumped(column: str) -> str:
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
    check_agent_id(agent_id, write=False)
    return tx.one("SELECT 1 FROM recall_agents WHERE agent_id = ?", (agent_id,)) is not None


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
    from ._items import body_text, encode_ns, search_body

    body = search_body(body_text(value, None), tx.dialect) if searchable else ""
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

    check_agent_id(agent_id)
    check_id("thread_id", thread_id, hint="pass the thread's id as LangGraph takes it")
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
    check_id("turn_id", turn_id, hint=TURN_HINT)
    _put_item(
        tx,
        agent_ns(agent_id, "submitted_turns"),
        turn_id,
        {"thread_id": thread_id},
        searchable=False,
    )


def _revise(tx: Tx, agent_id: str, kind: str, name: str | None, data: dict[str, Any]) -> None:
    _add_revision(tx, agent_id, bump(tx, agent_id, "revision_seq", 1), kind, name, data)


def _add_revision(
    tx: Tx, agent_id: str, seq: int, kind: str, name: str | None, data: dict[str, Any]
) -> None:
    tx.run(
        "INSERT INTO recall_revisions (agent_id, seq, kind, name, data, created_at) "
        "VALUES (?, ?, ?, ?, ?, {now})",
        (agent_id, seq, kind, name, dump_json(data, what=f"{kind} fields")),
    )


def working_state(tx: Tx, agent_id: str) -> dict[str, Any]:
    check_agent_id(agent_id, write=False)
    return _get_item(tx, agent_ns(agent_id, STATE_NS), "current") or {}


#: The revision name of a working-state update that started a fresh state (a new task).
FRESH_STATE = "new_task"


def starts_fresh(current: dict[str, Any], fields: dict[str, Any], new_task: bool | None) -> bool:
    """Whether an update replaces the working state instead of merging into it.

    ``new_task`` None (the default) decides by the goal: a ``goal`` that replaces another
    one starts a new task, whose state must not carry the last task's progress, plan or
    milestone (a resumed model read "progress: R-16 done" beside its new goal and took the new
    task as half done). A first goal merges: what was noted before it is about this task. True
    always starts fresh; False always merges.
    """
    if new_task is not None:
        return new_task
    goal, before = fields.get("goal"), current.get("goal")
    return goal is not None and before is not None and goal != before


def update_working_state(
    tx: Tx, agent_id: str, fields: dict[str, Any], new_task: bool | None = None
) -> dict[str, Any]:
    """Append a revision and return the new view: the fields merged into the current state, or
    alone when the update starts a new task (``starts_fresh``); a field set to None is removed.
    The replaced state stays in the revisions (records are append-only)."""
    if new_task is not None and not isinstance(new_task, bool):
        raise RecallError(
            f"new_task is True, False or None (decide by the goal), got {new_task!r}",
            code="invalid_value",
        )
    if not fields and not new_task:
        return working_state(tx, agent_id)
    # The revision's number first: it locks the agent's row, so a concurrent update (or
    # milestone) of the same agent commits before this one reads the state it builds on. Read
    # first, two updates both built on the state before either and the later one dropped the
    # other's fields.
    seq = bump(tx, agent_id, "revision_seq", 1)
    current = working_state(tx, agent_id)
    fresh = starts_fresh(current, fields, new_task)
    _add_revision(tx, agent_id, seq, "state", FRESH_STATE if fresh else None, fields)
    merged = {} if fresh else current
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
    check_agent_id(agent_id, write=False)
    rows = tx.all(
        "SELECT seq, kind, name, data, created_at FROM recall_revisions WHERE agent_id = ? "
        "ORDER BY seq",
        (agent_id,),
    )
    return [(int(r[0]), r[1], r[2], load_json(r[3]), r[4]) for r in rows]


def set_pointer(tx: Tx, agent_id: str, name: str, target: str, note: str | None) -> Pointer:
    check_id("pointer name", name, hint="name the pointer, e.g. 'repo' or 'design-doc'")
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

    check_agent_id(agent_id, write=False)
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
    check_id("ref", ref, write=False, hint="use a reference exactly as the briefing shows it")
    row = tx.one("SELECT data FROM recall_outputs WHERE ref = ?", (ref,))
    if row is None:
        hint = "use a reference exactly as the briefing shows it"
        if ref.startswith("turn-"):
            # The briefing's name for a turn it cut: an agent's turn, not a stored output.
            hint = (
                "a turn-<seq> ref names one of an agent's turns, not an output: the "
                "fetch_output recall tool reads it in the agent's run; here, "
                "store.turns(agent_id) holds it"
            )
        raise RecallError(f"no output {ref!r} is recorded; {hint}", code="unknown_output")
    text = bytes(row[0]).decode("utf-8", "surrogatepass")
    offset = max(0, int(offset))
    return text[offset:] if length is None else text[offset : offset + max(0, int(length))]
