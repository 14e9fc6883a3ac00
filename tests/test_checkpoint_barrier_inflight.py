"""The durability barrier answers a checkpoint this process is still writing from memory: it
waits for that put to return instead of reading the saver (which would queue behind the very
put it waits for), and still says False when that put fails."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_recall.store import RecallStore


class _GatedSaver(InMemorySaver):
    """An in-memory saver whose put waits for ``release`` and counts ``get_tuple`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False
        self.reads = 0

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self.entered.set()
        assert self.release.wait(60), "the test never released the put"
        if self.fail:
            raise RuntimeError("refused")
        return super().put(config, checkpoint, metadata, new_versions)

    def get_tuple(self, config: Any) -> Any:
        self.reads += 1
        return super().get_tuple(config)


def _put_in_background(cp: Any, config: Any, checkpoint: Any) -> threading.Thread:
    def run() -> None:
        try:
            cp.put(config, checkpoint, {"source": "loop", "step": 1}, {})
        except RuntimeError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("fail", [False, True])
def test_waiting_on_a_checkpoint_being_written_here_reads_nothing(
    store: RecallStore, fail: bool
) -> None:
    inner = _GatedSaver()
    inner.fail = fail
    cp = store.checkpointer(inner, lease_ttl=30)
    config = {"configurable": {"thread_id": "t-barrier", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    writer = _put_in_background(cp, config, checkpoint)
    assert inner.entered.wait(60)
    answer: list[bool] = []
    # The waiter's own timeout is far beyond the joins below: it must be woken by the put's
    # return (or failure), not find the answer once its timeout runs out.
    waiter = threading.Thread(
        target=lambda: answer.append(cp.wait_durable(config, checkpoint["id"], timeout=600)),
        daemon=True,
    )
    waiter.start()
    # The waiter is blocked on the put in flight; only then let the put finish (or fail).
    while waiter.is_alive() and not cp._shared.durable._cond._waiters:  # type: ignore[attr-defined]
        waiter.join(0.01)
    reads_while_waiting = inner.reads
    inner.release.set()
    writer.join(60)
    waiter.join(60)
    assert not waiter.is_alive(), "the waiter was not woken when the put returned"
    assert answer == [not fail]
    assert reads_while_waiting == 0
    if not fail:
        # Written: a later wait answers from memory too.
        assert cp.wait_durable(config, checkpoint["id"], timeout=1) is True
    cp.close()
