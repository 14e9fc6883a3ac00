"""The briefing: a short, current picture of an agent's work, built from its records.

A process that picks an agent up (after a crash, on another machine, on a new thread) gives the
model this instead of a replayed history. Content, most important first: what the agent is and
whether the task is finished; unconfirmed (in-doubt) calls and what to do about them; calls
waiting for a person; the working state; pointers; relevant memories; recent turns.

Guarantees:

- The token budget bounds the whole text, every time. Sections are filled in priority order;
  recent turns are taken newest first until the budget is spent and then printed oldest first.
  A working state that alone is over budget is shortened, and the briefing says so.
- Its cost does not depend on how long the history is: turns are read in pages, newest first,
  only until the budget is spent (or a fixed number of rows has been scanned); open actions
  come from the store's open-actions index. Turns the input holds are skipped unread once an
  earlier briefing of the agent has seen them (turns are append-only), so briefing before
  every model call reads only the turns recorded since the last call.
- Deterministic: the same records give the same text (no clock readings, stable orders), so
  a provider's prompt cache keeps working between calls that changed nothing.
- Turns the caller says the model already sees (``exclude_msg_ids``, the messages restored on
  the same thread) are left out, so no turn reaches the model twice.
- Every durable call in a shown turn carries its outcome as the records have it (done with
  its result, failed, not done, resolved, refused, waiting for approval, in doubt), read for
  all the shown calls in one indexed query (``_briefing_outcomes``): a call shown without its
  outcome reads as unanswered, and a model may make it again.

How each record becomes a line, and the token meter, are in ``_briefing_lines``; reading the
history a page at a time in ``_briefing_turns``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, SystemMessage

from ._briefing_lines import (
    APPROVAL_TITLE,
    BRIEFING_ID,
    DOUBT_TITLE,
    ITEM_CHARS,
    MIN_PIECE,
    NOT_STARTED_TITLE,
    RECALL_TOOL_NAMES,
    Meter,
    Section,
    TokenCounter,
    action_line,
    approval_line,
    cut,
    fair_shares,
    latest_human,
    memory_line,
    not_started_line,
    state_lines,
)
from ._briefing_turns import TurnReader, place_turns
from ._errors import RecallError
from .store._records import agent_ns, check_agent_id

if TYPE_CHECKING:
    from .store import RecallStore
    from .store._models import Action

__all__ = ["BRIEFING_ID", "RECALL_TOOL_NAMES", "Briefing", "build_briefing", "is_briefing_message"]


def is_briefing_message(message: BaseMessage) -> bool:
    """True for a briefing's own SystemMessage (by its id), which is never recorded as a turn."""
    return isinstance(message, SystemMessage) and str(message.id or "").startswith(BRIEFING_ID)


@dataclass(frozen=True)
class Briefing:
    """A token-budgeted briefing. ``text`` is what the model reads; ``tokens`` its size as
    counted by the counter it was built with (never over ``token_budget``)."""

    agent_id: str
    text: str
    tokens: int
    token_budget: int
    sections: tuple[str, ...] = ()
    shortened: bool = False
    turns_shown: int = 0

    @property
    def message(self) -> SystemMessage:
        """The briefing as a ``SystemMessage`` (id ``recall-briefing``) to put before the model input."""
        return SystemMessage(self.text, id=BRIEFING_ID)

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return f"{self.text}\n\n*{self.tokens} of {self.token_budget} tokens*"

    def _repr_html_(self) -> str:
        return (
            '<pre style="white-space:pre-wrap">'
            f"{html.escape(self.text)}</pre><small>{self.tokens} of {self.token_budget} tokens</small>"
        )


# --- building ------------------------------------------------------------------------------


_DEFAULT = object()
DEFAULT_BUDGET = 2000


def build_briefing(
    store: RecallStore,
    agent_id: str,
    *,
    token_budget: int | None = None,
    token_counter: TokenCounter | None = None,
    query: str | None = None,
    exclude_msg_ids: Iterable[str] | None = None,
    memory_namespace: Any = _DEFAULT,
    memory_limit: int = 3,
    tool_hint: bool = False,
    refresh_ttl: bool | None = None,
    doubts_over_budget: str | None = None,
) -> Briefing:
    """Build the briefing for ``agent_id`` from ``store`` within ``token_budget`` tokens.

    Args:
        token_budget: the most tokens the whole briefing may take (counted as one
            SystemMessage); default 2000.
        token_counter: a function of a list of messages (or a chat model, whose
            ``get_num_tokens_from_messages`` is used); default ``count_tokens_approximately``.
        query: text to search memories with (default: the latest human turn).
        exclude_msg_ids: ids of messages the model already sees (the restored conversation);
            those turns are left out.
        memory_namespace: where relevant memories are searched (default
            ``("recall", agent_id, "memories")``, the agent id escaped as the store escapes
            it; None for no memory search).
        tool_hint: say that the recall tools keep the working state (when they are registered).
        refresh_ttl: whether the memories the briefing shows have their TTL refreshed, as a
            read does (None: the store's ``refresh_on_read``). ``False`` for a look that must
            leave them as they were (``langgraph-recall show``).
        doubts_over_budget: what to do when even the shortest lines of the unconfirmed calls do
            not fit: ``"raise"`` (``invalid_value``, naming a budget that fits) or ``"count"``
            (list those that fit, then how many more there are). Default: ``"raise"`` when
            ``token_budget`` is given, ``"count"`` otherwise. The hooks and the middleware,
            which run inside the agent, count: a briefing that raised would fail its run.

    Raises:
        RecallError: ``invalid_value`` for an agent id that is not one (empty, not text, or
            not valid Unicode: ``_ids``); when the budget is too small to hold the briefing's
            header (its length depends on the agent id) or the counter is unusable, or too
            small to hold every unconfirmed call even shortened with
            ``doubts_over_budget="raise"``; for either budget ``details["token_budget"]``
            names one that holds it.
    """
    check_agent_id(agent_id, write=False)
    if doubts_over_budget is None:
        doubts_over_budget = "count" if token_budget is None else "raise"
    if doubts_over_budget not in ("raise", "count"):
        raise RecallError(
            f'doubts_over_budget must be "raise" or "count", got {doubts_over_budget!r}',
            code="invalid_value",
        )
    if token_budget is None:
        token_budget = DEFAULT_BUDGET
    if not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget <= 0:
        raise RecallError(
            f"token_budget must be a positive int, got {token_budget!r}", code="invalid_value"
        )
    meter = Meter(token_budget, token_counter)
    skip = frozenset(exclude_msg_ids or ())
    # Calls that finished in this process, their ends not committed yet (``store._due``): left
    # out of the open actions instead of written first, which under durability="async" put a
    # write transaction in front of every model call. Taken before the reads (see there).
    finished = store._db.due.finished()
    # All reads on one connection (the store's transactions are re-entrant per thread): one
    # pool checkout instead of one per read. On PostgreSQL the reads this agent's last briefing
    # made are sent together first, in one round trip (``store._prefetch``).
    with store._db.tx(learn=("briefing", agent_id), land=False):
        return _build(
            store,
            agent_id,
            meter,
            skip,
            finished,
            token_budget,
            doubts_over_budget == "raise",
            query,
            memory_namespace,
            memory_limit,
            tool_hint,
            refresh_ttl,
        )


def _build(
    store: RecallStore,
    agent_id: str,
    meter: Meter,
    skip: frozenset[str],
    finished: frozenset[tuple[str, int]],
    token_budget: int,
    refuse: bool,
    query: str | None,
    memory_namespace: Any,
    memory_limit: int,
    tool_hint: bool,
    refresh_ttl: bool | None,
) -> Briefing:

    # Everything but the turns is small and read whole; the turns are paged below.
    state = store.working_state(agent_id)
    open_now = [
        a
        for a in store.actions(agent_id, open_only=True)
        if (a.action_id, a.attempt) not in finished
    ]
    # In doubt: open and started. A call planned with its AI message whose tool never began is
    # not: it runs once when its tool step runs (or a run-start settle closes it).
    open_actions = sorted(
        (a for a in open_now if a.started),
        key=lambda a: (a.klass == "idempotent", a.created_at, a.action_id),
    )
    not_started = [a for a in open_now if not a.started]
    approvals = store.pending_approvals(agent_id)
    pointers = store.pointers(agent_id)

    header = [f"# Briefing: agent {agent_id}, from its records", _intro(open_actions, tool_hint)]
    # Each line counted once (a custom counter is called per piece, at every model call).
    cost = sum(meter.cost(line) for line in header)
    if cost > meter.left:
        # The header's length depends on the agent id and the calls in doubt: name the
        # budget it needs (a fixed "at least 100" was refused for a long id, and too much
        # for a short one).
        raise _header_refused(token_budget, meter.budget_for(cost))
    meter.used += cost
    placed: list[Section] = [Section("header", "", [(0, ln) for ln in header])]

    # Fill in priority order: each section takes what fits of what is left.
    if open_actions:
        placed.append(_place_doubts(meter, open_actions, token_budget, refuse))
    if not_started:
        lines = [(2, not_started_line(a)) for a in not_started]
        _place(meter, placed, Section("not_started", NOT_STARTED_TITLE, lines))
    if approvals:
        tools = {p.action_id: _tool_of(store, p.action_id) for p in approvals}
        lines = [(2, approval_line(p, tools[p.action_id])) for p in approvals]
        _place(meter, placed, Section("approvals", APPROVAL_TITLE, lines))
    state_section = Section("working_state", "## Working state")
    shortened = _place_state(meter, state_section, state_lines(state))
    if state_section.lines:
        placed.append(state_section)
    if pointers:
        lines = [
            (4, cut(f"- {p.name}: {p.target}" + (f" ({p.note})" if p.note else ""), ITEM_CHARS))
            for p in pointers.values()
        ]
        _place(meter, placed, Section("pointers", "## Pointers", lines))

    turns = TurnReader(store, agent_id, skip, meter)
    ns = agent_ns(agent_id, "memories") if memory_namespace is _DEFAULT else memory_namespace
    # A cheap range read first: the full-text search only runs when there are memories.
    # (Not a read of that memory: it leaves its TTL alone.)
    if ns and memory_limit > 0 and store.search(tuple(ns), limit=1, refresh_ttl=False):
        q = query if query is not None else latest_human(turns.first_page())
        found = store.search(
            tuple(ns), query=(q or "")[:500] or None, limit=memory_limit, refresh_ttl=refresh_ttl
        )
        lines = [(5, cut("- " + memory_line(it.value), ITEM_CHARS)) for it in found]
        if lines:
            _place(meter, placed, Section("memories", "## Relevant memories", lines))

    turns_section, shown = place_turns(turns, meter)
    turns.remember()
    if turns_section is not None:
        placed.append(turns_section)

    if len(placed) == 1:
        # Nothing recorded beyond what the model sees: say so instead of "resuming".
        fresh = "Nothing is recorded for this agent beyond this conversation yet: a fresh start."
        if tool_hint:
            fresh += " Keep the working state with update_working_state, milestone and set_pointer."
        placed[0].lines[1] = (0, fresh)
    text, tokens = _finish(placed, meter, token_budget, len(open_actions), refuse)
    return Briefing(
        agent_id=agent_id,
        text=text,
        tokens=tokens,
        token_budget=token_budget,
        sections=tuple(s.name for s in placed if s.lines),
        shortened=shortened,
        turns_shown=shown,
    )


def _header_refused(budget: int, fit: int) -> RecallError:
    return RecallError(
        f"token_budget {budget} cannot hold even the briefing's header; give at least {fit} tokens",
        code="invalid_value",
        token_budget=fit,
    )


def _intro(open_actions: Sequence[Action], tool_hint: bool) -> str:
    intro = (
        "Resuming from what this agent wrote down (after a crash, or in another process): "
        "trust it and do not redo finished steps."
    )
    if open_actions:
        # Said here, not only in their section: a budget too small for any of their lines
        # (a few dozen tokens) leaves the header alone, and it must still stop a repeat.
        intro += (
            f" The task is NOT finished while {len(open_actions)} call(s) are in doubt: do not "
            "repeat them."
        )
    if tool_hint:
        intro += (
            " Keep the working state current with update_working_state, milestone and set_pointer."
        )
    return intro


def _tool_of(store: RecallStore, action_id: str) -> str | None:
    try:
        return store.action(action_id).tool
    except RecallError:  # a request recorded before its action was claimed
        return None


def _place(meter: Meter, placed: list[Section], section: Section) -> None:
    """Add as many of the section's lines as fit, in order, noting how many did not."""
    lines = section.lines
    if not lines or meter.cost(section.title) + meter.cost(lines[0][1]) > meter.left:
        return
    meter.take(section.title)
    kept: list[tuple[int, str]] = []
    for i, (rank, line) in enumerate(lines):
        rest = len(lines) - i - 1
        note_cost = meter.cost(f"- … and {rest} more") if rest else 0
        if meter.cost(line) + note_cost <= meter.left:
            meter.take(line)
            kept.append((rank, line))
            continue
        more = f"- … and {len(lines) - i} more"
        if meter.take(more):
            kept.append((rank, more))
        break
    placed.append(Section(section.name, section.title, kept))


def _place_doubts(meter: Meter, actions: Sequence[Action], budget: int, refuse: bool) -> Section:
    """Every unconfirmed call, each call's text shortened to fit if needed, never one left out:
    a call the model does not see listed it may well make again.

    When even the shortest lines (each call cut to ``MIN_PIECE`` characters) do not fit:
    raises ``invalid_value``, naming a budget that holds them, if ``refuse`` (a budget the
    caller chose); else lists those that fit and counts the rest (a running agent's briefing,
    which must not fail its run)."""
    lines = [action_line(a) for a in actions]
    title = meter.cost(DOUBT_TITLE)

    def fits(candidate: list[str]) -> bool:
        return title + sum(meter.cost(ln) for ln in candidate) <= meter.left

    if not fits(lines):
        calls = [a.call_text() for a in actions]
        frames = sum(len(action_line(a, "")) for a in actions) + len(actions)
        room = meter.chars_for(meter.left - title, "\n".join(lines)) - frames
        allot = fair_shares([len(c) for c in calls], room)
        lines = [
            action_line(a, cut(c, max(n, MIN_PIECE)))
            for a, c, n in zip(actions, calls, allot, strict=True)
        ]
        shortest = [action_line(a, cut(c, MIN_PIECE)) for a, c in zip(actions, calls, strict=True)]
        if not fits(lines):
            lines = shortest
        if not fits(lines) and not refuse:
            return _count_doubts(meter, shortest)
        if not fits(lines):
            need = meter.used + title + sum(meter.cost(ln) for ln in shortest)
            fit = max(meter.budget_for(need), budget + 1)
            raise RecallError(
                f"token_budget {budget} cannot hold the {len(actions)} unconfirmed call(s) "
                f"even shortened; give at least {fit} tokens",
                code="invalid_value",
                token_budget=fit,
            )
    for ln in [DOUBT_TITLE, *lines]:
        meter.take(ln)
    return Section("open_actions", DOUBT_TITLE, [(1, ln) for ln in lines])


_MORE_DOUBTS = "- … and "
_SHORT_DOUBT_TITLE = "## Unconfirmed calls (in doubt): do not call them again"


def _more_doubts(n: int) -> str:
    """The line that counts the calls in doubt not listed."""
    return (
        f"{_MORE_DOUBTS}{n} more unconfirmed call(s), not listed (over the token budget): do not "
        "repeat a call you cannot confirm; `langgraph-recall actions AGENT --open` lists them"
    )


def _count_doubts(meter: Meter, lines: list[str]) -> Section:
    """As many of the shortest lines as fit, then how many more calls are in doubt."""
    more = _more_doubts
    title = DOUBT_TITLE
    if meter.cost(title) + meter.cost(more(len(lines))) > meter.left:
        title = _SHORT_DOUBT_TITLE
    meter.take(title)
    kept: list[str] = []
    for i, ln in enumerate(lines):
        if meter.cost(ln) + meter.cost(more(len(lines) - i - 1)) > meter.left:
            break
        meter.take(ln)
        kept.append(ln)
    kept.append(more(len(lines) - len(kept)))
    meter.take(kept[-1])
    return Section("open_actions", title, [(1, ln) for ln in kept])


def _place_state(meter: Meter, section: Section, fields: list[tuple[str, str]]) -> bool:
    """Put the working state in; shorten its fields to fit if needed. True when shortened."""
    if not fields:
        return False
    lines = [f"{k}: {v}" for k, v in fields]
    need = meter.cost(section.title) + sum(meter.cost(ln) for ln in lines)
    if need <= meter.left:
        for ln in [section.title, *lines]:
            meter.take(ln)
        section.lines = [(3, ln) for ln in lines]
        return False
    note = "(working state shortened to fit the token budget)"
    room = meter.left - meter.cost(section.title) - meter.cost(note)
    if room <= 0:
        return False
    # Share the room out, so a huge "notes" cannot push out the goal.
    budget_chars = meter.chars_for(room, "\n".join(lines)) - len(lines)
    allot = fair_shares([len(ln) for ln in lines], budget_chars)
    kept = [cut(lines[i], allot[i]) for i in range(len(lines)) if allot[i] >= MIN_PIECE]
    meter.take(section.title)
    placed: list[str] = []
    for ln in kept:
        if meter.cost(ln) <= meter.left - meter.cost(note):
            meter.take(ln)
            placed.append(ln)
    meter.take(note)
    section.lines = [(3, ln) for ln in [*placed, note]]
    return True


def _render(sections: list[Section]) -> str:
    out: list[str] = []
    for sec in sections:
        if not sec.lines:
            continue
        if sec.title:
            out.append(sec.title)
        lines = [ln for _, ln in sec.lines]
        if sec.print_reversed:
            # Stored newest first with the "earlier turns" note first; print the note, then
            # the turns oldest first.
            note = [ln for r, ln in sec.lines if r == 9]
            body = [ln for r, ln in sec.lines if r != 9]
            lines = note + body[::-1]
        out.extend(lines)
    return "\n".join(out)


def _finish(
    sections: list[Section], meter: Meter, budget: int, doubts: int, refuse: bool
) -> tuple[str, int]:
    """The text and its real count; drops the least important lines if a counter was not
    additive, so the budget holds whatever counter was given.

    A call in doubt is never dropped unsaid: when one would be, the budget is refused
    (``refuse``, naming the count of the text that holds them all), or the call is taken off
    the end of the list and counted in its last line."""
    text = _render(sections)
    tokens = meter.counter([SystemMessage(text)])
    while tokens > budget:
        worst = max(
            ((s, i) for s in sections[1:] for i in range(len(s.lines))),
            key=lambda si: si[0].lines[si[1]][0] + si[1] * 1e-6,
            default=None,
        )
        if worst is None:
            raise _header_refused(budget, int(tokens))  # this text is the header alone
        sec, i = worst
        if sec.name == "open_actions":
            calls = [k for k, (_, ln) in enumerate(sec.lines) if not ln.startswith(_MORE_DOUBTS)]
            if refuse and len(calls) == doubts:
                fit = int(tokens)  # this text, every call in it, with less of all else
                raise RecallError(
                    f"token_budget {budget} cannot hold the {doubts} unconfirmed call(s) even "
                    f"shortened; give at least {fit} tokens",
                    code="invalid_value",
                    token_budget=fit,
                )
            if calls:
                del sec.lines[calls[-1]]
                listed = len(calls) - 1
                counted = [(1, _more_doubts(doubts - listed))]
                sec.lines = [ln for ln in sec.lines if not ln[1].startswith(_MORE_DOUBTS)]
                sec.lines += counted
                text = _render(sections)
                tokens = meter.counter([SystemMessage(text)])
                continue
            if sec.title != _SHORT_DOUBT_TITLE:  # only the count left: a shorter title first
                sec.title = _SHORT_DOUBT_TITLE
                text = _render(sections)
                tokens = meter.counter([SystemMessage(text)])
                continue
        del sec.lines[i]
        text = _render(sections)
        tokens = meter.counter([SystemMessage(text)])
    return text, int(tokens)
