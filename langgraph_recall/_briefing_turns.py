"""The briefing's history: turns read newest first, a page at a time, only until the budget
is spent, skipping unread the turns an earlier briefing saw the model's input hold."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from ._briefing_lines import MIN_PIECE, Meter, Section, cut, turn_line, whole_turn_ref
from .store._records import agent_ns

if TYPE_CHECKING:
    from .store import RecallStore
    from .store._models import TurnView

SCAN_ROWS = 1000  # rows of history read beyond the excluded ones, whatever the budget
# Characters a turn line is first assumed to take. Low on purpose: reading a few rows too
# many costs microseconds, a page too few costs another round trip to the database.
FIRST_GUESS = 60.0


class SkippedPrefixes:
    """Per store and agent: a seq ``upto`` and a set of message ids such that every turn with
    seq <= ``upto`` has its id in the set, learned by earlier briefings.

    Turns are append-only (a trigger refuses UPDATE and DELETE), so what held when it was
    learned holds for good: a later briefing whose excluded ids include the set knows, without
    reading them, that those turns would all be skipped. In a loop that briefs before every
    model call, with the whole conversation in the input, this turns a read of the whole
    history per call into a read of the few turns recorded since the last call.

    An agent whose history has turns the input does not hold, below the newest few, is marked
    (a negative ``upto``): a first small page cannot settle its history, so its next
    ``RETRY`` briefings read as before, without trying.
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


SKIPPED = SkippedPrefixes()
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
        # What this briefing learns for the next one (see SkippedPrefixes).
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
            size = self._size(FIRST_GUESS if self.meter.exact else FIRST_GUESS / 4)
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
        entry = SKIPPED.count_down(self.store, self.agent_id)
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
        while not (self.done or self.scanned > len(self.skip) + SCAN_ROWS):
            page = self._read(self._size(unit_cost))
            if page:
                return page
        return []

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
        """Keep what this briefing proved for the next one (see SkippedPrefixes)."""
        if not self.skip:
            return
        entry = SKIPPED.get(self.store, self.agent_id)
        if entry is not None and entry[0] < 0:
            return
        if not self._reached_start:
            # The budget was spent (or the scan cap hit) before the oldest turn: nothing is
            # known below the last page. After a probe that did not settle it, the newest
            # turns hold work the input does not, and a probe would miss again.
            if self._missed:
                SKIPPED.put(self.store, self.agent_id, (-RETRY, frozenset()))
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
            SKIPPED.put(self.store, self.agent_id, (-RETRY, frozenset()))
            return
        SKIPPED.put(self.store, self.agent_id, (max(upto, 0), self.skip))


def place_turns(turns: TurnReader, meter: Meter) -> tuple[Section | None, int]:
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
    unit_cost = FIRST_GUESS if meter.exact else FIRST_GUESS / 4
    full = False
    while not full:
        page = turns.next_page(unit_cost)
        if not page:
            break
        refs = [t.output_ref for t in page if t.output_ref]
        outputs = output_items(turns.store, turns.agent_id, refs) if refs else {}
        for t in page:
            line = turn_line(t, outputs)
            if line is None:
                continue
            if meter.cost(line) > meter.left:
                # The first turn (newest first) that does not fit is shortened to the room
                # left, not left out: a turn of many tool calls, its line uncapped, is often
                # the one the agent stopped at.
                full = True
                line = shortened(line, meter, whole_turn_ref(t.seq))
                if line is None:
                    break
            cost = meter.cost(line)
            meter.take(line)
            spent += cost
            lines.append((10 + len(lines), line))
            oldest_seq = t.seq
            if full:
                break
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
    return Section("turns", title, lines, print_reversed=True), shown


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
