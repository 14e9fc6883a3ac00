"""PostgreSQL failing under a run: sessions terminated, the server restarted or stopped.

Every test here runs on a server of the module's own (``fix_pgserver.own_pg``), never the shared
one. What is specified: every database error that reaches the caller is a
``RecallError(code="database")`` raised from the driver's; a run's end whose connection dies is
retried on a fresh one, and one that cannot write says so (its messages stay in the checkpoint,
and a resubmitted turn records them); after sessions are killed or the server restarts, the
same process's next run works; no effect runs twice and no checkpointed turn is lost.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fix_checkpoint import config, recorded_ids, step_graph, turn_input, wait_until
from fix_pgserver import OwnServer, own_pg, wait_up
from fix_tools import build_graph, call, email_tool, read_effects, reply

from langgraph_recall import DurableToolNode, RecallError, RecallStore
from langgraph_recall._doctor import run_doctor

__all__ = ["own_pg"]  # the fixture, imported to be found

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

pytestmark = pytest.mark.postgres


@pytest.fixture
def dsn(own_pg: OwnServer) -> str:
    wait_up(own_pg)
    return own_pg.fresh_dsn()


@pytest.fixture
def store(dsn: str) -> Iterator[RecallStore]:
    # busy_timeout: how long a call waits for a connection while the server is down.
    s = RecallStore.open(dsn, busy_timeout=2.0)
    try:
        yield s
    finally:
        s.close()


def _is_database_error(exc: BaseException) -> bool:
    return (
        isinstance(exc, RecallError)
        and exc.code == "database"
        and isinstance(exc.__cause__, psycopg.Error | RecallError)
    )


@pytest.fixture(autouse=True)
def server_up(own_pg: OwnServer) -> Iterator[None]:
    """Each test starts with the module's server up: one that failed while the server was
    stopped must not fail every test after it."""
    yield
    try:
        own_pg.start()
    except RuntimeError:
        pass  # it was running
    wait_up(own_pg)


@contextmanager
def before_the_final_write(store: RecallStore, fault: Callable[[], object]) -> Iterator[None]:
    """Run ``fault`` (the server stopped) as the run's final write is about to begin."""
    real = store._end_run

    struck: list[bool] = []

    def end_run(*args: Any, **kwargs: Any) -> bool:
        if not struck:
            struck.append(True)
            fault()
        return real(*args, **kwargs)

    store._end_run = end_run  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store._end_run


@contextmanager
def at_the_final_write(
    store: RecallStore, dsn: str, agent: str, fault: Callable[[], object]
) -> Iterator[list[int]]:
    """Run ``fault`` while the run's final write (the release of ``agent``'s lease with its
    last turns) waits inside the server: a session of the test holds the lease row, the
    final write's statement queues behind it, then ``fault`` strikes and the row is let go.
    A renewal of the lease queues behind that row too: it is not the statement waited for
    (struck then, the final write could commit in the moment the shutdown freed the row).
    Yields the list of final-write attempts the run made."""
    real = store._end_run
    attempts: list[int] = []

    def end_run(*args: Any, **kwargs: Any) -> bool:
        attempts.append(1)
        if len(attempts) == 1:
            holder = psycopg.connect(dsn)
            holder.execute("SELECT 1 FROM recall_leases WHERE agent_id = %s FOR UPDATE", (agent,))

            def strike() -> None:
                with psycopg.connect(dsn, autocommit=True) as watch:
                    wait_until(
                        lambda: (
                            watch.execute(
                                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                                "'Lock' AND datname = current_database() AND query NOT LIKE "
                                "'UPDATE recall_leases SET expires_at = %%'"
                            ).fetchone()[0]  # type: ignore[index]
                            > 0
                        ),
                        timeout=30,
                    )
                fault()
                try:
                    holder.rollback()
                    holder.close()
                except psycopg.Error:
                    pass  # the server went down with it

            threading.Thread(target=strike, daemon=True).start()
        return real(*args, **kwargs)

    store._end_run = end_run  # type: ignore[method-assign]
    try:
        yield attempts
    finally:
        del store._end_run


def terminate_waiting(own_pg: OwnServer) -> None:
    with psycopg.connect(own_pg.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        )


# --- the next run works -----------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_the_next_run_works_after_every_session_was_terminated(
    store: RecallStore, own_pg: OwnServer, use_async: bool
) -> None:
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("first", 2), config("t1", "a1"))
    assert own_pg.terminate_backends() > 0  # the store's pool and the saver's
    second = turn_input("second", 4)
    if use_async:
        out = asyncio.run(graph.ainvoke(second, config("t1", "a1")))
    else:
        out = graph.invoke(second, config("t1", "a1"))
    assert out["n"] == 4
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    cp.close()


def test_the_next_run_works_after_a_server_restart(store: RecallStore, own_pg: OwnServer) -> None:
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("first", 2), config("t1", "a1"))
    own_pg.restart()
    out = graph.invoke(turn_input("second", 3), config("t1", "a1"))
    assert out["n"] == 3
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    cp.close()


# --- a run's end ------------------------------------------------------------------------------


def test_a_final_write_killed_mid_statement_is_retried_on_a_fresh_connection(
    store: RecallStore, dsn: str, own_pg: OwnServer
) -> None:
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    with at_the_final_write(store, dsn, "a1", lambda: terminate_waiting(own_pg)) as attempts:
        out = cp.invoke(graph, turn_input("go", 5), config("t1", "a1", turn_id="turn-1"))
    assert len(attempts) == 2, "killed once, then written on a fresh connection"
    assert len(out["messages"]) == 6
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    lease = store.lease("a1")
    assert lease is not None and lease.expires_at == 0, "given back"
    cp.close()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_run_whose_end_cannot_reach_the_server_raises_and_a_resubmission_records_it(
    dsn: str, own_pg: OwnServer, use_async: bool
) -> None:
    store = RecallStore.open(dsn, busy_timeout=2.0)
    cp = store.checkpointer(lease_ttl=6.0)
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "a1", turn_id="turn-1")
    with before_the_final_write(store, own_pg.stop):
        with pytest.raises(RecallError, match="safe in the checkpoint") as failed:
            if use_async:
                asyncio.run(cp.ainvoke(graph, turn_input("go", 5), cfg))
            else:
                cp.invoke(graph, turn_input("go", 5), cfg)
    assert _is_database_error(failed.value)
    # The request was recorded when the run started; the 5 replies wait in the checkpoint.
    assert failed.value.details["unrecorded"] == 5
    own_pg.start()
    wait_up(own_pg)
    assert len(recorded_ids(store, "a1")) == 1
    # Its lease was not given back (the server was down): once it expires, doctor says what
    # the checkpoints hold that the turns lack.
    wait_until(lambda: _expired(store, "a1"), 30)
    findings = run_doctor(store)["findings"]
    assert any("are not recorded as its turns" in f and "'a1'" in f for f in findings), findings
    # The same turn again: answered from the record, nothing runs twice, every message recorded.
    if use_async:
        out = asyncio.run(cp.ainvoke(graph, turn_input("go", 5), cfg))
    else:
        out = cp.invoke(graph, turn_input("go", 5), cfg)
    assert out["n"] == 5 and len(out["messages"]) == 6
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    assert not [f for f in run_doctor(store)["findings"] if "not recorded" in f]
    cp.close()
    store.close()


def _expired(store: RecallStore, agent: str) -> bool:
    lease = store.lease(agent)
    return lease is not None and lease.expires_at < time.time()


# --- every error a RecallError ------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_checkpoint_write_killed_mid_statement_raises_database_and_the_run_resumes(
    store: RecallStore, dsn: str, own_pg: OwnServer, use_async: bool
) -> None:
    # The fence trigger reads the lease row under a share lock: holding it FOR UPDATE makes
    # the saver's own put wait inside the server, where its session is then terminated.
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    graph.invoke(turn_input("first", 1), config("t1", "a1"))
    cfg = config("t1", "a1", turn_id="turn-2")
    holder = psycopg.connect(dsn)
    holder.execute("SELECT 1 FROM recall_leases WHERE agent_id = 'a1' FOR UPDATE")

    def strike() -> None:
        time.sleep(0.5)
        terminate_waiting(own_pg)
        holder.rollback()

    threading.Thread(target=strike, daemon=True).start()
    with pytest.raises(RecallError) as failed:
        if use_async:
            asyncio.run(cp.ainvoke(graph, turn_input("second", 3), cfg))
        else:
            cp.invoke(graph, turn_input("second", 3), cfg)
    holder.close()
    assert _is_database_error(failed.value), repr(failed.value)
    assert "fresh connection" in str(failed.value)
    # The same process, the same turn again: run (or resumed) to its end, nothing twice.
    out = cp.invoke(graph, turn_input("second", 3), cfg)
    assert out["n"] == 3
    assert recorded_ids(store, "a1") == [m.id for m in out["messages"]]
    cp.close()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_reads_and_the_durability_wait_raise_database_while_the_server_is_down(
    store: RecallStore, own_pg: OwnServer, use_async: bool
) -> None:
    cp = store.checkpointer()
    graph = step_graph().compile(checkpointer=cp, store=store)
    cfg = config("t1", "a1")
    graph.invoke(turn_input("first", 1), cfg)
    own_pg.stop()
    try:
        calls: list[Callable[[], Any]] = (
            [
                lambda: asyncio.run(cp.await_durable(cfg, "not-a-checkpoint", timeout=0)),
                lambda: asyncio.run(cp.aget_tuple(cfg)),
                lambda: asyncio.run(_drain(cp.alist(cfg))),
                lambda: asyncio.run(graph.ainvoke(turn_input("second", 2), cfg)),
            ]
            if use_async
            else [
                lambda: cp.wait_durable(cfg, "not-a-checkpoint", timeout=0),
                lambda: cp.get_tuple(cfg),
                lambda: list(cp.list(cfg)),
                lambda: graph.invoke(turn_input("second", 2), cfg),
            ]
        )
        for fn in calls:
            with pytest.raises(RecallError) as failed:
                fn()
            assert _is_database_error(failed.value), repr(failed.value)
    finally:
        own_pg.start()
        wait_up(own_pg)
    out = graph.invoke(turn_input("third", 2), cfg)
    assert out["n"] == 2
    cp.close()


async def _drain(items: Any) -> list[Any]:
    return [item async for item in items]


# --- chaos: sessions terminated at random, the server restarted and stopped mid-run ---------------


def test_chaos_no_effect_twice_no_turn_lost_only_recall_errors(
    store: RecallStore, own_pg: OwnServer, tmp_path: Path
) -> None:
    effects = str(tmp_path / "effects.jsonl")
    node = DurableToolNode([email_tool(effects)], classes={"send_email": "external"})
    script = [reply("", call("send_email", to=f"r{i}")) for i in range(4)] + [reply("done")]
    cp = store.checkpointer(lease_ttl=3.0)
    graph = build_graph(node, script, store=store, checkpointer=cp)
    rng = random.Random(33)
    stop = threading.Event()
    faults: list[str] = []

    def chaos() -> None:
        while not stop.wait(rng.uniform(0.02, 0.15)):
            roll = rng.random()
            try:
                if roll < 0.8:
                    own_pg.terminate_backends()
                    faults.append("terminate")
                elif roll < 0.9:
                    own_pg.restart()
                    faults.append("restart")
                else:
                    own_pg.stop()
                    faults.append("stop")
                    time.sleep(rng.uniform(0.2, 1.0))
                    own_pg.start()
            except Exception:  # the server between states: try again at the next tick
                pass

    agents = [f"agent-{i}" for i in range(3)]
    unexpected: list[BaseException] = []
    database_errors = 0
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    chaos_thread.start()
    try:
        deadline = time.monotonic() + 12.0
        while time.monotonic() < deadline:
            pending = [a for a in agents if not _finished(graph, a)]
            if not pending:
                if database_errors >= 2:
                    break
                # Finished before the chaos struck enough: another agent starts its task.
                agents.append(f"agent-{len(agents)}")
                continue
            for agent in pending:
                try:
                    _advance(graph, agent)
                except RecallError as exc:
                    if exc.code not in ("database", "lease_held", "in_doubt"):
                        unexpected.append(exc)
                    database_errors += exc.code == "database"
                except Exception as exc:
                    unexpected.append(exc)
    finally:
        stop.set()
        chaos_thread.join(30)
        try:
            own_pg.start()
        except Exception:
            pass
        wait_up(own_pg)
    assert not unexpected, unexpected[:3]
    assert faults and database_errors, "the chaos struck"
    print(f"chaos: {len(faults)} faults, {database_errors} database errors")
    # Calm again: every agent finishes (a call left in doubt is settled by a person as not
    # done, which re-runs nothing), and no effect ran twice.
    for agent in agents:
        for _ in range(20):
            if _finished(graph, agent):
                break
            _settle_in_doubt(store, agent, effects)
            time.sleep(0.2)  # a lease a killed session kept renews no more: it expires
            try:
                _advance(graph, agent)
            except RecallError as exc:
                assert exc.code in ("lease_held", "in_doubt"), exc
        assert _finished(graph, agent), agent
    sent = [e["key"] for e in read_effects(effects, "email")]
    assert len(sent) == len(set(sent)), "an effect ran twice"
    # The records agree with the world: a call recorded done sent its email (once), and one
    # whose email never left is closed as not done, never left open. (A call the operator
    # settled "not done" after the model had moved on is not called again by this scripted
    # model, so the count of emails may fall short of the calls asked.)
    actions = [a for agent in agents for a in store.actions(agent)]
    assert not [a for a in actions if a.status == "open"], "a call left open"
    done = {a.idempotency_key for a in actions if a.status == "done"}
    assert done == set(sent), "the records and the emails sent disagree"
    assert done, "the calls ran"
    # 0 turns lost: every message of every agent's checkpoint is recorded, once, in order. A
    # request whose run failed before its input checkpoint landed is recorded too (at the
    # run's start), though the thread never held it: the only turns beyond what it holds.
    for agent in agents:
        held = [m.id for m in graph.get_state(config(agent, agent)).values["messages"]]
        recorded = recorded_ids(store, agent)
        if [i for i in recorded if i in set(held)] != held:
            # Its last run's final write failed (it raised `database`, the messages safe in
            # the checkpoint): doctor names the agent, and its next run records them.
            wait_until(lambda a=agent: _expired(store, a), 10)  # a run still going is not judged
            findings = run_doctor(store)["findings"]
            assert any(repr(agent) in f and "not recorded" in f for f in findings), findings
            graph.invoke(None, config(agent, agent))
            recorded = recorded_ids(store, agent)
        assert [i for i in recorded if i in set(held)] == held, agent
        extra = [t for t in store.turns(agent) if t.msg_id not in set(held)]
        assert all(t.role == "human" for t in extra), (agent, extra)
    cp.close()


def _advance(graph: Any, agent: str) -> None:
    cfg = config(agent, agent)
    started = bool(graph.get_state(cfg).values)
    graph.invoke(None if started else {"messages": [("user", "go")]}, cfg)


def _finished(graph: Any, agent: str) -> bool:
    try:
        snap = graph.get_state(config(agent, agent))
    except RecallError:
        return False
    msgs = (snap.values or {}).get("messages") or []
    return (
        bool(msgs)
        and not getattr(msgs[-1], "tool_calls", None)
        and msgs[-1].type == "ai"
        and not snap.next
    )


def _settle_in_doubt(store: RecallStore, agent: str, effects: str) -> None:
    """What an operator does with a call in doubt: looks at the outside world (the effects
    file) and says whether it happened."""
    sent = {e["key"] for e in read_effects(effects, "email")}
    try:
        for action in store.actions(agent, open_only=True):
            happened = action.idempotency_key in sent
            store.resolve(action.action_id, "done" if happened else "not_done", note="chaos")
    except RecallError:
        pass  # its lease is still live: next time
