"""Shared benchmark helpers: interleaved rounds, medians with their spread, a markdown report.

A benchmark script builds ``Case`` objects (one operation of one subject, timed call by call)
and hands them to ``run_interleaved``: every round runs every case once, in an order that
changes from round to round (``orders``), so a slow patch of the machine (other jobs, a disk
flush) lands on all cases alike instead of on whichever happened to run then, and no case
always runs right after the same other one. Figures are medians of all calls, with the 10th-90th
percentile and the range of the per-round medians as the spread.

``report`` turns the results into markdown tables and ``write_report`` saves a results file
under ``benchmarks/results/`` with the command that reproduces it and the machine it ran on.

Example::

    cases = [Case("get", "MyStore", lambda i: store.get(ns, f"k{i % 100}"), calls=500)]
    results = run_interleaved(cases, rounds=7)
    write_report("results/x.md", "X", command, [("Reads", table(results))])
"""

from __future__ import annotations

import gc
import math
import os
import platform
import secrets
import statistics
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any


@dataclass
class Case:
    """One thing to time: ``fn(i)`` performs operation number ``i`` of ``subject``.

    ``per`` divides each call's time (a call that records a batch of 100 messages has
    ``per=100``, so figures are per message). ``setting`` names the durability or other
    setting the figure depends on; it is printed beside the figure. ``setup``, when given,
    builds the input of operation ``i`` untimed, and ``fn`` gets it instead of ``i`` (a batch
    of messages to record: building LangChain messages is not the recording's cost).
    """

    operation: str
    subject: str
    fn: Callable[[Any], object]
    calls: int = 200
    per: int = 1
    setting: str = ""
    warmup: int = 5
    setup: Callable[[int], object] | None = None
    samples: list[float] = field(default_factory=list)  # seconds per unit, every call
    round_medians: list[float] = field(default_factory=list)
    _next: int = 0  # operation counter, continues across rounds so keys stay fresh

    def run_round(self) -> None:
        for _ in range(self.warmup if not self.samples else 0):
            self.fn(self._input())
        timings = []
        for _ in range(self.calls):
            given = self._input()
            start = time.perf_counter()
            self.fn(given)
            timings.append((time.perf_counter() - start) / self.per)
        self.samples.extend(timings)
        self.round_medians.append(statistics.median(timings))

    def _input(self) -> object:
        i = self._next
        self._next += 1
        return self.setup(i) if self.setup is not None else i

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples) * 1e6

    def percentile_us(self, q: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def orders(n: int) -> list[list[int]]:
    """Orders of ``n`` cases in which each case runs right after each other one equally often.

    What a case leaves behind (garbage, a background thread's flush, a cold cache) slows the
    case after it. In a rotated list every case always follows the same one: with the subjects
    plain, plain again (the A/A control) and langgraph-recall, plain always ran after
    langgraph-recall and its copy after plain, and the control read 0.04 ms a call off zero in
    two 101-round runs. A Williams design balances it: the first order is 0, 1, n-1, 2, n-2...,
    the next ones add 1, 2... to every index (mod n); for an odd n their mirror images follow.
    """
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low if len(first) % 2 else high)
        if len(first) % 2:
            high -= 1
        else:
            low += 1
    out = [[(i + shift) % n for i in first] for shift in range(n)]
    if n % 2:
        out += [row[::-1] for row in out]
    return out


def run_interleaved(
    cases: Sequence[Case], rounds: int, *, progress: Callable[[str], None] | None = None
) -> list[Case]:
    """Run ``rounds`` rounds; each runs every case once, in the next of ``orders``."""
    plan = orders(len(cases))
    for r in range(rounds):
        for case in (cases[i] for i in plan[r % len(plan)]):
            gc.collect()
            case.run_round()
        if progress:
            progress(f"round {r + 1}/{rounds} done")
    return list(cases)


def find(cases: Sequence[Case], operation: str, subject: str) -> Case:
    """The case for ``operation`` of ``subject`` (KeyError if there is none)."""
    for case in cases:
        if case.operation == operation and case.subject == subject:
            return case
    raise KeyError((operation, subject))


def paired_ratio(case: Case, baseline: Case, factor: float = 1.0) -> float:
    """Median over rounds of ``case``'s round median / (``factor`` x ``baseline``'s round median).

    Both ran in the same round, so a loaded machine slows both: this ratio is steadier than
    the ratio of the overall medians.
    """
    ratios = [
        c / (factor * b) for c, b in zip(case.round_medians, baseline.round_medians, strict=True)
    ]
    return statistics.median(ratios)


@dataclass(frozen=True)
class Spread:
    """Per-round values summed up: their median, quartiles, and an interval for the median.

    The quartiles say how far one round's value strays (the machine's noise); they do not
    narrow with more rounds. ``lo``-``hi`` is a distribution-free confidence interval for the
    median itself (order statistics: the k-th value from each end, k the largest for which the
    binomial tail leaves at least ``confidence`` between them); it narrows as rounds are added.
    At 21 rounds it is the 6th to the 16th value, the quartiles again, at 97% confidence; at
    61 rounds the 23rd to the 39th. Below 6 rounds no such interval exists at 95%: ``lo`` and
    ``hi`` are then infinite and every verdict is "unresolved".
    """

    median: float
    q1: float
    q3: float
    lo: float
    hi: float
    n: int

    def show(self, spec: str = ".3f") -> str:
        """``**median** [q1, q3]``, each formatted with ``spec``."""
        return f"**{self.median:{spec}}** [{self.q1:{spec}}, {self.q3:{spec}}]"

    def interval(self, spec: str = ".3f") -> str:
        """``lo to hi``: the median's confidence interval."""
        return f"{self.lo:{spec}} to {self.hi:{spec}}"


def median_interval(ordered: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The distribution-free ``confidence`` interval for the median of sorted values."""
    n = len(ordered)
    tail = (1.0 - confidence) / 2
    k, below = 0, 0.0  # k values cut from each end; below = P(Binomial(n, 1/2) < k + 1)
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > tail:
            break
        k += 1
    if k == 0:
        return -math.inf, math.inf
    return ordered[k - 1], ordered[n - k]


def spread(values: Sequence[float], confidence: float = 0.95) -> Spread:
    """Median, quartiles and the median's confidence interval of per-round ``values``."""
    ordered = sorted(values)
    last = len(ordered) - 1
    lo, hi = median_interval(ordered, confidence)
    return Spread(
        statistics.median(ordered),
        ordered[last // 4],
        ordered[(3 * last + 3) // 4],
        lo,
        hi,
        len(ordered),
    )


def verdict(s: Spread, limit: float | None) -> str:
    """'yes' when the median's whole confidence interval is under ``limit``, '**no**' when it
    is all over it; otherwise the rounds could not tell (run more of them)."""
    if limit is None:
        return "-"
    if s.hi < limit:
        return "yes"
    if s.lo > limit:
        return "**no**"
    return f"unresolved (the median's interval straddles it after {s.n} rounds)"


def table(
    cases: Sequence[Case], *, baseline: Case | None = None, baseline_factor: float = 1.0
) -> str:
    """A markdown table of ``cases``: median, p10-p90, the range of round medians, and the
    ``paired_ratio`` to ``baseline`` when one is given."""
    head = ["operation", "subject", "setting", "median µs", "p10-p90 µs", "round medians µs"]
    if baseline is not None:
        head.append("x baseline")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        lo, hi = min(c.round_medians) * 1e6, max(c.round_medians) * 1e6
        row = [
            c.operation,
            c.subject,
            c.setting,
            f"**{c.median_us:.1f}**",
            f"{c.percentile_us(0.1):.1f}-{c.percentile_us(0.9):.1f}",
            f"{lo:.1f}-{hi:.1f}",
        ]
        if baseline is not None:
            row.append(f"{paired_ratio(c, baseline, baseline_factor):.2f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def machine(packages: Sequence[str] = ()) -> str:
    """A short description of where the figures were taken (load average included)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?", "?", "?")
    versions = []
    for name in packages:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return (
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        + (f"; {', '.join(versions)}" if versions else "")
    )


def write_report(
    path: str,
    title: str,
    command: str,
    sections: Sequence[tuple[str, str]],
    *,
    intro: str = "",
    about: str = "",
) -> None:
    """Write a markdown results file: title, how to reproduce, the machine, then sections."""
    parts = [f"# {title}", ""]
    if intro:
        parts += [intro.strip(), ""]
    parts += ["Reproduce with:", "", "```", command, "```", ""]
    if about:
        parts += [f"Machine: {about}", ""]
    for heading, body in sections:
        parts += [f"## {heading}", "", body.strip(), ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))


@contextmanager
def pg_database(admin_dsn: str, prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database on the server of ``admin_dsn`` (its DSN), dropped after."""
    import psycopg

    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            parts = urllib.parse.urlsplit(admin_dsn)
            yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
