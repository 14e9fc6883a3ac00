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
"""

from __future__ import annotations

import html
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from langchain_core.messages import BaseMessage, SystemMessage

from ._errors import RecallError
from ._render import call_text
from .store._records import agent_ns

if TYPE_CHECKING:
    from .store import RecallStore
    from .store._models import Action, Approval, TurnView

__all__ = ["BRIEFING_ID", "RECALL_TOOL_NAMES", "Briefing", "build_briefing", "is_briefing_message"]

#: Message id of the briefing's SystemMessage; messages with ids starting with it are never
#: shown as turns (a briefing kept in state must not feed the next briefing).
BRIEFING_ID = "recall-briefing"
#: The recall tools. Their calls and acknowledgements are left out of the recent turns: what
#: they wrote already shows in the working state and pointers, and it must not crowd out work.
RECALL_TOOL_NAMES = frozenset({"update_working_state", "milestone", "set_pointer", "fetch_output"})

TokenCounter = Any  # a function of a list of messages, or a chat model

_STATE_ORDER = ("goal", "plan", "progress", "decisions", "last_milestone", "notes")
_TURN_CHARS = 600  # a turn longer than this shows its start and how much more there is
_ITEM_CHARS = 300  # pointers, memories, approvals: one line each, at most this long
_SCAN_ROWS = 1000  # rows of history read beyond the excluded ones, whatever the budget
_MIN_PIECE = 40  # a shortened piece keeps at least this many characters (or is left out)
# Characters a turn line is first assumed to take. Low on purpose: reading a few rows too
# many costs microseconds, a page too few costs another round trip to the database.
_FIRST_GUESS = 60.0


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


# --- counting ------------------------------------------------------------------------------


class _Meter:
    """What the pieces of the briefing cost against its budget.

    With the default counter (``count_tokens_approximately``, linear in characters) costs are
    characters and the capacity is exact, so no piece needs a tokenizer call. A custom counter
    is asked per piece (its costs are nearly additive across lines); the final text is counted
    once more and trimmed if a counter was not additive after all.
    """

    def __init__(self, budget: int, counter: TokenCounter | None) -> None:
        self.counter = _as_counter(counter)
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

    def chars_for(self, units: int, sample: str) -> int:
        """About how many characters of ``sample`` fit in ``units``."""
        if self.exact:
            return units - 1
        per = self.cost(sample) / max(1, len(sample))
        return int(units / max(per, 1e-6))


def _as_counter(counter: TokenCounter | None) -> Callable[[list[BaseMessage]], int]:
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


def _cut(text: str, chars: int) -> str:
    """``text`` in at most ``chars`` characters, saying how much was left out."""
    if len(text) <= chars:
        return text
    keep = max(0, chars - 16 - len(str(len(text))))
    return f"{text[:keep]}… (+{len(text) - keep} chars)"


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- the pieces ----------------------------------------------------------------------------


@dataclass
class _Section:
    name: str
    title: str
    lines: list[tuple[int, str]] = field(
        default_factory=list
    )  # (rank, line); lower rank matters more
    print_reversed: bool = False


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "; ".join(value)
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


def _state_lines(state: dict[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in _STATE_ORDER if k in state] + sorted(
        k for k in state if k not in _STATE_ORDER
    )
    return [
        (k.replace("_", " "), _one_line(_value_text(state[k])))
        for k in keys
        if state[k] not in (None, "")
    ]


def _short_id(action_id: str) -> str:
    return action_id if len(action_id) <= 24 else action_id[:16]


def _action_line(a: Action) -> str:
    # What to do is said once, in the section title; a line is just the call and its id.
    if a.klass == "idempotent":
        return f"- {a.call_text()} [action {_short_id(a.action_id)}, idempotent: re-run with the same key on resume]"
    return f"- {a.call_text()} [action {_short_id(a.action_id)}]"


_DOUBT_TITLE = (
    "## Unconfirmed calls (in doubt): each may or may not have happened. Do not call them "
    "again; check whether they took effect, or ask an operator to run "
    "`langgraph-recall resolve ACTION --done` (or `--not-done`)"
)
_APPROVAL_TITLE = (
    "## Waiting for a person's approval (do not call these again; each runs once approved)"
)


def _approval_line(p: Approval, tool: str | None) -> str:
    if tool and isinstance(p.args, dict):
        what = call_text(tool, p.args)
    elif p.message:
        what = _one_line(p.message)
    else:  # a request recorded before its action: the arguments are all there is
        what = "a call with " + (
            _one_line(_value_text(p.args)) if p.args is not None else "no arguments"
        )
    return _cut(f"- {what} [action {_short_id(p.action_id)}]", _ITEM_CHARS)


def _content_text(content: Any) -> str:
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


def _turn_line(turn: TurnView, outputs: dict[str, dict[str, Any]]) -> str | None:
    """One turn as a line, or None when it is not worth the model's attention."""
    f = turn.fields if isinstance(turn.fields, dict) else {}
    if turn.role == "system" and str(f.get("id") or "").startswith(BRIEFING_ID):
        return None  # a briefing kept in state never feeds the next briefing
    text = _one_line(_content_text(f.get("content", "")))
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
            start = _one_line(str(outputs.get(ref, {}).get("preview", "")))[:120]
            return f"{who}: {stored} starts: {start!r}"
        return f"{who}: {_cut(text, _TURN_CHARS)}"
    text = stored or _cut(text, _TURN_CHARS)
    if turn.role == "ai":
        calls = [
            c
            for c in f.get("tool_calls") or ()
            if isinstance(c, dict) and c.get("name") not in RECALL_TOOL_NAMES
        ]
        if not text and not calls:
            return None
        line = f"assistant: {text}" if text else "assistant:"
        if calls:
            line += (
                (" | " if text else " ")
                + "called "
                + ", ".join(call_text(str(c.get("name")), c.get("args") or {}) for c in calls)
            )
        return line
    if turn.role == "human":
        return f"user: {text}"
    return f"{turn.role}: {text}" if text else None


def _latest_human(turns: Sequence[TurnView]) -> str | None:
    for t in turns:
        if t.role == "human" and isinstance(t.fields, dict):
            return _content_text(t.fields.get("content", ""))
    return None


def _memory_line(value: dict[str, Any]) -> str:
    for key in ("text", "content", "memory", "value"):
        if isinstance(value.get(key), str):
            return _one_line(value[key])
    return _one_line(_value_text(value))


# --- building ------------------------------------------------------------------------------


_DEFAULT = object()


def build_briefing(
    store: RecallStore,
    agent_id: str,
    *,
    token_budget: int = 2000,
    token_counter: TokenCounter | None = None,
    query: str | None = None,
    exclude_msg_ids: Iterable[str] | None = None,
    memory_namespace: Any = _DEFAULT,
    memory_limit: int = 3,
    tool_hint: bool = False,
    refresh_ttl: bool | None = None,
) -> Briefing:
    """Build the briefing for ``agent_id`` from ``store`` within ``token_budget`` tokens.

    Args:
        token_budget: the most tokens the whole briefing may take (counted as one SystemMessage).
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

    Raises:
        RecallError: ``invalid_value`` when the budget is too small to hold the briefing's
            header (under about 100 tokens) or the counter is unusable.
    """
    if not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget <= 0:
        raise RecallError(
            f"token_budget must be a positive int, got {token_budget!r}", code="invalid_value"
        )
    meter = _Meter(token_budget, token_counter)
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
            query,
            memory_namespace,
            memory_limit,
            tool_hint,
            refresh_ttl,
        )


def _build(
    store: RecallStore,
    agent_id: str,
    meter: _Meter,
    skip: frozenset[str],
    finished: frozenset[tuple[str, int]],
    token_budget: int,
    query: str | None,
    memory_namespace: Any,
    memory_limit: int,
    tool_hint: bool,
    refresh_ttl: bool | None,
) -> Briefing:

    # Everything but the turns is small and read whole; the turns are paged below.
    state = store.working_state(agent_id)
    open_actions = sorted(
        (
            a
            for a in store.actions(agent_id, open_only=True)
            if (a.action_id, a.attempt) not in finished
        ),
        key=lambda a: (a.klass == "idempotent", a.created_at, a.action_id),
    )
    approvals = store.pending_approvals(agent_id)
    pointers = store.pointers(agent_id)

    header = [f"# Briefing: agent {agent_id}, from its records", _intro(open_actions, tool_hint)]
    for line in header:
        if not meter.take(line):
            raise RecallError(
                f"token_budget {token_budget} cannot hold even the briefing's header; give at "
                "least 100 tokens",
                code="invalid_value",
            )
    placed: list[_Section] = [_Section("header", "", [(0, ln) for ln in header])]

    # Fill in priority order: each section takes what fits of what is left.
    if open_actions:
        _place(
            meter,
            placed,
            _Section("open_actions", _DOUBT_TITLE, [(1, _action_line(a)) for a in open_actions]),
        )
    if approvals:
        tools = {p.action_id: _tool_of(store, p.action_id) for p in approvals}
        lines = [(2, _approval_line(p, tools[p.action_id])) for p in approvals]
        _place(meter, placed, _Section("approvals", _APPROVAL_TITLE, lines))
    state_section = _Section("working_state", "## Working state")
    shortened = _place_state(meter, state_section, _state_lines(state))
    if state_section.lines:
        placed.append(state_section)
    if pointers:
        lines = [
            (4, _cut(f"- {p.name}: {p.target}" + (f" ({p.note})" if p.note else ""), _ITEM_CHARS))
            for p in pointers.values()
        ]
        _place(meter, placed, _Section("pointers", "## Pointers", lines))

    turns = _TurnReader(store, agent_id, skip, meter)
    ns = agent_ns(agent_id, "memories") if memory_namespace is _DEFAULT else memory_namespace
    # A cheap range read first: the full-text search only runs when there are memories.
    # (Not a read of that memory: it leaves its TTL alone.)
    if ns and memory_limit > 0 and store.search(tuple(ns), limit=1, refresh_ttl=False):
        q = query if query is not None else _latest_human(turns.first_page())
        found = store.search(
            tuple(ns), query=(q or "")[:500] or None, limit=memory_limit, refresh_ttl=refresh_ttl
        )
        lines = [(5, _cut("- " + _memory_line(it.value), _ITEM_CHARS)) for it in found]
        if lines:
            _place(meter, placed, _Section("memories", "## Relevant memories", lines))

    turns_section, shown = _place_turns(turns, meter)
    turns.remember()
    if turns_section is not None:
        placed.append(turns_section)

    if len(placed) == 1:
        # Nothing recorded beyond what the model sees: say so instead of "resuming".
        fresh = "Nothing is recorded for this agent beyond this conversation yet: a fresh start."
        if tool_hint:
            fresh += " Keep the working state with update_working_state, milestone and set_pointer."
        placed[0].lines[1] = (0, fresh)
    text, tokens = _finish(placed, meter, token_budget)
    return Briefing(
        agent_id=agent_id,
        text=text,
        tokens=tokens,
        token_budget=token_budget,
        sections=tuple(s.name for s in placed if s.lines),
        shortened=shortened,
        turns_shown=shown,
    )


def _intro(open_actions: Sequence[Action], tool_hint: bool) -> str:
    intro = (
        "Resuming from what this agent wrote down (after a crash, or in another process): "
        "trust it and do not redo finished steps."
    )
    if open_actions:
        intro += f" The task is NOT finished while the {len(open_actions)} call(s) below are unconfirmed."
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


def _place(meter: _Meter, placed: list[_Section], section: _Section) -> None:
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
    placed.append(_Section(section.name, section.title, kept))


def _place_state(meter: _Meter, section: _Section, fields: list[tuple[str, str]]) -> bool:
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
    # Share the room out: short fields keep their full length, the rest split what remains,
    # so a huge "notes" cannot push out the goal.
    budget_chars = meter.chars_for(room, "\n".join(lines)) - len(lines)
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    allot = [0] * len(lines)
    remaining = budget_chars
    for n, i in enumerate(order):
        share = remaining // (len(lines) - n)
        allot[i] = min(len(lines[i]), share)
        remaining -= allot[i]
    kept = [_cut(lines[i], allot[i]) for i in range(len(lines)) if allot[i] >= _MIN_PIECE]
    meter.take(section.title)
    placed: list[str] = []
    for ln in kept:
        if meter.cost(ln) <= meter.left - meter.cost(note):
            meter.take(ln)
            placed.append(ln)
    meter.take(note)
    section.lines = [(3, ln) for ln in [*placed, note]]
    return True


class _SkippedPrefixes:
    """Per store and agent: a seq ``upto`` and a set of message ids such that every turn with
    seq <= ``upto`` has its id in the set, learned by earlier briefings.

    Turns are append-only (a trigger refuses UPDATE and DELETE), so what held when it was
    learned holds for good: a later briefing whose excluded ids include the set knows, without
    reading them, that those turns would all be skipped. In a loop that briefs before every
    model call, with the whole conversation in the input, this turns a read of the whole
    history per call into a read of the few turns recorded since the last call.

    An agent whose history has turns the input does not hold, below the newest few, is marked
    (a negative ``upto``): a first small page cannot settle its history, so its next
    ``_RETRY`` briefings read as before, without trying.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[
            RecallStore, dict[str, tuple[int, frozenset[str]]]
        ] = weakref.WeakKeyDictionary()

    def get(self, store: RecallStore, agent_id: str) -> tuple[int, frozenset[str]] | None:
        with self._lock:
            return self._by_store.get(store, {}).get(agent_id)

    def count_down(self, store: RecallStore, agent_id: str) -> tuple[int, frozenset[str]] | None:
        """The entry; a marked one counts one briefing off its wait."""
        with self._lock:
            known = self._by_store.get(store)
            entry = known.get(agent_id) if known is not None else None
            if known is not None and entry is not None and entry[0] < 0:
                known[agent_id] = (entry[0] + 1, entry[1])
            return entry

    def put(self, store: RecallStore, agent_id: str, entry: tuple[int, frozenset[str]]) -> None:
        with self._lock:
            known = self._by_store.setdefault(store, {})
            if len(known) > 4096:  # a long-lived process briefing many agents: start over
                known.clear()
            known[agent_id] = entry


_SKIPPED = _SkippedPrefixes()
_RETRY = 16  # briefings of a marked agent before a small first page is tried again


class _TurnReader:
    """Pages of turns, newest first, each sized to what the budget can still take."""

    def __init__(
        self, store: RecallStore, agent_id: str, skip: frozenset[str], meter: _Meter
    ) -> None:
        self.store = store
        self.agent_id = agent_id
        self.skip = skip
        self.meter = meter
        self.before: int | None = None
        self.done = False
        self.scanned = 0
        self._first: list[TurnView] | None = None
        self._handed_first = False
        # What this briefing learns for the next one (see _SkippedPrefixes).
        self._top: int | None = None  # the newest seq, when a full probe page told it
        self._low_view: int | None = None  # the lowest seq of a turn read and not skipped
        self._reached_start = False
        self._missed = False  # a probe was read and could not settle the history

    def _size(self, unit_cost: float) -> int:
        # Rows still worth reading: what is left over a turn's typical cost, plus the
        # excluded rows still ahead (those are skipped undecoded, so cheap to read).
        want = int(self.meter.left / max(unit_cost, 1.0) * 1.25) + 2
        ahead = max(0, len(self.skip) - self.scanned)
        return max(4, min(want, 256) + min(ahead, 4096))

    def first_page(self) -> list[TurnView]:
        if self._first is None:
            size = self._size(_FIRST_GUESS if self.meter.exact else _FIRST_GUESS / 4)
            probed = self._probe(size)
            self._first = probed if probed is not None else self._read(size)
        return self._first

    def _probe(self, size: int) -> list[TurnView] | None:
        """The newest few turns, when they settle the whole history; else None (and what the
        probe learned is kept for the next briefing).

        The probe is a prefix of the first page the full read would take (at most ``size``
        rows), and it settles the history only when that page and every later one would hold
        no other turn to show: the probe reached the oldest turn, or everything older than it
        is known to be in the input. So the turns shown, the memory query taken from them and
        the text are exactly those of the full read.
        """
        if not self.skip:
            return None  # nothing is skipped, so nothing can be known to be
        entry = _SKIPPED.count_down(self.store, self.agent_id)
        if entry is not None and entry[0] < 0:
            return None
        upto = 0
        fresh = len(self.skip)
        if entry is not None and entry[1] <= self.skip:
            upto, fresh = entry[0], len(self.skip) - len(entry[1])
        # The turns recorded since ``upto`` are mostly in the input (``fresh`` new ids); two
        # more rows so that the page reaches below ``upto`` in the usual case.
        limit = min(fresh + 2, size) if upto else min(2, size)
        page, before = self.store.turn_page(self.agent_id, limit, skip_ids=self.skip)
        if before is None or before <= upto + 1:
            if before is not None:
                self._top = before + limit - 1
            self.done = self._reached_start = True
            self.scanned = size
            self._saw(page)
            return page
        # A full page (seqs are contiguous from 1): the newest seq is known.
        self._top = before + limit - 1
        self._missed = True
        return None

    def next_page(self, unit_cost: float) -> list[TurnView]:
        if not self._handed_first:
            self._handed_first = True
            page, self._first = self.first_page(), None
            return page
        if self.done or self.scanned > len(self.skip) + _SCAN_ROWS:
            return []
        return self._read(self._size(unit_cost))

    def _read(self, limit: int) -> list[TurnView]:
        page, self.before = self.store.turn_page(
            self.agent_id, limit, before=self.before, skip_ids=self.skip
        )
        self.scanned += limit
        self.done = self.before is None
        self._reached_start = self.done
        self._saw(page)
        return page

    def _saw(self, page: list[TurnView]) -> None:
        if page:  # newest first, and each page older than the last
            self._low_view = page[-1].seq

    def remember(self) -> None:
        """Keep what this briefing proved for the next one (see _SkippedPrefixes)."""
        if not self.skip:
            return
        entry = _SKIPPED.get(self.store, self.agent_id)
        if entry is not None and entry[0] < 0:
            return
        if not self._reached_start:
            # The budget was spent (or the scan cap hit) before the oldest turn: nothing is
            # known below the last page. After a probe that did not settle it, the newest
            # turns hold work the input does not, and a probe would miss again.
            if self._missed:
                _SKIPPED.put(self.store, self.agent_id, (-_RETRY, frozenset()))
            return
        # Every turn from seq 1 up to the newest was read (or known skipped): those below the
        # lowest turn shown, and no newer than the newest seq known, were all in the input.
        known = entry[0] if entry is not None and entry[1] <= self.skip else 0
        upto = self._top if self._top is not None else known
        if self._low_view is not None:
            upto = min(upto, self._low_view - 1)
        if self._missed and self._top is not None and upto < self._top:
            # Turns the input does not hold sit below the newest few: a small first page
            # would only add a read to each briefing of this agent for a while.
            _SKIPPED.put(self.store, self.agent_id, (-_RETRY, frozenset()))
            return
        _SKIPPED.put(self.store, self.agent_id, (max(upto, 0), self.skip))


def _place_turns(turns: _TurnReader, meter: _Meter) -> tuple[_Section | None, int]:
    """Recent turns, newest first until the budget is spent, to be printed oldest first."""
    title = (
        "## Earlier turns not in this conversation, oldest first"
        if turns.skip
        else "## Recent turns, oldest first"
    )
    # Reserve room for the title and for the "N earlier turns" note before spending any.
    reserve = meter.cost(title) + meter.cost("(999999999 earlier turns not shown)")
    if meter.left <= reserve:
        return None, 0
    meter.used += reserve
    lines: list[tuple[int, str]] = []
    oldest_seq = 0
    spent = 0
    unit_cost = _FIRST_GUESS if meter.exact else _FIRST_GUESS / 4
    full = False
    while not full:
        page = turns.next_page(unit_cost)
        if not page:
            break
        refs = [t.output_ref for t in page if t.output_ref]
        outputs = _output_items(turns.store, turns.agent_id, refs) if refs else {}
        for t in page:
            line = _turn_line(t, outputs)
            if line is None:
                continue
            cost = meter.cost(line)
            if not meter.take(line):
                full = True
                break
            spent += cost
            lines.append((10 + len(lines), line))
            oldest_seq = t.seq
        if lines:
            unit_cost = spent / len(lines)
    meter.used -= reserve
    if not lines:
        return None, 0
    meter.take(title)
    shown = len(lines)
    if oldest_seq > 1:
        note = f"({oldest_seq - 1} earlier turns not shown)"
        meter.take(note)
        lines.insert(0, (9, note))
    return _Section("turns", title, lines, print_reversed=True), shown


def _output_items(store: RecallStore, agent_id: str, refs: list[str]) -> dict[str, dict[str, Any]]:
    from langgraph.store.base import GetOp

    ns = agent_ns(agent_id, "outputs")
    items = store.batch([GetOp(ns, ref, refresh_ttl=False) for ref in refs])
    return {ref: it.value for ref, it in zip(refs, items, strict=True) if it is not None}  # type: ignore[union-attr]


def _render(sections: list[_Section]) -> str:
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


def _finish(sections: list[_Section], meter: _Meter, budget: int) -> tuple[str, int]:
    """The text and its real count; drops the least important lines if a counter was not
    additive, so the budget holds whatever counter was given."""
    text = _render(sections)
    tokens = meter.counter([SystemMessage(text)])
    while tokens > budget:
        worst = max(
            ((s, i) for s in sections[1:] for i in range(len(s.lines))),
            key=lambda si: si[0].lines[si[1]][0] + si[1] * 1e-6,
            default=None,
        )
        if worst is None:
            raise RecallError(
                f"token_budget {budget} cannot hold even the briefing's header; give at least "
                "100 tokens",
                code="invalid_value",
            )
        sec, i = worst
        del sec.lines[i]
        text = _render(sections)
        tokens = meter.counter([SystemMessage(text)])
    return text, int(tokens)
