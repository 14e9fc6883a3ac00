"""The briefing's history: turns read newest first, a page at a time, only until the budget
is spent, skipping unread the turns an earlier briefing saw the model's input hold."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from ._briefing_lines import (
    MIN_PIECE,
    Meter,
    Section,
    ai_line,
    ai_parts,
    cut,
    turn_line,
    whole_turn_ref,
)
from ._briefing_outcomes import call_outcomes
from .store._records import agent_ns

if TYPE_CHECKING:
    from .store import RecallStore
    from .store._models import TurnView

SCAN_ROWS = 1000  # rows of history read beyond the excluded ones, whatever the budget
# Characters a turn line is first assumed to take. Low on purpose: reading a few rows too
# many costs microseconds, a page too few costs another round trip to the database.
FIRST_GUESS = 60.0


class Known(NamedTuple):
    """Every turn with ``lo <= seq <= hi`` has its id in ``ids`` (see ``SkippedTurns``). A
    negative ``hi`` marks an agent whose next ``-hi`` briefings make no small first read."""

    hi: int
    ids: frozenset[str]
    lo: int = 1
    top: int = 0  # the newest seq when it was learned: ``top - hi`` rows sit above the block


class SkippedTurns:
    """Per store and agent: a block of turns, ``lo`` to ``hi``, whose ids are all in a set,
    learned by earlier briefings.

    Turns are append-only (a trigger refuses UPDATE and DELETE), so what held when it was
    learned holds for good: a later briefing whose excluded ids include the set knows, without
    reading them, that those turns would all be skipped. In a loop that briefs before every
    model call, with the whole conversation in the input, this turns a read of the whole
    history per call into a read of the few turns recorded since the last call. The block
    starts at the oldest turn (``lo`` 1) when the input holds the agent's whole history; when
    the agent has older turns the input does not hold (an earlier thread), it starts above
    them, and the briefing reads the new turns, steps over the block, and reads those.

    An agent whose history has turns the input does not hold above a block that fit its input
    (another thread recorded since) is marked (a negative ``hi``): a first small read would
    miss again, so its next ``RETRY`` briefings read as before, without trying.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[RecallStore, dict[str, Known]]
        self._by_store = weakref.WeakKeyDictionary()

    def get(self, store: RecallStore, agent_id: str) -> Known | None:
        with self._lock:
            return self._by_store.get(store, {}).get(agent_id)

    def count_down(self, store: RecallStore, agent_id: str) -> Known | None:
        """The entry; a marked one counts one briefing off its wait."""
        with self._lock:
            known = self._by_store.get(store)
            entry = known.get(agent_id) if known is not None else None
            if known is not None and entry is not None and entry.hi < 0:
                known[agent_id] = entry._replace(hi=entry.hi + 1)
            return entry

    def put(self, store: RecallStore, agent_id: str, entry: Known) -> None:
        with self._lock:
            known = self._by_store.setdefault(store, {})
            if len(known) > 4096:  # a long-lived process briefing many agents: start over
                known.clear()
            known[agent_id] = entry


SKIPPED = SkippedTurns()
RETRY = 16  # briefings of a marked agent before a small first page is tried again


class TurnReader:
    """Pages of turns, newest first, each sized to what the budget can still take."""

    def __init__(
        self, store: RecallStore, agent_id: str, skip: frozenset[str], meter: Meter
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
        # Turns lo..hi known to be in the input, stepped over unread (from SKIPPED).
        self._block: tuple[int, int] | None = None
        # What this briefing learns for the next one (see SkippedTurns).
        self._top: int | None = None  # the newest seq, when a full first page told it
        self._low_view: int | None = None  # the lowest seq of a turn read and not skipped
        self._high_view: int | None = None  # the highest such seq
        self._reached_start = False
        self._missed = False  # a probe was read and could not settle the history
        self._fit = False  # the probe had a block that this input holds

    def _size(self, unit_cost: float) -> int:
        # Rows still worth reading: what is left over a turn's typical cost, plus the
        # excluded rows still ahead (those are skipped undecoded, so cheap to read).
        want = int(self.meter.left / max(unit_cost, 1.0) * 1.25) + 2
        ahead = max(0, len(self.skip) - self.scanned)
        return max(4, min(want, 256) + min(ahead, 4096))

    def first_page(self) -> list[TurnView]:
        if self._first is None:
            size = self._size(FIRST_GUESS if self.meter.exact else FIRST_GUESS / 4)
            probed = self._probe(size)
            self._first = probed if probed is not None else self._read(size)
        return self._first

    def _probe(self, size: int) -> list[TurnView] | None:
        """The first page, from a small read of the newest turns and what an earlier briefing
        proved; None when that cannot be known (the full first page is then read).

        What this returns is exactly the first page the full read would take (``size`` rows
        from the newest, the skipped ones left out), and the reader is left where the full
        read would be after it, so the turns shown, the memory query taken from them and the
        text are exactly those of the full read. The probe reads the newest turns (mostly the
        ones recorded since the block was learned, all in the input) and two more; when that
        reaches the block, the block is stepped over unread, and the rest of the page comes
        from below it (nothing, when the block starts at the oldest turn).
        """
        if not self.skip:
            return None  # nothing is skipped, so nothing can be known to be
        entry = SKIPPED.count_down(self.store, self.agent_id)
        if entry is not None and (entry.hi < 0 or not entry.ids <= self.skip):
            # Marked, or learned from another input (a window over the conversation that has
            # moved on): a small read would not settle anything.
            return None
        lo, hi, fresh = 1, 0, len(self.skip)
        if entry is not None:
            lo, hi, fresh = entry.lo, entry.hi, len(self.skip) - len(entry.ids)
            fresh += max(0, entry.top - hi)  # rows that were above the block already
            self._fit = hi > 0
        # The turns recorded since the block are mostly in the input (``fresh`` new ids); two
        # more rows so that the page reaches into the block in the usual case.
        limit = min(fresh + 2, size) if hi else min(2, size)
        page, before = self.store.turn_page(self.agent_id, limit, skip_ids=self.skip)
        self._saw(page)
        if before is not None:
            # A full page (seqs are contiguous from 1): the newest seq is known.
            self._top = before + limit - 1
        if before is None or (lo <= 1 and before <= hi + 1):
            self.done = self._reached_start = True
            self.scanned = size
            return page
        if before > hi + 1:
            self._missed = True
            return None
        self._block = (lo, hi)
        self.before, self.scanned = before, limit
        rest = size - limit
        return page + self._page(rest) if rest > 0 else page

    def next_page(self, unit_cost: float) -> list[TurnView]:
        """The next page holding a turn to show; empty once the history (or the scan) ends."""
        if not self._handed_first:
            self._handed_first = True
            page, self._first = self.first_page(), None
            if page or self.done:
                return page
        # A page whose every row is in the input comes back empty, and is not the end: with
        # more than a page of the conversation in the input (about 4k messages), stopping there
        # left out the older turns the input does not hold, and the briefing, having proved
        # nothing, re-read that page at every model call. Skipped rows are never decoded, and
        # the scan stays capped.
        while True:
            if self.done or self.scanned > len(self.skip) + SCAN_ROWS:
                return []
            page = self._page(self._size(unit_cost))
            if page:
                return page

    def _page(self, limit: int) -> list[TurnView]:
        """The full read's next page of ``limit`` rows, its rows in the known block not read.

        The pages keep the full read's bounds (a page wholly in the block is passed over as
        the empty page it would be): the scan cap is checked between pages, so a page cut at
        the block's bottom instead moved where the cap ends the read, and what it shows."""
        if self._block is not None and self.before is not None:
            lo, hi = self._block
            if lo < self.before <= hi + 1:
                inside = min(limit, self.before - lo)
                self.scanned += inside  # as if read: the scan cap counts them
                self.before -= inside  # lo > 1 (see _probe), so the page was full
                if inside == limit:
                    return []
                limit -= inside  # the rest of the page, below the block
        return self._read(limit)

    def _read(self, limit: int) -> list[TurnView]:
        first = self.before is None
        page, self.before = self.store.turn_page(
            self.agent_id, limit, before=self.before, skip_ids=self.skip
        )
        if first and self.before is not None and self._top is None:
            self._top = self.before + limit - 1  # a full first page: the newest seq
        self.scanned += limit
        self.done = self.before is None
        self._reached_start = self.done
        self._saw(page)
        return page

    def _saw(self, page: list[TurnView]) -> None:
        if page:  # newest first, and each page older than the last
            self._low_view = page[-1].seq
            if self._high_view is None:
                self._high_view = page[0].seq

    def remember(self) -> None:
        """Keep what this briefing proved for the next one (see SkippedTurns)."""
        if not self.skip:
            return
        entry = SKIPPED.get(self.store, self.agent_id)
        if entry is not None and entry.hi < 0:
            return
        if self._missed and self._fit:
            # Turns the input does not hold sit above a block it does (another thread
            # recorded since): a small first read would miss again for a while.
            SKIPPED.put(self.store, self.agent_id, Known(-RETRY, frozenset()))
            return
        top = self._top
        if top is None:
            return  # the whole history was one short page: nothing worth keeping
        # Rows were read from the newest down, contiguously but for a block known skipped, so
        # every row above the newest one not skipped was skipped (the top block) and, when
        # the oldest was reached, every row below the lowest one not skipped (the bottom one).
        if self._high_view is None:
            lo = 1 if self._reached_start or self.before is None else self.before
            if self._block is not None and self._block[0] <= lo <= self._block[1] + 1:
                lo = self._block[0]  # the read stopped in the block (the cap): keep all of it
            blocks = [(lo, top)]
        else:
            blocks = [(self._high_view + 1, top)]
            if self._reached_start and self._low_view is not None:
                blocks.append((1, min(top, self._low_view - 1)))
        if self._block is not None:
            # The block stepped over still holds (its ids are in this input): kept when it is
            # the largest, so a turn the input does not hold recorded above it (another thread)
            # does not leave the next briefings reading it all again.
            blocks.append(self._block)
        lo, hi = max(blocks, key=lambda b: b[1] - b[0])
        if hi < lo:
            if self._missed:
                # Turns the input does not hold are the newest: a small first read would
                # miss again for a while.
                SKIPPED.put(self.store, self.agent_id, Known(-RETRY, frozenset()))
            return
        SKIPPED.put(self.store, self.agent_id, Known(hi, self.skip, lo, top))


def place_turns(turns: TurnReader, meter: Meter) -> tuple[Section | None, int]:
    """Recent turns, newest first until the budget is spent, to be printed oldest first.

    Two passes. The first reads pages until the turns' lines without their calls' outcomes
    (a lower bound of their cost) fill the budget; then the outcomes of all those turns'
    calls are looked up in one read (``call_outcomes``); the second pass places the whole
    lines, newest first, as many as fit: a subset of the turns read, never more."""
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
    before = meter.used
    read, outputs = _read_turns(turns, meter)
    meter.used = before  # the lines are taken below, with their outcomes
    outcomes = call_outcomes(turns.store, turns.agent_id, [t for t, _ in read]) if read else {}
    lines: list[tuple[int, str]] = []
    oldest_seq = 0
    for t, bare in read:
        said = outcomes.get(t.seq, {})
        line = turn_line(t, outputs, said) if said else bare
        if line is None:
            continue
        full = meter.cost(line) > meter.left
        if full:
            # The first turn (newest first) that does not fit is shortened to the room
            # left, not left out: a turn of many tool calls, its line uncapped, is often
            # the one the agent stopped at.
            line = _shortened_turn(t, line, outputs, said, meter)
            if line is None:
                break
        meter.take(line)
        lines.append((10 + len(lines), line))
        oldest_seq = t.seq
        if full:
            break
    meter.used -= reserve
    if not lines:
        return None, 0
    meter.take(title)
    shown = len(lines)
    if oldest_seq > 1:
        note = f"({oldest_seq - 1} earlier turns not shown)"
        meter.take(note)
        lines.insert(0, (9, note))
    return Section("turns", title, lines, print_reversed=True), shown


def _read_turns(
    turns: TurnReader, meter: Meter
) -> tuple[list[tuple[TurnView, str | None]], dict[str, dict[str, Any]]]:
    """Turns newest first, each with its line without outcomes, until those lines fill what
    the meter has left (the one that overflows it included: it may be shown shortened), and
    the stored outputs they name. Spends from the meter as it goes, since the reader sizes its
    pages by what is left; the caller gives it back."""
    read: list[tuple[TurnView, str | None]] = []
    outputs: dict[str, dict[str, Any]] = {}
    spent = 0
    shown = 0
    unit_cost = FIRST_GUESS if meter.exact else FIRST_GUESS / 4
    while True:
        page = turns.next_page(unit_cost)
        if not page:
            return read, outputs
        refs = [t.output_ref for t in page if t.output_ref]
        if refs:
            outputs.update(output_items(turns.store, turns.agent_id, refs))
        for t in page:
            line = turn_line(t, outputs)
            read.append((t, line))
            if line is None:
                continue
            cost = meter.cost(line)
            if cost > meter.left:
                return read, outputs
            meter.used += cost
            spent += cost
            shown += 1
        if shown:
            unit_cost = spent / shown


def _shortened_turn(
    turn: TurnView,
    line: str,
    outputs: dict[str, dict[str, Any]],
    said: dict[str, str],
    meter: Meter,
) -> str | None:
    """``line`` shortened to the room left. An assistant turn keeps its calls whole, each
    with its outcome, and cuts its text first, then leaves out its last calls (counted):
    a call cut in the middle would show no outcome, and a model may well make it again."""
    ref = whole_turn_ref(turn.seq)
    parts = ai_parts(turn, outputs, said)
    if parts is not None and parts[1]:
        text, calls = parts
        for keep in range(len(calls), 0, -1):
            fixed = ai_line("", calls[:keep], len(calls) - keep) + ref
            if meter.cost(fixed) > meter.left:
                continue
            if text:
                room = meter.chars_for(meter.left, fixed) - len(fixed) - 3
                while room >= MIN_PIECE:
                    short = ai_line(cut(text, room), calls[:keep], len(calls) - keep) + ref
                    if meter.cost(short) <= meter.left:
                        return short
                    room = room * 9 // 10
            return fixed
    return shortened(line, meter, ref)


def shortened(line: str, meter: Meter, ref: str) -> str | None:
    """``line`` cut to what the meter has left, ending with ``ref`` (what reads the turn
    whole: the cut took its end, often its calls), or None when under ``MIN_PIECE`` is left."""
    body = line.removesuffix(ref)
    chars = meter.chars_for(meter.left, line) - len(ref)
    while chars >= MIN_PIECE:
        short = cut(body, chars) + ref
        if meter.cost(short) <= meter.left:
            return short
        chars = chars * 9 // 10  # a custom counter's estimate was short: try a little less
    return None


def output_items(store: RecallStore, agent_id: str, refs: list[str]) -> dict[str, dict[str, Any]]:
    from langgraph.store.base import GetOp

    ns = agent_ns(agent_id, "outputs")
    items = store.batch([GetOp(ns, ref, refresh_ttl=False) for ref in refs])
    return {ref: it.value for ref, it in zip(refs, items, strict=True) if it is not None}  # type: ignore[union-attr]
