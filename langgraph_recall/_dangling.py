"""Answers, in the model's input, for tool calls no ToolMessage answers ("dangling" calls).

A run killed inside a tool step and resumed on the same thread with a new message leaves an AI
message whose tool calls have no ToolMessage: LangGraph drops the pending tool task. The run's
start settles the call in the records, but the briefing leaves out the turns already in the
model's input, so that outcome would be shown nowhere: a careful model stops, a naive one calls
again and repeats the side effect (and a provider rejects calls left unanswered). So before
each model call every dangling call gets a ToolMessage, placed right after its AI message's
other answers, carrying the outcome the records hold in the briefing's wording
(``docs/briefing-outcomes.md``). Only the model's input changes, never the state.

Cost, at every model call: one scan in C (message types, asked and answered call ids fetched
with ``attrgetter``/``map`` and compared as sets). The records are read, in one query, only
when a call dangles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ._briefing_lines import RECALL_TOOL_NAMES
from ._briefing_outcomes import outcome_text
from ._render import call_text
from .store._actions import action_key
from .tools._canonical import asking_id

if TYPE_CHECKING:
    from .store import RecallStore

__all__ = ["NO_ANSWER", "PREFIX", "answer_dangling", "dangling_ids"]

PREFIX = "[langgraph-recall] "
"""What an answer made here starts with (before the call's text)."""
NO_ANSWER = (
    " -> no answer: it was interrupted before it answered; call it again if it is still needed"
)
"""The outcome of a dangling call the records know nothing of (a pure tool's, or a durable
call that was never claimed, so never began)."""

_CALLS = attrgetter("tool_calls")
_ANSWERED = attrgetter("tool_call_id")
_CALL_ID = itemgetter("id")
#: LangChain's own message classes: a list of only these is split by class identity, in C
#: (``isinstance`` on a pydantic class costs as much per message as the whole check).
_PLAIN = frozenset({HumanMessage, AIMessage, ToolMessage, SystemMessage})


def dangling_ids(messages: Sequence[Any]) -> set[str]:
    """The ids of the tool calls asked in ``messages`` that no ToolMessage among them answers.

    In C whatever the length: the usual answer is the empty set, at every model call."""
    classes = list(map(type, messages))
    if _PLAIN.issuperset(set(classes)):
        asking: Iterable[Any] = compress(messages, map(is_, classes, repeat(AIMessage)))
        answers: Iterable[Any] = compress(messages, map(is_, classes, repeat(ToolMessage)))
    else:  # a subclass (a chunk, a user's own), or a dict: one by one
        asking = [m for m in messages if isinstance(m, AIMessage)]
        answers = [m for m in messages if isinstance(m, ToolMessage)]
    calls = list(chain.from_iterable(map(_CALLS, asking)))
    try:
        asked = set(map(_CALL_ID, calls))
    except KeyError:  # a call given as a bare dict without an id
        asked = {c.get("id") for c in calls}
    if not asked:
        return asked
    asked.difference_update(map(_ANSWERED, answers))
    asked.discard(None)
    return asked


def answer_dangling(store: RecallStore, agent_id: str, messages: list[Any]) -> list[Any]:
    """``messages`` with each dangling tool call answered by a ToolMessage saying what the
    records hold of it, right after its AI message's other answers; ``messages`` itself (the
    same list) when no call dangles.

    The outcomes are read in one ``store.call_records`` query, under the action id the durable
    tool node claims the call by. A call of a recall tool is pure and not looked up."""
    open_ids = dangling_ids(messages)
    if not open_ids:
        return messages
    # A Python pass, only now: (index after the AI message's answers, its dangling calls).
    places: list[tuple[int, AIMessage, list[dict[str, Any]]]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, AIMessage) or not m.tool_calls:
            continue
        calls = [c for c in m.tool_calls if c.get("id") in open_ids]
        if not calls:
            continue
        after = i + 1
        while after < len(messages) and isinstance(messages[after], ToolMessage):
            after += 1
        places.append((after, m, calls))  # type: ignore[arg-type]
    keys = {
        (id(m), c["id"]): action_key(agent_id, asking_id(m), c["id"], c["name"])
        for _, m, calls in places
        for c in calls
        if c["name"] not in RECALL_TOOL_NAMES
    }
    records = store.call_records(agent_id, list(keys.values())) if keys else {}
    out = list(messages)
    for after, m, calls in reversed(places):  # from the end: earlier indexes stay right
        out[after:after] = [_answer(c, records.get(keys.get((id(m), c["id"]), ""))) for c in calls]
    return out


def _answer(call: dict[str, Any], record: Any) -> ToolMessage:
    outcome = outcome_text(record, None) or NO_ANSWER
    return ToolMessage(
        PREFIX + call_text(call["name"], call.get("args") or {}) + outcome,
        tool_call_id=call["id"],
        name=call["name"],
    )
