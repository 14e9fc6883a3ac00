"""The benchmarks' verdicts: the median's distribution-free interval and what it decides.

A target is judged met by ``benchmarks/_harness.py`` only when this interval lies under it, so
a wrong rank here would print "yes" for a figure the rounds cannot support.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _harness import Case, median_interval, orders, run_interleaved, spread, verdict  # noqa: E402


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= true median <= x_(n+1-k)) for n values from a continuous distribution."""
    outside = sum(math.comb(n, j) for j in range(k)) / 2**n
    return 1 - 2 * outside


@pytest.mark.parametrize("n", [6, 7, 11, 21, 22, 41, 61, 100])
def test_interval_is_the_narrowest_with_95_percent(n: int) -> None:
    lo, hi = median_interval(list(range(1, n + 1)))
    k = int(lo)
    assert hi == n + 1 - k  # symmetric ranks
    assert _coverage(n, k) >= 0.95
    assert _coverage(n, k + 1) < 0.95  # one rank narrower would not hold 95%


def test_known_ranks() -> None:
    assert median_interval(list(range(1, 22))) == (6, 16)  # 21 rounds: the quartiles
    assert median_interval(list(range(1, 62))) == (23, 39)


def test_too_few_rounds_never_decide() -> None:
    s = spread([0.1, 0.1, 0.1, 0.1, 0.1])
    assert (s.lo, s.hi) == (-math.inf, math.inf)
    assert verdict(s, 0.25).startswith("unresolved")


def test_verdict_reads_the_interval_not_the_median() -> None:
    under = spread([0.1 + i * 0.001 for i in range(21)])
    assert verdict(under, 0.25) == "yes"
    over = spread([0.3 + i * 0.001 for i in range(21)])
    assert verdict(over, 0.25) == "**no**"
    # Median under the limit, but a quarter of the rounds above it: not decided.
    straddle = spread([0.1] * 12 + [0.4] * 9)
    assert straddle.median < 0.25
    assert verdict(straddle, 0.25).startswith("unresolved")
    assert verdict(under, None) == "-"


@pytest.mark.parametrize("n", range(2, 9))
def test_each_case_runs_after_each_other_equally_often(n: int) -> None:
    # A case slows the one after it (its garbage, its background flushes): with a rotated list
    # the same case always came first, and the A/A control read off zero.
    plan = orders(n)
    assert all(sorted(order) == list(range(n)) for order in plan)
    after = Counter((o[i], o[i + 1]) for o in plan for i in range(n - 1))
    assert len(after) == n * (n - 1) and len(set(after.values())) == 1
    first = Counter(o[0] for o in plan)
    assert len(first) == n and len(set(first.values())) == 1  # and each starts equally often


def test_rounds_follow_the_balanced_orders() -> None:
    ran: list[str] = []
    cases = [
        Case("op", name, lambda i, name=name: ran.append(name), calls=1, warmup=0) for name in "abc"
    ]
    run_interleaved(cases, rounds=6)
    rounds = [ran[i : i + 3] for i in range(0, 18, 3)]
    assert rounds == [["abc"[i] for i in order] for order in orders(3)]
