"""The briefing's text: how each record becomes a line, and the meter that keeps the whole
within its token budget."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from langchain_core.messages import BaseMessage, SystemMessage

from ._errors import RecallError
from ._render import call_text
from .store._transcript import content_text

if TYPE_CHECKING:
    from .store._models import Action, Approval, TurnView

#: Message id of the briefing's SystemMessage; messages with ids starting with it are never
#: shown as turns (a briefing kept in state must not feed the next briefing).
BRIEFING_ID = "recall-briefing"
#: The recall tools. Their calls and acknowledgements are left out of the recent turns: what
#: they wrote already shows in the working state and pointers, and it must not crowd out work.
RECALL_TOOL_NAMES = frozenset({"update_working_state", "milestone", "set_pointer", "fetch_output"})

TokenCounter = Any  # a function of a list of messages, or a chat model

STATE_ORDER = ("goal", "plan", "progress", "decisions", "last_milestone", "notes")
TURN_CHARS = 600  # a turn longer than this shows its start and how much more there is
ITEM_CHARS = 300  # pointers, memories, approvals: one line each, at most this long
#: How a briefing names a turn it cut, for ``fetch_output`` to read whole: ``turn-<seq>``.
TURN_REF = "turn-"
MIN_PIECE = 40  # a shortened piece keeps at least this many characters (or is left out)


# --- counting ------------------------------------------------------------------------------


class Meter:
    """What the pieces of the briefing cost against its budget.

    With the default counter (``count_tokens_approximately``, linear in characters) costs are
    characters and the capacity is exact, so no piece needs a tokenizer call. A custom counter
    is asked per piece (its costs are nearly additive across lines); the final text is counted
    once more and trimmed if a counter was not additive after all.
    """

    def __init__(self, budget: int, counter: TokenCounter | None) -> None:
        self.counter = as_counter(counter)
        self.exact = counter is None
        if self.exact:
            # count_tokens_approximately on one SystemMessage: ceil((chars + len("system")) / 4) + 3
            self.capacity = (budget - 3) * 4 - 6
        else:
            self.base = self.counter([SystemMessage("")])
            self.capacity = budget - self.base
        self.used = 0

    def cost(self, line: str) -> int:
        if self.exact:
            return len(line) + 1  # the line and its newline
        return max(1, self.counter([SystemMessage(line)]) - self.base)

    @property
    def left(self) -> int:
        return self.capacity - self.used

    def take(self, line: str) -> bool:
        c = self.cost(line)
        if c > self.left:
            return False
        self.used += c
        return True

    def budget_for(self, units: int) -> int:
        """The smallest token budget whose capacity holds ``units`` (about, with a custom
        counter)."""
        if self.exact:
            return -(-(units + 6) // 4) + 3  # the capacity's formula above, solved for budget
        return int(units + self.base)

    def chars_for(self, units: int, sample: str) -> int:
        """About how many characters of ``sample`` fit in ``units``."""
        if self.exact:
            return units - 1
        per = self.cost(sample) / max(1, len(sample))
        return int(units / max(per, 1e-6))


def as_counter(counter: TokenCounter | None) -> Callable[[list[BaseMessage]], int]:
    if counter is None:
        from langchain_core.messages.utils import count_tokens_approximately

        return count_tokens_approximately
    if hasattr(counter, "get_num_tokens_from_messages"):
        return counter.get_num_tokens_from_messages  # type: ignore[no-any-return]
    if callable(counter):
        return counter  # type: ignore[no-any-return]
    raise RecallError(
        "token_counter must be a function of a list of messages or a chat model",
        code="invalid_value",
    )


def cut(text: str, chars: int) -> str:
    """``text`` in at most ``chars`` characters, saying how much was left out."""
    if len(text) <= chars:
        return text
    keep = max(0, chars - 16 - len(str(len(text))))
    return f"{text[:keep]}… (+{len(text) - keep} chars)"


def one_line(text: str) -> str:
    return " ".join(text.split())


# --- the pieces ----------------------------------------------------------------------------


@dataclass
class Section:
    name: str
    title: str
    lines: list[tuple[int, str]] = field(
        default_factory=list
    )  # (rank, line); lower rank matters more
    print_reversed: bool = False


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "; ".join(value)
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


def state_lines(state: dict[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in STATE_ORDER if k in state] + sorted(k for k in state if k not in STATE_ORDER)
    return [
        (k.replace("_", " "), one_line(value_text(state[k])))
        for k in keys
        if state[k] not in (None, "")
    ]


def short_id(action_id: str) -> str:
    return action_id if len(action_id) <= 24 else action_id[:16]


def action_line(a: Action, call: str | None = None) -> str:
    """The line of an unconfirmed call; ``call`` in place of its whole call text (shortened)."""
    # What to do is said once, in the section title; a line is just the call and its id.
    what = a.call_text() if call is None else call
    if a.klass == "idempotent":
        return f"- {what} [action {short_id(a.action_id)}, idempotent: re-run with the same key on resume]"
    return f"- {what} [action {short_id(a.action_id)}]"


def fair_shares(lengths: Sequence[int], total: int) -> list[int]:
    """``total`` characters shared out: the short pieces keep their whole length, the rest split
    what remains evenly, so one huge piece cannot push out the others."""
    allot = [0] * len(lengths)
    remaining = total
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for n, i in enumerate(order):
        share = remaining // (len(lengths) - n)
        allot[i] = max(0, min(lengths[i], share))
        remaining -= allot[i]
    return allot


DOUBT_TITLE = (
    "## Unconfirmed calls (in doubt): each may or may not have happened. Do not call them "
    "again; check whether they took effect, or ask an operator to run "
    "`langgraph-recall resolve ACTION --done` (or `--not-done`)"
)
NOT_STARTED_TITLE = (
    "## Planned calls, not started yet (never began: each runs once when its tool step runs; "
    "do not call them again while that step is pending)"
)


def not_started_line(a: Action) -> str:
    """The line of a call written ahead with its AI message whose tool never began."""
    return f"- {cut(a.call_text(), ITEM_CHARS - 60)} -> not started yet [action {short_id(a.action_id)}]"


APPROVAL_TITLE = (
    "## Waiting for a person's approval (do not call these again; each runs once approved)"
)


def approval_line(p: Approval, tool: str | None) -> str:
    if tool and isinstance(p.args, dict):
        what = call_text(tool, p.args)
    elif p.message:
        what = one_line(p.message)
    else:  # a request recorded before its action: the arguments are all there is
        what = "a call with " + (
            one_line(value_text(p.args)) if p.args is not None else "no arguments"
        )
    # The call is cut, never the id after it: the id is what a person resolves it by.
    suffix = f" [action {short_id(p.action_id)}]"
    return f"- {cut(what, ITEM_CHARS - len(suffix) - 2)}{suffix}"


def turn_text(text: str, turn: TurnView) -> str:
    """A turn's text for its line: cut at ``TURN_CHARS``, with a ref to read it whole (a turn
    under the store's output threshold has no output of its own to point at)."""
    if len(text) <= TURN_CHARS:
        return text
    return f"{cut(text, TURN_CHARS)}{whole_turn_ref(turn.seq)}"


def whole_turn_ref(seq: int) -> str:
    """What ends the line of a turn the briefing cut: the ref that reads it whole."""
    return f' [whole turn: fetch_output(ref="{TURN_REF}{seq}")]'


def turn_line(
    turn: TurnView,
    outputs: dict[str, dict[str, Any]],
    outcomes: Mapping[str, str] | None = None,
) -> str | None:
    """One turn as a line, or None when it is not worth the model's attention. ``outcomes``:
    by tool call id, the text that follows a call of this turn (``_briefing_outcomes``)."""
    if turn.role == "ai":
        parts = ai_parts(turn, outputs, outcomes)
        return None if parts is None else ai_line(*parts)
    f = turn.fields if isinstance(turn.fields, dict) else {}
    if turn.role == "system" and str(f.get("id") or "").startswith(BRIEFING_ID):
        return None  # a briefing kept in state never feeds the next briefing
    text = one_line(content_text(f.get("content", "")))
    ref = turn.output_ref
    stored = ""
    if ref:
        out = outputs.get(ref, {})
        stored = (
            f"[stored output, {out.get('size', turn.size)} chars: read it with "
            f'fetch_output(ref="{ref}")]'
        )
    if turn.role == "tool":
        name = f.get("name")
        if name in RECALL_TOOL_NAMES:
            return None
        who = f"tool {name}" if name else "tool"
        if f.get("status") == "error":
            who += " (error)"
        if ref:
            start = one_line(str(outputs.get(ref, {}).get("preview", "")))[:120]
            return f"{who}: {stored} starts: {start!r}"
        return f"{who}: {turn_text(text, turn)}"
    text = stored or turn_text(text, turn)
    if turn.role == "human":
        return f"user: {text}"
    return f"{turn.role}: {text}" if text else None


def ai_parts(
    turn: TurnView,
    outputs: dict[str, dict[str, Any]],
    outcomes: Mapping[str, str] | None = None,
) -> tuple[str, list[str]] | None:
    """An assistant turn's text and its calls' texts, each call followed by its outcome; None
    for another turn, or one with nothing to show."""
    f = turn.fields if isinstance(turn.fields, dict) else {}
    if turn.role != "ai":
        return None
    ref = turn.output_ref
    if ref:
        size = outputs.get(ref, {}).get("size", turn.size)
        text = f'[stored output, {size} chars: read it with fetch_output(ref="{ref}")]'
    else:
        text = turn_text(one_line(content_text(f.get("content", ""))), turn)
    said = outcomes or {}
    calls = [
        call_text(str(c.get("name")), c.get("args") or {}) + said.get(str(c.get("id")), "")
        for c in f.get("tool_calls") or ()
        if isinstance(c, dict) and c.get("name") not in RECALL_TOOL_NAMES
    ]
    if not text and not calls:
        return None
    return text, calls


def ai_line(text: str, calls: Sequence[str], more: int = 0) -> str:
    """An assistant turn's line; ``more``: calls left out (over the budget) after ``calls``."""
    line = f"assistant: {text}" if text else "assistant:"
    if calls:
        line += (" | " if text else " ") + "called " + ", ".join(calls)
    if more:
        line += f" … and {more} more call(s)"
    return line


def latest_human(turns: Sequence[TurnView]) -> str | None:
    for t in turns:
        if t.role == "human" and isinstance(t.fields, dict):
            return content_text(t.fields.get("content", ""))
    return None


def memory_line(value: dict[str, Any]) -> str:
    for key in ("text", "content", "memory", "value"):
        if isinstance(value.get(key), str):
            return one_line(value[key])
    return one_line(value_text(value))
