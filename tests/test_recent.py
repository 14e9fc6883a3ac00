"""``Recent``: the bounded per-agent memory of a long-lived process."""

from __future__ import annotations

import threading

from langgraph_recall._recent import RECENT_AGENTS, Recent


def test_keeps_the_most_recently_set_keys() -> None:
    seen: Recent[str, int] = Recent(limit=3)
    for i, key in enumerate("abcd"):
        seen[key] = i
    assert list(seen) == ["b", "c", "d"]
    seen["b"] = 10  # set again: now the newest
    seen["e"] = 4
    assert list(seen) == ["d", "b", "e"]
    assert seen.pop("d") == 3 and seen.pop("nobody") is None
    assert dict(seen) == {"b": 10, "e": 4}
    assert Recent().limit == RECENT_AGENTS


def test_threads_setting_at_once_keep_the_bound() -> None:
    seen: Recent[tuple[int, int], int] = Recent(limit=50)

    def fill(t: int) -> None:
        for i in range(2000):
            seen[(t, i)] = i
            seen.pop((t, i - 7))

    threads = [threading.Thread(target=fill, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) <= 50
