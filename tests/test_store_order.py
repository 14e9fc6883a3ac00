"""An agent's actions come back in the order they were claimed, even within one clock tick."""

from __future__ import annotations

from langgraph_recall.store import RecallStore


def test_actions_keep_claim_order_when_ids_sort_the_other_way(store: RecallStore) -> None:
    # Ids that sort in reverse of the claim order: ordering by time (milliseconds on SQLite)
    # and then by id would list same-millisecond claims backwards, and undo would walk them
    # in the wrong order.
    ids = [f"z{99 - i:02d}" for i in range(30)]
    for action_id in ids:
        store.claim("agent", action_id, tool="t", args={"i": action_id}, args_digest=action_id)
    assert [a.action_id for a in store.actions("agent")] == ids
    assert [a.action_id for a in store.actions("agent", open_only=True)] == ids
