"""How a tool call ends up in the records, and what the model is told.

A done call is recorded as the ToolMessage (or Command) it produced, so that a repeat returns
exactly that. Text longer than ``store.output_threshold`` is stored whole as an output and the
record keeps a reference; the model still gets the full text, then and on every repeat.
"""

from __future__ import annotations

import datetime as dt
import reprlib
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from .._render import call_text
from ..store import Action, RecallStore
from ..store._models import OUTPUT_REF

# In a recorded answer only: why it is a stand-in for what the tool returned (``stand_in``).
STAND_IN = "recall_stand_in"
# In a recorded answer only: how many interrupt() answers the tool took as it ran (``_order``).
ASKED = "recall_asked"


@dataclass(frozen=True)
class ActionEnd:
    """What a resolver found out about a call left in doubt.

    ``ActionEnd("done", result=..., resolution="found charge ch_123")``: it happened; the
    model gets ``result`` as the tool's answer. ``ActionEnd("not_done")``: it did not happen;
    the call may run again under the same idempotency key. Return ``None`` from the resolver
    when you cannot tell: the call stays open for a person.
    """

    outcome: Literal["done", "not_done"]
    result: Any = None
    resolution: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in ("done", "not_done"):
            from .._errors import RecallError

            raise RecallError(
                f"ActionEnd outcome must be 'done' or 'not_done', got {self.outcome!r}",
                code="invalid_value",
            )


@dataclass(frozen=True)
class SettleReport:
    """What ``settle`` did: actions it closed, and actions still open for a person."""

    closed: list[Action] = field(default_factory=list)
    open: list[Action] = field(default_factory=list)


Output = Any  # ToolMessage | Command | list[ToolMessage | Command]


def is_error(out: Output) -> bool:
    return isinstance(out, ToolMessage) and out.status == "error"


def error_text(out: Output) -> str:
    content = out.content if isinstance(out, ToolMessage) else out
    return content if isinstance(content, str) else str(content)


def needs_output(store: RecallStore, out: Output) -> bool:
    """Whether ``to_record`` moves ``out``'s text to an output of its own."""
    return (
        isinstance(out, ToolMessage)
        and isinstance(out.content, str)
        and len(out.content) > store.output_threshold
    )


def with_stable_id(out: Output, action_id: str) -> Output:
    """``out`` with a message id made from its action when it has none.

    A finished call returns its recorded answer on every repeat; with no id of its own, each
    repeat (a time-travel replay, a re-run task) got a fresh one from ``add_messages`` and was
    recorded again as a new turn. With the action's id it is the same message each time."""
    if isinstance(out, ToolMessage) and not out.id:
        out.id = f"recall-tool-{action_id}"
    return out


def with_asked(out: Output, asked: int, task_id: str | None) -> Output:
    """The form of ``out`` to record when its tool took ``asked`` interrupt() answers in the
    LangGraph task ``task_id``."""
    if not asked or not isinstance(out, ToolMessage):
        return out
    kept = {**out.additional_kwargs, ASKED: {"n": asked, "task": task_id}}
    return out.model_copy(update={"additional_kwargs": kept})


def recorded_asks(action: Action) -> tuple[int, str | None]:
    """How many interrupt() answers the recorded run of ``action`` took, and in which task."""
    result = action.result
    found = result.additional_kwargs.get(ASKED) if isinstance(result, ToolMessage) else None
    if not isinstance(found, dict):
        return 0, None
    return int(found.get("n") or 0), found.get("task")


def to_record(store: RecallStore, agent_id: str, out: Output) -> Output:
    """The form of ``out`` kept in the action's record (large text moved to an output)."""
    if not needs_output(store, out):
        return out
    message = cast(ToolMessage, out)
    text = cast(str, message.content)
    ref = store.put_output(agent_id, text)
    return message.model_copy(
        update={
            "content": f"[output {ref}: {len(text)} characters]",
            "additional_kwargs": {**message.additional_kwargs, OUTPUT_REF: ref},
        }
    )


def whole_result(store: RecallStore, result: Any) -> Any:
    """``result`` as the tool answered it: a long text moved to an output (``to_record``) put
    back whole, and the markers only the record carries dropped."""
    if not isinstance(result, ToolMessage):
        return result
    kept = result.additional_kwargs
    if OUTPUT_REF not in kept and ASKED not in kept:
        return result
    update: dict[str, Any] = {
        "additional_kwargs": {k: v for k, v in kept.items() if k not in (OUTPUT_REF, ASKED)}
    }
    if kept.get(OUTPUT_REF):
        update["content"] = store.fetch_output(kept[OUTPUT_REF])
    return result.model_copy(update=update)


def from_record(
    store: RecallStore, action: Action, call: dict[str, Any]
) -> ToolMessage | Command | list[Any]:
    """What a repeat of a finished call returns: the recorded answer, whole."""
    result = action.result
    if isinstance(result, ToolMessage):
        update: dict[str, Any] = {"tool_call_id": call["id"]}
        kept = result.additional_kwargs
        if OUTPUT_REF in kept or ASKED in kept:
            update["additional_kwargs"] = {
                k: v for k, v in kept.items() if k not in (OUTPUT_REF, ASKED)
            }
        if kept.get(OUTPUT_REF):
            update["content"] = store.fetch_output(kept[OUTPUT_REF])
        return result.model_copy(update=update)
    if isinstance(result, (Command, list)):
        return result
    # Settled by a resolver or a person: their result (or note) is the answer.
    text = result if isinstance(result, str) else None
    if text is None and result is not None:
        text = str(result)
    if text is None:
        text = action.note or "done (confirmed after the fact; no result was recorded)"
    return ToolMessage(text, tool_call_id=call["id"], name=call["name"])


# A bounded, non-recursive repr for stand-ins: a value nested 100,000 deep has no repr().
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 4, 200, 200


def short_repr(value: Any, limit: int = 500) -> str:
    try:
        text = _SHORT.repr(value)
    except Exception:  # a __repr__ that raises
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stand_in(call: dict[str, Any], action_id: str, out: Output | None, reason: str) -> ToolMessage:
    """What is recorded, and answered, for a call that ran when what it returned cannot be
    stored (``reason``): its text when it had some, else the start of its repr, marked as a
    stand-in. The call is done: recorded "failed", an effect that happened would read as not
    made, and "open" would leave it in doubt for ever."""
    message = out if isinstance(out, ToolMessage) else None
    if message is not None and isinstance(message.content, str):
        content = message.content
    else:
        began = "" if out is None else f"; what it returned began: {short_repr(out)}"
        content = f"[{call['name']} ran, but its result could not be stored ({reason}){began}]"
    return ToolMessage(
        content,
        tool_call_id=call["id"],
        name=call["name"],
        id=(message.id if message is not None else None) or f"recall-tool-{action_id}",
        additional_kwargs={STAND_IN: reason},
    )


def failed_message(action: Action, call: dict[str, Any]) -> ToolMessage:
    return ToolMessage(
        f"This call already ran and failed: {action.error or 'no error text was recorded'}. "
        "It was not run again.",
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
    )


def _notice(call: dict[str, Any], text: str, code: str, action_id: str) -> ToolMessage:
    return ToolMessage(
        text,
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        artifact={"recall": {"code": code, "action_id": action_id}},
    )


def in_doubt_message(
    action: Action, call: dict[str, Any], reason: str | None = None
) -> ToolMessage:
    """What the model is told of a call in doubt. ``reason``: the text its tool raised
    ``InDoubt`` with (None: the attempt never reported back at all)."""
    if reason is None:
        started = dt.datetime.fromtimestamp(action.created_at, dt.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
        why = (
            f"an attempt started at {started} and never reported back (the process running "
            "it stopped)"
        )
    else:
        said = " ".join(reason.split())
        said = said if len(said) <= 300 else said[:297] + "..."
        why = "the tool could not tell whether it happened" + (f" ({said})" if said else "")
    return _notice(
        call,
        f"The outcome of {action.call_text(120)} is UNKNOWN: {why}, so it was NOT run again. "
        "Do not assume it happened and do not call it again. This task is not finished until a "
        f"person checks: action {action.action_id} stays open "
        f"(`langgraph-recall resolve {action.action_id} --done` or `--not-done`).",
        "in_doubt",
        action.action_id,
    )


def refused_message(call: dict[str, Any], action_id: str, code: str, reason: str) -> ToolMessage:
    return _notice(call, f"{call['name']} did not run: {reason}", code, action_id)


def rejected_message(call: dict[str, Any], action_id: str, message: str | None) -> ToolMessage:
    why = f" Their message: {message}" if message else ""
    return _notice(
        call,
        f"A person rejected {call_text(call['name'], call.get('args') or {}, 120)}; it did "
        f"not run.{why}",
        "approval_denied",
        action_id,
    )


def with_edit_notice(out: Output, name: str, args: dict[str, Any]) -> Output:
    """Tell the model that a person changed the arguments before the call ran."""
    notice = f"[A person edited this call before it ran; it ran as {call_text(name, args, 120)}]"
    if isinstance(out, ToolMessage) and isinstance(out.content, str):
        return out.model_copy(update={"content": f"{notice}\n{out.content}"})
    return out
