"""What became of each durable call the briefing shows: the text after its call, `` -> done``,
`` -> in doubt: ...`` (the wording is a contract: ``docs/briefing-outcomes.md``).

A call shown without its outcome reads as unanswered: a careful model stops, a naive one calls
again under a new key and repeats the side effect. So every call in a shown turn whose records
hold something carries it. The records are looked up for all the shown turns' calls at once,
in one indexed read by action id (``store.call_records``): the cost follows the turns shown,
never the length of the history. On PostgreSQL that read is sent ahead with the briefing's
others (``store._prefetch``) while the shown calls stay the same; a new agent's first briefing,
which borrows another agent's plan, makes it on its own (the ids hash the agent id in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._briefing_lines import RECALL_TOOL_NAMES, cut, one_line, value_text
from .store._actions import NOT_STARTED, action_key
from .store._models import OUTPUT_REF, CallRecord
from .store._transcript import content_text

if TYPE_CHECKING:
    from .store import RecallStore
    from .store._models import Action, TurnView

RESULT_CHARS = 160  # a result or error shown after its call, at most this long
NOTE_CHARS = 120  # a person's or a resolver's note, at most this long

AGAIN = ": call it again if it is still needed"
IN_DOUBT = " -> in doubt: do not call it again; it is settled by a resolver or a person"
IN_DOUBT_IDEMPOTENT = " -> in doubt: do not call it again; it is re-run under its own key on resume"
WAITING = " -> waiting for approval"
# Planned with its AI message, its tool never began (no start mark): not in doubt.
NOT_STARTED_YET = (
    " -> not started yet: it runs once when its tool step runs (on another thread it is "
    "closed as never started)"
)
MISMATCH = " -> refused (approval for other arguments)"

#: turn seq -> tool call id -> the outcome text that follows that call's text.
Outcomes = dict[int, dict[str, str]]


def call_outcomes(store: RecallStore, agent_id: str, turns: Sequence[TurnView]) -> Outcomes:
    """The outcome text of every call in ``turns`` (newest first) that the records know.

    One read for all of them. A call answered by a ToolMessage among ``turns`` needs no
    repeated result ("-> done" is enough there); one whose result is only in its action (it
    was settled later, or its ToolMessage was never checkpointed) shows it.
    """
    answered: dict[str, dict[str, Any]] = {}
    keyed: list[tuple[int, str, str, dict[str, Any] | None]] = []
    for t in turns:  # newest first: a ToolMessage comes before the call it answers
        f = t.fields
        if not isinstance(f, dict) or t.role not in ("ai", "tool"):
            continue
        if t.role == "tool":
            if isinstance(f.get("tool_call_id"), str):
                answered.setdefault(f["tool_call_id"], f)
            continue
        for c in f.get("tool_calls") or ():
            if not isinstance(c, dict) or c.get("name") in RECALL_TOOL_NAMES:
                continue
            call_id = str(c.get("id"))
            # Popped: an older turn that reused the call id is not answered by this message.
            answer = answered.pop(call_id, None)
            action_id = action_key(agent_id, t.msg_id, call_id, str(c.get("name")))
            keyed.append((t.seq, call_id, action_id, answer))
    if not keyed:
        return {}
    records = store.call_records(agent_id, [k[2] for k in keyed])
    found: Outcomes = {}
    for seq, call_id, action_id, answer in keyed:
        text = outcome_text(records.get(action_id), answer)
        if text:
            found.setdefault(seq, {})[call_id] = text
    return found


def outcome_text(record: CallRecord | None, answer: Mapping[str, Any] | None) -> str:
    """What follows a call's text: its outcome as the records have it ("" when they hold
    nothing: a pure tool's call). ``answer``: the fields of its ToolMessage, when shown."""
    action = record.action if record is not None else None
    if action is not None and action.status != "abandoned":
        return _action_outcome(action, answer is not None)
    code = _code(answer)
    if (record is not None and record.decision == "reject") or code == "approval_denied":
        said = _note(record.message if record is not None else None)
        return f" -> refused (rejected by a person{said})"
    if code == "approval_mismatch":
        return MISMATCH
    if record is not None and record.decision == "requested":
        return WAITING
    if action is not None:  # abandoned, and no decision since that says otherwise
        return (
            " -> not done (paused by an interrupt() inside the tool): it runs again under the "
            "same key when its paused step is resumed"
        )
    if code in ("durability", "database"):
        return f" -> not done (never started){AGAIN}"
    if record is not None and record.decision == "approve":
        return " -> not started yet (approved; it runs once when its tool step runs)"
    return ""


def _action_outcome(action: Action, answered: bool) -> str:
    if action.status == "open" and not action.started:
        return NOT_STARTED_YET
    if action.status == "open":
        return IN_DOUBT_IDEMPOTENT if action.klass == "idempotent" else IN_DOUBT
    by = _resolved_by(action)
    if action.status == "failed":
        return (
            " -> failed" if answered else f" -> failed: {_short(action.error or 'no error text')}"
        )
    if action.status == "not_done":
        if action.resolved_by == NOT_STARTED:
            return f" -> not done (never started){AGAIN}"
        return f" -> not done ({by or 'closed'}{_note(action.note)}){AGAIN}"
    # done. A ToolMessage shown beside it already holds the tool's result, unless the call was
    # settled after that message (which then said it was in doubt).
    result = "" if answered and by is None else _result(action.result)
    if by is not None:
        return f" -> done ({by}{_note(action.note)})" + (f": {result}" if result else "")
    return " -> done" + (f": {result}" if result else "")


def _resolved_by(action: Action) -> str | None:
    if action.resolved_by is None or action.resolved_by == NOT_STARTED:
        return None
    who = "a person" if action.resolved_by == "person" else "a resolver"
    return f"resolved by {who}"


def _note(note: str | None) -> str:
    return f": {cut(one_line(note), NOTE_CHARS)}" if note and note.strip() else ""


def _code(answer: Mapping[str, Any] | None) -> str | None:
    """The recall code a refusal's ToolMessage carries in its artifact, if any."""
    artifact = answer.get("artifact") if answer is not None else None
    recall = artifact.get("recall") if isinstance(artifact, dict) else None
    code = recall.get("code") if isinstance(recall, dict) else None
    return code if isinstance(code, str) else None


def _short(text: str) -> str:
    return cut(one_line(text), RESULT_CHARS)


def _result(result: Any) -> str:
    """A recorded result as a short text, or the ref that reads it whole."""
    if result is None:
        return ""
    fields = getattr(result, "additional_kwargs", None)
    if isinstance(fields, dict) and fields.get(OUTPUT_REF):
        return f'[stored output: read it with fetch_output(ref="{fields[OUTPUT_REF]}")]'
    content = getattr(result, "content", None)
    if content is not None:
        return _short(content_text(content))
    if isinstance(result, str):
        return _short(result)
    if isinstance(result, (dict, list, int, float, bool)):
        return _short(value_text(result))
    return f"[{type(result).__name__}]"
