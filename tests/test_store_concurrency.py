"""Real processes racing on one database, released together: claims, turn appends, leases,
approval spends and the first open of a fresh database. SQLite and PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

import pytest
from fix_store import ok_results, run_together
from langchain_core.messages import HumanMessage

from langgraph_recall._errors import ApprovalMismatch, LeaseHeld
from langgraph_recall.store import RecallStore

pytestmark = pytest.mark.slow


# --- working state ---------------------------------------------------------------------------


def _revise_own_field(store: RecallStore, n: int) -> int:
    for j in range(10):
        store.update_working_state("ag", **{f"field_{n}": j})
    return n


def test_eight_processes_revising_the_working_state_lose_no_field(
    store: RecallStore, store_target: str
) -> None:
    # Each update builds on the state it reads: read before the agent's row lock, two updates
    # built on the same state and the later one dropped the other's field.
    store.update_working_state("ag", goal="g")
    results = ok_results(run_together(store_target, _revise_own_field, [(n,) for n in range(8)]))
    assert results == list(range(8))
    assert store.working_state("ag") == {"goal": "g", **{f"field_{n}": 9 for n in range(8)}}


# --- claims --------------------------------------------------------------------------------


def _claim_shared(store: RecallStore, n: int) -> tuple[str, int, str | None]:
    c = store.claim(
        "ag", "act-shared", tool="send_email", args={"to": "x"}, args_digest="d", thread_id=f"p{n}"
    )
    return c.status, c.action.attempt, c.action.thread_id


def test_eight_processes_claim_one_action_and_exactly_one_wins(
    store: RecallStore, store_target: str
) -> None:
    results = ok_results(run_together(store_target, _claim_shared, [(n,) for n in range(8)]))
    statuses = sorted(r[0] for r in results)
    assert statuses == ["claimed"] + ["in_doubt"] * 7
    winner = next(r[2] for r in results if r[0] == "claimed")
    assert {r[2] for r in results} == {winner}, "every loser sees the winner's intent"
    assert {r[1] for r in results} == {1}
    with store._db.tx() as tx:
        assert tx.all(
            "SELECT attempt, thread_id FROM recall_actions WHERE action_id = 'act-shared'"
        ) == [(1, winner)]


def _end_shared(store: RecallStore, n: int) -> tuple[bool, int]:
    return store.end("act-ending", 1, "done", result=f"answer {n}"), n


def test_eight_processes_end_one_attempt_and_exactly_one_end_is_kept(
    store: RecallStore, store_target: str
) -> None:
    # A call's end is set once in its intent's row (schema v3): of the tool's own process, a
    # resolver and a person ending it at the same moment, one end is kept, the others are told
    # (False) and change nothing; none of them fails.
    assert store.claim("ag", "act-ending", tool="t", args={}, args_digest="d").claimed
    results = ok_results(run_together(store_target, _end_shared, [(n,) for n in range(8)]))
    winners = [n for ended, n in results if ended]
    assert len(winners) == 1, results
    action = store.action("act-ending")
    assert (action.status, action.result) == ("done", f"answer {winners[0]}")
    assert store.actions("ag", open_only=True) == []


# --- turns ---------------------------------------------------------------------------------


def _append(store: RecallStore, agent: str, count: int, chunk: int, tag: str) -> int:
    new = 0
    for start in range(0, count, chunk):
        msgs = [HumanMessage(f"{tag}{i}", id=f"{tag}{i}") for i in range(start, start + chunk)]
        new += store.record(agent, msgs)
    return new


def test_twenty_processes_append_turns_for_their_agents_and_nothing_is_lost(
    store: RecallStore, store_target: str
) -> None:
    argsets = [(f"agent-{n}", 60, 6, f"a{n}-") for n in range(20)]
    assert ok_results(run_together(store_target, _append, argsets)) == [60] * 20
    for agent, count, _, tag in argsets:
        turns = store.turns(agent)
        assert [t.msg_id for t in turns] == [f"{tag}{i}" for i in range(count)]
        assert [t.seq for t in turns] == list(range(1, count + 1))


def test_processes_appending_to_one_agent_get_distinct_gapless_sequence_numbers(
    store: RecallStore, store_target: str
) -> None:
    argsets = [("shared", 30, 3, f"p{n}-") for n in range(8)]
    assert ok_results(run_together(store_target, _append, argsets)) == [30] * 8
    turns = store.turns("shared")
    assert [t.seq for t in turns] == list(range(1, 241))
    for _, count, _, tag in argsets:
        mine = [t.msg_id for t in turns if t.msg_id.startswith(tag)]
        assert mine == [f"{tag}{i}" for i in range(count)], "each writer's order is kept"


def test_processes_recording_the_same_messages_record_each_once(
    store: RecallStore, store_target: str
) -> None:
    # Three agents, three races: a single round sometimes let the writers pass one another
    # without colliding, which would leave the losing path untried.
    for agent in ("dup-a", "dup-b", "dup-c"):
        argsets = [(agent, 40, 4, "same-") for _ in range(8)]
        assert sum(ok_results(run_together(store_target, _append, argsets))) == 40
        turns = store.turns(agent)
        assert [t.msg_id for t in turns] == [f"same-{i}" for i in range(40)]
        # Numbered without gaps, and the next message comes next: a writer that lost a race to
        # another recorder of the same messages wrote nothing (no number handed out twice or
        # lost).
        assert [t.seq for t in turns] == list(range(1, 41))
        assert store.record(agent, [HumanMessage("after the race", id="after")]) == 1
        assert store.turns(agent, last=1)[0].seq == 41
        assert {a.agent_id: a.turns for a in store.agents()}[agent] == 41


# --- leases and approvals ------------------------------------------------------------------


def _acquire(store: RecallStore, holder: str) -> tuple[str, Any]:
    try:
        return "won", store.acquire_lease("ag", holder, 120.0).epoch
    except LeaseHeld as held:
        return "held", held.details["holder"]


def test_lease_race_has_exactly_one_winner(store: RecallStore, store_target: str) -> None:
    results = ok_results(run_together(store_target, _acquire, [(f"w{n}",) for n in range(8)]))
    winners = [f"w{n}" for n, r in enumerate(results) if r[0] == "won"]
    assert len(winners) == 1
    assert [r[1] for r in results if r[0] == "won"] == [1]
    assert {r[1] for r in results if r[0] == "held"} == set(winners)
    assert store.lease("ag").holder == winners[0]


def test_lease_race_after_expiry_has_exactly_one_winner(
    store: RecallStore, store_target: str
) -> None:
    store.acquire_lease("ag", "old-holder", 120.0)
    with store._db.tx(write=True) as tx:  # the old holder died long ago
        tx.run("UPDATE recall_leases SET expires_at = 0 WHERE agent_id = 'ag'")
    results = ok_results(run_together(store_target, _acquire, [(f"w{n}",) for n in range(8)]))
    assert sorted(r[0] for r in results) == ["held"] * 7 + ["won"]
    assert [r[1] for r in results if r[0] == "won"] == [2]


def _spend(store: RecallStore, attempt: int) -> str:
    try:
        store.spend_approval("ag", "pay-1", "digest", attempt)
        return "spent"
    except ApprovalMismatch:
        return "refused"


def test_an_approval_is_spent_by_exactly_one_process(store: RecallStore, store_target: str) -> None:
    store.record_decision("ag", "pay-1", "approve", args_digest="digest")
    # All for the attempt it authorises: the spends table's key lets one of them through.
    results = ok_results(run_together(store_target, _spend, [(1,) for _ in range(8)]))
    assert sorted(results) == ["refused"] * 7 + ["spent"]


def _decide(store: RecallStore, n: int) -> str:
    try:
        store.record_decision("ag", "pay-1", "approve" if n % 2 else "reject", args_digest="d")
        return "recorded"
    except ApprovalMismatch:  # another writer took the same place in the chain first
        return "collided"


def test_decisions_recorded_at_once_make_one_chain(store: RecallStore, store_target: str) -> None:
    store.record_decision("ag", "pay-1", "requested", args_digest="d")
    results = ok_results(run_together(store_target, _decide, [(n,) for n in range(8)]))
    recorded = results.count("recorded")
    assert recorded >= 1 and recorded + results.count("collided") == 8
    # Every decision that was recorded has a place of its own, and the chain verifies.
    assert store.verify_approvals() == []
    latest = store.latest_decision("pay-1")
    assert latest is not None and latest.seq == recorded + 1


# --- opening a fresh database --------------------------------------------------------------


def _secret_of(store: RecallStore) -> str:
    store.put(("opened",), str(os.getpid()), {"ok": True})
    return store._secret.hex()


def test_many_processes_opening_a_fresh_database_at_once_agree(
    backend: str, store_target: str
) -> None:
    # The race is narrow (creating the secret file beside a fresh SQLite file): several rounds.
    targets = [store_target] if backend == "postgres" else [f"{store_target}.{n}" for n in range(3)]
    for target in targets:
        results = ok_results(
            run_together(target, _secret_of, [() for _ in range(8)], open_after_gate=True)
        )
        assert len(set(results)) == 1, "every process must sign with the same secret"
        with RecallStore.open(target) as store:
            assert store._secret.hex() == results[0]
            assert len(store.search(("opened",), limit=100)) == 8


# --- a process frozen inside a transaction (PostgreSQL) -------------------------------------


def test_postgres_ends_the_transaction_of_a_frozen_process_so_a_takeover_goes_through(
    pg_dsn: str,
) -> None:
    # A holds the agent's lease and freezes (SIGSTOP) inside a transaction that has the lease
    # row locked. Without idle_in_transaction_session_timeout, B's takeover after the lease
    # expired would wait on that row lock for as long as A stays frozen.
    import signal
    import subprocess
    import sys
    import textwrap
    import threading
    import time

    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from langgraph_recall.store import _postgres
        _postgres.IDLE_IN_TRANSACTION_TIMEOUT = 1.0  # seconds, for the test
        from langgraph_recall import RecallStore
        store = RecallStore.open({pg_dsn!r})
        store.acquire_lease("agent", "A", ttl=0.5)
        with store._db.tx(write=True) as tx:
            tx.run("SELECT epoch FROM recall_leases WHERE agent_id = 'agent' FOR UPDATE")
            print("locked", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        """
    )
    a = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout is not None and a.stdout.readline().strip() == "locked"
        time.sleep(0.6)  # A's lease has expired; its transaction still holds the row
        with RecallStore.open(pg_dsn) as store:
            taken: list[Any] = []
            b = threading.Thread(target=lambda: taken.append(store.acquire_lease("agent", "B", 30)))
            b.start()
            b.join(20)
            assert taken, "B's takeover still waits on the frozen process's row lock"
            assert taken[0].holder == "B" and taken[0].epoch == 2
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(10)
