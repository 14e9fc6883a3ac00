"""The typed records API: turns, working state, pointers, outputs, actions, approvals, leases.

Every test body runs four ways: SQLite and PostgreSQL, through the sync methods and through
their ``a``-prefixed async twins (the ``api`` fixture).
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fix_store import Api, captured_sql, count_transactions, db_now, wait_db_clock_past
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_recall import RecallError
from langgraph_recall._errors import ApprovalDenied, ApprovalMismatch, LeaseHeld
from langgraph_recall.store import RecallStore
from langgraph_recall.store._db import Tx
from langgraph_recall.store._verify import verify


@pytest.fixture(params=["sync", "async"])
def api(store: RecallStore, request: pytest.FixtureRequest) -> Iterator[Api]:
    caller = Api(store, request.param)
    try:
        yield caller
    finally:
        caller.close()


def _code(exc_info: pytest.ExceptionInfo[BaseException]) -> str:
    assert isinstance(exc_info.value, RecallError), exc_info.value
    return exc_info.value.code


# --- async twins ---------------------------------------------------------------------------

# Methods that do no I/O on the caller's behalf, so they need no async twin.
_NO_TWIN = {
    "open",
    "close",
    "checkpointer",
    "start_ttl_sweeper",
    "stop_ttl_sweeper",
    "dialect",
    "target",
}


def test_every_public_method_has_an_async_twin() -> None:
    public = {
        name
        for name, value in vars(RecallStore).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, classmethod))
    }
    twins = {n for n in public if n.startswith("a") and n[1:] in public}
    missing = sorted(n for n in public - twins - _NO_TWIN if "a" + n not in public)
    assert missing == []
    for name in public - _NO_TWIN - twins:
        assert inspect.iscoroutinefunction(getattr(RecallStore, "a" + name)), name


# --- turns ---------------------------------------------------------------------------------


def _ids(turns: list[Any]) -> list[str]:
    return [t.msg_id for t in turns]


def test_record_appends_each_new_message_once_in_order(api: Api) -> None:
    first = [HumanMessage("hi", id="m1"), AIMessage("hello", id="m2"), HumanMessage("go", id="m3")]
    assert api.record("ag", first) == 3
    assert api.record("ag", first) == 0
    mixed = [first[1], HumanMessage("more", id="m4"), first[2], AIMessage("done", id="m5")]
    assert api.record("ag", mixed) == 2
    turns = api.turns("ag")
    assert _ids(turns) == ["m1", "m2", "m3", "m4", "m5"]
    assert [t.seq for t in turns] == [1, 2, 3, 4, 5]
    assert [t.role for t in turns] == ["human", "ai", "human", "human", "ai"]
    assert [t.message.content for t in turns] == ["hi", "hello", "go", "more", "done"]
    assert api.record("other", first) == 3, "dedupe is per agent"
    assert api.record("ag", []) == 0


def test_record_keeps_message_types_and_thread(api: Api) -> None:
    ai = AIMessage("", id="a1", tool_calls=[{"name": "pay", "args": {"n": 10}, "id": "c1"}])
    tool = ToolMessage("paid", tool_call_id="c1", id="t1")
    api.record("ag", [ai, tool], thread_id="thread-7")
    got = api.turns("ag")
    assert got[0].message == ai and got[1].message == tool
    assert isinstance(got[1].message, ToolMessage)
    assert {t.thread_id for t in got} == {"thread-7"}


def test_messages_without_id_get_stable_ids(api: Api, store_target: str) -> None:
    batch = [HumanMessage("yes"), AIMessage("sure"), HumanMessage("yes")]
    assert api.record("ag", batch) == 3, "two identical id-less messages in one call are two turns"
    ids = _ids(api.turns("ag"))
    assert len(set(ids)) == 3 and all(i.startswith("h-") for i in ids)
    assert api.record("ag", [HumanMessage("yes"), AIMessage("sure"), HumanMessage("yes")]) == 0
    with RecallStore.open(store_target) as again:  # another process would compute the same ids
        assert again.record("ag", [HumanMessage("yes"), AIMessage("sure")]) == 0
        assert again.record("ag", [AIMessage("new")]) == 1


def test_record_refuses_what_is_not_a_message(api: Api) -> None:
    with pytest.raises(RecallError) as err:
        api.record("ag", [HumanMessage("ok", id="1"), "plain text"])  # type: ignore[list-item]
    assert _code(err) == "invalid_value" and "convert_to_messages" in str(err.value)
    assert api.turns("ag") == []
    with pytest.raises(RecallError) as err:
        api.record("", [HumanMessage("ok", id="1")])
    assert _code(err) == "invalid_value"


def test_turns_last_n_returns_the_newest_n_oldest_first(api: Api) -> None:
    api.record("ag", [HumanMessage(f"m{i}", id=f"id{i}") for i in range(20)])
    assert _ids(api.turns("ag", last=3)) == ["id17", "id18", "id19"]
    assert _ids(api.turns("ag", last=50)) == [f"id{i}" for i in range(20)]
    assert api.turns("ag", last=0) == []
    assert api.turns("nobody", last=5) == []


def _plan_problems(
    store: RecallStore, sql: str, params: list[Any], table: str = "recall_turns", most: int = 5
) -> list[str]:
    """What in the plan of ``sql`` reads more than an index range: full scans, sorts, more
    than ``most`` rows of ``table`` (PostgreSQL, from EXPLAIN ANALYZE)."""
    with store._db.tx() as tx:
        if store.dialect == "sqlite":
            details = [r[3] for r in tx.all("EXPLAIN QUERY PLAN " + sql, params)]
            return [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d]
        (plan,) = tx.one("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params) or ((),)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    problems: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node["Node Type"]
        if kind in ("Seq Scan", "Sort", "Bitmap Heap Scan"):
            problems.append(kind)
        read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        if node.get("Relation Name") == table and read > most:
            problems.append(f"{kind} read {read} rows of {table}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return problems


def _vm_steps(store: RecallStore, fn: Any) -> int:
    """SQLite virtual-machine steps taken by ``fn`` on this thread's connection."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    with store._db.tx() as tx:  # fn's reads join this transaction, on this connection
        conn = tx._cur.connection
        conn.set_progress_handler(tick, 1)
        try:
            fn()
        finally:
            conn.set_progress_handler(None, 1)
    return steps[0]


def test_open_actions_are_read_from_the_partial_index_not_the_history(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The briefing asks for the open actions before every model call: that read must not
    # grow with the agent's finished actions (schema v3: recall_actions_open).
    for i in range(2000):
        c = store.claim("busy", f"act-{i}", tool="t", args={"i": i}, args_digest="d")
        if i not in (17, 1388):
            store.end(c.action.action_id, 1, "done", result=i)
    if store.dialect == "postgres":
        with store._db.tx() as tx:
            tx.run("ANALYZE recall_actions")
    with captured_sql(monkeypatch) as seen:
        got = store.actions("busy", open_only=True)
    assert [a.action_id for a in got] == ["act-17", "act-1388"]
    reads = [(sql, params) for sql, params in seen if "recall_actions" in sql]
    assert len(reads) == 1
    sql, params = reads[0]
    assert _plan_problems(store, sql, params, table="recall_actions", most=2) == [], sql
    if store.dialect == "sqlite":
        with store._db.tx() as tx:
            plan = " ".join(r[3] for r in tx.all("EXPLAIN QUERY PLAN " + sql, params))
        assert "recall_actions_open" in plan, plan


def test_turns_last_n_is_an_index_read_not_a_scan(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.record("long", [HumanMessage(f"m{i}", id=f"l{i}") for i in range(3000)])
    store.record("short", [HumanMessage(f"m{i}", id=f"s{i}") for i in range(30)])
    if store.dialect == "postgres":
        with store._db.tx() as tx:
            tx.run("ANALYZE recall_turns")
    with captured_sql(monkeypatch) as seen:
        got = store.turns("long", last=5)
    assert _ids(got) == [f"l{i}" for i in range(2995, 3000)]
    reads = [(sql, params) for sql, params in seen if "recall_turns" in sql]
    assert reads, "turns() should read recall_turns"
    for sql, params in reads:
        assert _plan_problems(store, sql, params) == [], sql
    if store.dialect == "sqlite":
        # The work done must not grow with the length of the history: 3000 turns vs 30.
        long_steps = _vm_steps(store, lambda: store.turns("long", last=5))
        short_steps = _vm_steps(store, lambda: store.turns("short", last=5))
        assert long_steps <= short_steps * 1.2, (long_steps, short_steps)


def _turn_scans(node: dict[str, Any]) -> list[tuple[str, int]]:
    """(kind, rows read) of every scan of recall_turns in an EXPLAIN ANALYZE plan."""
    found = []
    if node.get("Relation Name") == "recall_turns" and "Scan" in node["Node Type"]:
        found.append((node["Node Type"], node["Actual Rows"] * node["Actual Loops"]))
    for child in node.get("Plans", []):
        found += _turn_scans(child)
    return found


def _pg_type(value: Any) -> str:
    if isinstance(value, list):
        return "bytea[]" if value and isinstance(value[0], bytes) else "text[]"
    if isinstance(value, bytes):
        return "bytea"
    return "bigint" if isinstance(value, int) else "text"


@pytest.mark.parametrize("size", [2, 42])  # as VALUES rows, and as arrays
def test_recording_new_messages_reads_no_recorded_turn_whatever_the_history(
    pg_database: str, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    # PostgreSQL records a batch in one statement. Once it skipped recorded messages itself:
    # written with NOT EXISTS, the server planned that (agent id known) as a hash anti join
    # reading every turn of the agent on every record (146 -> 1100 µs per message over 25k
    # turns); as a probe per message, a generic plan made on a small table read the whole
    # history per message. Now it reads no turn at all, planned for these values or once for
    # any, with 3000 turns already there (a recorded message makes the unique index refuse it).
    import psycopg

    agent = f"long-{uuid.uuid4().hex}"  # the session's database is shared by tests
    with RecallStore.open(pg_database) as store:
        store.record(agent, [HumanMessage(f"m{i}", id=f"l{i}") for i in range(3000)])
        with captured_sql(monkeypatch) as seen:
            batch = [HumanMessage(f"new {i}", id=f"n{i}") for i in range(size)]
            assert store.record(agent, batch) == size
        sql, params = next((s, p) for s, p in seen if "recall_turns" in s)
        numbered = store._db.sql(sql)
    n = 0
    while "%s" in numbered or "%b" in numbered:
        n += 1
        at = min(i for i in (numbered.find("%s"), numbered.find("%b")) if i >= 0)
        numbered = f"{numbered[:at]}${n}{numbered[at + 2 :]}"
    # The same batch under other ids: new, so the statement runs to its end.
    ids = [f"n{i}" for i in range(size)]
    again = [f"again-{i}" for i in range(size)]
    params = [again if p == ids else p for p in params]  # as arrays
    params = [again[ids.index(p)] if p in ids else p for p in params]  # as rows
    assert str(params).count("again-") == size
    types = [_pg_type(p) for p in params]
    marks = ", ".join(["%s"] * len(params))
    for mode in ("force_custom_plan", "force_generic_plan"):
        with psycopg.connect(pg_database, autocommit=True) as conn:
            with conn.transaction(force_rollback=True):
                conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                conn.execute(f"PREPARE rec ({', '.join(types)}) AS {numbered}")
                # EXECUTE's arguments inside EXPLAIN cannot be bound: inlined.
                (plan,) = (
                    psycopg.ClientCursor(conn)
                    .execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE rec({marks})", params)
                    .fetchone()
                )
        assert _turn_scans(plan[0]["Plan"]) == [], (mode, plan)
        assert plan[0]["Plan"]["Actual Rows"] == 1, (mode, plan)  # the count, all inserted


def test_a_short_batch_on_sqlite_is_one_insert_and_reads_no_recorded_turn(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chat turn's messages: the rows go in one INSERT numbered after the agent's last turn,
    # and that is the whole of it: no read of which ids are recorded (the unique index refuses
    # the INSERT whole if one is), no write of the agent row (its page would be a fifth one
    # in the commit of a run's end).
    with RecallStore.open(str(tmp_path / "r.db")) as store:
        store.record("ag", [HumanMessage(f"m{i}", id=f"h{i}") for i in range(300)])
        with captured_sql(monkeypatch) as seen:
            said = [AIMessage("a", id="new1"), ToolMessage("r", tool_call_id="c", id="new2")]
            assert store.record("ag", [*said, said[0]]) == 2, "a repeat within the batch once"
        on_turns = [sql for sql, _ in seen if "recall_turns" in sql]
        assert len(on_turns) == 1 and on_turns[0].startswith("WITH base(s)"), seen
        assert len(seen) == 1, seen
        assert [(t.msg_id, t.seq) for t in store.turns("ag", last=3)] == [
            ("h299", 300),
            ("new1", 301),
            ("new2", 302),
        ]
        assert store.record("fresh", said) == 2, "a new agent numbers from 1"
        assert [t.seq for t in store.turns("fresh")] == [1, 2]
        assert store.has_agent("fresh")  # its first turn made its row
        assert store.record("ag", [AIMessage("b", id="new3")]) == 1
        assert [t.seq for t in store.turns("ag", last=1)] == [303]
        assert verify(store).problems == []


def test_a_short_batch_with_a_recorded_message_leaves_no_row_of_its_insert(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refused INSERT is one statement: none of its rows stay, and the reading path then
    # records only the new ones, numbered without a gap.
    with RecallStore.open(str(tmp_path / "r.db")) as store:
        store.record("ag", [HumanMessage("one", id="m1"), HumanMessage("two", id="m2")])
        with captured_sql(monkeypatch) as seen:
            batch = [HumanMessage("three", id="m3"), HumanMessage("two", id="m2")]
            assert store.record("ag", [*batch, HumanMessage("four", id="m4")]) == 2
        assert any("msg_id IN" in sql for sql, _ in seen), "the reading path ran"
        assert [(t.msg_id, t.seq) for t in store.turns("ag")] == [
            ("m1", 1),
            ("m2", 2),
            ("m3", 3),
            ("m4", 4),
        ]
        assert verify(store).problems == []


def test_a_long_batch_on_sqlite_reads_which_ids_are_recorded_first(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the one-INSERT size a batch is more often a history sent again (a hook's first
    # call in a new process), which the read of ids settles before anything is serialised.
    from langgraph_recall.store._transcript import _SQLITE_ONE_INSERT_MAX

    with RecallStore.open(str(tmp_path / "r.db")) as store:
        batch = [HumanMessage(f"m{i}", id=f"h{i}") for i in range(_SQLITE_ONE_INSERT_MAX + 1)]
        with captured_sql(monkeypatch) as seen:
            assert store.record("ag", batch) == len(batch)
        assert any("msg_id IN" in sql for sql, _ in seen)
        assert not any(sql.startswith("WITH base(s)") for sql, _ in seen)
        assert [t.seq for t in store.turns("ag")] == list(range(1, len(batch) + 1))


# --- working state, milestones, pointers ---------------------------------------------------


def test_working_state_merges_revisions_and_keeps_every_one(api: Api, store: RecallStore) -> None:
    assert api.working_state("ag") == {}
    api.update_working_state("ag", goal="migrate billing", plan=["a", "b"])
    merged = api.update_working_state("ag", progress="a done", plan=["b"])
    assert merged == {"goal": "migrate billing", "plan": ["b"], "progress": "a done"}
    assert api.update_working_state("ag", progress=None) == {
        "goal": "migrate billing",
        "plan": ["b"],
    }
    assert api.working_state("ag") == {"goal": "migrate billing", "plan": ["b"]}
    history = api.revisions("ag")
    assert [r[1] for r in history] == ["state", "state", "state"]
    assert [r[3] for r in history] == [
        {"goal": "migrate billing", "plan": ["a", "b"]},
        {"progress": "a done", "plan": ["b"]},
        {"progress": None},
    ]
    assert [r[0] for r in history] == [1, 2, 3]
    item = store.get(("recall", "ag", "state"), "current")
    assert item is not None and item.value == {"goal": "migrate billing", "plan": ["b"]}


def test_a_new_goal_starts_a_fresh_working_state(api: Api) -> None:
    api.update_working_state("ag", goal="refund R-16", plan="look up, refund", progress="R-16 done")
    api.milestone("ag", "R-16 refunded")
    state = api.update_working_state("ag", goal="refund R-17", plan="look up")
    # The last task's progress and milestone do not stand beside the new goal.
    assert state == api.working_state("ag") == {"goal": "refund R-17", "plan": "look up"}
    history = api.revisions("ag")
    # Append-only: the replaced state is still in the history, and the fresh start is named.
    assert history[0][3]["progress"] == "R-16 done"
    assert [(r[1], r[2]) for r in history] == [
        ("state", None),
        ("milestone", None),
        ("state", "new_task"),
    ]


def test_a_first_goal_merges_with_what_was_noted_before_it(api: Api) -> None:
    api.update_working_state("ag", notes="the customer is in Berlin")
    state = api.update_working_state("ag", goal="refund R-16")
    assert state == {"notes": "the customer is in Berlin", "goal": "refund R-16"}


def test_the_same_goal_again_merges(api: Api) -> None:
    api.update_working_state("ag", goal="refund R-16", progress="looked up")
    state = api.update_working_state("ag", goal="refund R-16", plan="refund, email")
    assert state == {"goal": "refund R-16", "progress": "looked up", "plan": "refund, email"}


def test_new_task_false_keeps_the_fields_and_true_clears_them(api: Api) -> None:
    api.update_working_state("ag", goal="refund R-16", progress="looked up")
    kept = api.update_working_state("ag", new_task=False, goal="refund order R-16")
    assert kept == {"goal": "refund order R-16", "progress": "looked up"}
    fresh = api.update_working_state("ag", new_task=True, notes="start over")
    assert fresh == api.working_state("ag") == {"notes": "start over"}
    assert api.update_working_state("ag", new_task=True) == api.working_state("ag") == {}
    assert [r[2] for r in api.revisions("ag")][-2:] == ["new_task", "new_task"]


def test_new_task_must_be_a_bool(api: Api) -> None:
    api.update_working_state("ag", goal="g", progress="p")
    with pytest.raises(RecallError) as err:
        api.update_working_state("ag", new_task="yes", goal="h")
    assert _code(err) == "invalid_value"
    assert api.working_state("ag") == {"goal": "g", "progress": "p"}


def test_update_working_state_returns_what_was_stored(api: Api) -> None:
    import datetime as dt

    # It returned the datetime given while the store kept its ISO text.
    due = dt.datetime(2026, 1, 2, 3, 4)
    returned = api.update_working_state("ag", goal="g", due=due)
    assert returned == api.working_state("ag") == {"goal": "g", "due": "2026-01-02T03:04:00"}


def test_milestones_append_and_show_the_latest(api: Api) -> None:
    api.update_working_state("ag", goal="g")
    api.milestone("ag", "schema migrated")
    state = api.milestone("ag", "data copied")
    assert state == {"goal": "g", "last_milestone": "data copied"}
    assert api.working_state("ag")["last_milestone"] == "data copied"
    texts = [r[3]["text"] for r in api.revisions("ag") if r[1] == "milestone"]
    assert texts == ["schema migrated", "data copied"]
    with pytest.raises(RecallError) as err:
        api.milestone("ag", "   ")
    assert _code(err) == "invalid_value"


def test_pointers_latest_wins_and_history_is_kept(api: Api) -> None:
    api.set_pointer("ag", "branch", "feature/a")
    api.set_pointer("ag", "ticket", "JIRA-1", note="the epic")
    p = api.set_pointer("ag", "branch", "feature/b", note="rebased")
    assert (p.name, p.target, p.note) == ("branch", "feature/b", "rebased")
    current = api.pointers("ag")
    assert sorted(current) == ["branch", "ticket"]
    assert current["branch"].target == "feature/b" and current["ticket"].note == "the epic"
    history = [
        r[3]["target"] for r in api.revisions("ag") if r[1] == "pointer" and r[2] == "branch"
    ]
    assert history == ["feature/a", "feature/b"]
    assert api.pointers("nobody") == {}
    for name, target in (("", "x"), ("n", "")):
        with pytest.raises(RecallError) as err:
            api.set_pointer("ag", name, target)
        assert _code(err) == "invalid_value"


@pytest.mark.parametrize("kind", ["state", "pointers", "outputs", "runs", "submitted_turns"])
async def test_a_plain_put_or_delete_cannot_change_the_records_own_items(
    store: RecallStore, kind: str
) -> None:
    from langgraph.store.base import PutOp

    store.update_working_state("ag", goal="g")
    store.set_pointer("ag", "repo", "git@x")
    ref = store.put_output("ag", "a long output")
    store._switch_thread("ag", "t1")
    store._remember_turn("ag", "turn-1", "t1")
    ns = ("recall", "ag", kind)
    key = {"state": "current", "pointers": "repo", "outputs": ref, "runs": "thread"}.get(
        kind, "turn-1"
    )
    before = store.get(ns, key)
    assert before is not None
    # A delete dropped the working state's view (working_state() said {}) while its revisions
    # stayed; a put rewrote it with no revision at all.
    writes: list[Any] = [
        lambda: store.delete(ns, key),
        lambda: store.put(ns, key, {"forged": True}),
        lambda: store.batch([PutOp(ns, "new", {"x": 1})]),
    ]
    for write in writes:
        with pytest.raises(RecallError) as err:
            write()
        assert _code(err) == "invalid_namespace" and "written with" in str(err.value)
    with pytest.raises(RecallError):
        await store.adelete(ns, key)
    after = store.get(ns, key)
    assert after is not None and after.value == before.value
    assert store.get(ns, "new") is None
    assert store.working_state("ag") == {"goal": "g"}
    assert store.pointers("ag")["repo"].target == "git@x"


def test_memories_and_other_kinds_under_an_agent_stay_plain_items(store: RecallStore) -> None:
    for ns in (("recall", "ag", "memories"), ("recall", "ag", "notes"), ("recall", "state")):
        store.put(ns, "k", {"text": "mine"})
        assert store.get(ns, "k").value == {"text": "mine"}  # type: ignore[union-attr]
        store.delete(ns, "k")
        assert store.get(ns, "k") is None


# --- outputs -------------------------------------------------------------------------------


def test_outputs_are_stored_whole_and_read_in_slices(api: Api) -> None:
    text = "".join(f"line {i:07d}\n" for i in range(1000))
    ref = api.put_output("ag", text)
    assert ref.startswith("out-") and len(ref) < 32
    assert api.put_output("ag", text) == ref, "the same content gets the same reference"
    assert api.fetch_output(ref) == text
    assert api.fetch_output(ref, 13 * 5, 13) == "line 0000005\n"
    assert api.fetch_output(ref, len(text) - 5) == text[-5:]
    assert api.fetch_output(ref, len(text) + 10, 10) == ""
    with pytest.raises(RecallError) as err:
        api.fetch_output("out-doesnotexist")
    assert _code(err) == "unknown_output"


def test_a_ten_megabyte_output_works(store: RecallStore) -> None:
    text = "".join(f"line {i:07d}\n" for i in range(800_000))  # 10.4 MB
    ref = store.put_output("ag", text)
    assert store.fetch_output(ref) == text
    assert store.fetch_output(ref, 13 * 654_321, 13) == "line 0654321\n"


def test_outputs_keep_unicode_exactly(api: Api) -> None:
    text = "héllo wörld 東京 😀 " * 1000
    ref = api.put_output("ag", text)
    assert api.fetch_output(ref) == text
    assert api.fetch_output(ref, 12, 5) == text[12:17]


def test_long_turns_become_outputs_over_the_threshold(store_target: str) -> None:
    with RecallStore.open(store_target, output_threshold=100) as store:
        small, big = "s" * 100, "b" * 101
        store.record("ag", [HumanMessage(small, id="1"), AIMessage(big, id="2")])
        t_small, t_big = store.turns("ag")
        assert t_small.output_ref is None and t_small.message.content == small
        assert t_big.output_ref is not None and t_big.message.content == big
        assert store.fetch_output(t_big.output_ref) == big
        listed = store.search(("recall", "ag", "outputs"))
        assert [i.key for i in listed] == [t_big.output_ref]


def test_a_ten_megabyte_turn_is_recorded(store: RecallStore) -> None:
    big = "x" * (10 * 1024 * 1024)
    assert store.record("ag", [AIMessage(big, id="huge")]) == 1
    (turn,) = store.turns("ag")
    assert turn.output_ref is not None and len(turn.message.content) == len(big)


# --- actions -------------------------------------------------------------------------------


def _claim(api: Api, action_id: str = "act-1", digest: str = "d1", **kw: Any) -> Any:
    kw.setdefault("tool", "send_email")
    kw.setdefault("args", {"to": "a@example.com"})
    return api.claim("ag", action_id, args_digest=digest, **kw)


def test_claim_then_end_then_claim_returns_the_recorded_result(api: Api) -> None:
    first = _claim(api, idempotency_key="key-1", thread_id="t1", epoch=4)
    assert first.status == "claimed" and first.claimed
    a = first.action
    assert (a.attempt, a.status, a.tool, a.idempotency_key) == (1, "open", "send_email", "key-1")
    assert a.args == {"to": "a@example.com"} and a.thread_id == "t1"
    again = _claim(api)
    assert again.status == "in_doubt" and again.action.attempt == 1
    assert api.end("act-1", 1, "done", result={"id": 42}) is True
    done = _claim(api)
    assert done.status == "done" and done.action.result == {"id": 42}
    assert api.action("act-1").status == "done"


def test_an_action_read_back_has_every_field_of_the_dataclass(store: RecallStore) -> None:
    # ``action_of`` fills the instance's dict directly (a frozen dataclass's __init__ costs a
    # tenth of a repeat lookup): a field added to Action must be read back too.
    import dataclasses

    from langgraph_recall.store._models import Action

    claim = store.claim("ag", "act-1", tool="t", args={"x": 1}, args_digest="d", thread_id="th")
    store.end("act-1", 1, "done", result=ToolMessage("ok", tool_call_id="c"), note="n")
    store._db.finished.clear()  # read from the database, not from memory
    action = store.claim("ag", "act-1", tool="t", args={"x": 1}, args_digest="d").action
    names = [f.name for f in dataclasses.fields(Action)]
    assert sorted(vars(action)) == sorted(names)
    rebuilt = Action(**{name: getattr(action, name) for name in names})
    assert action == rebuilt and hash(action.action_id) == hash(rebuilt.action_id)
    assert (action.status, action.args, action.thread_id, action.note) == (
        "done",
        {"x": 1},
        "th",
        "n",
    )
    assert action.result.content == "ok" and claim.action.attempt == action.attempt == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.status = "open"  # type: ignore[misc]


def test_end_counts_only_once_and_only_for_an_intent(api: Api) -> None:
    _claim(api)
    assert api.end("act-1", 1, "failed", error="SMTP 550") is True
    assert api.end("act-1", 1, "done", result="late") is False
    assert api.end("act-1", 1, "failed", error="again") is False
    failed = _claim(api)
    assert failed.status == "failed" and failed.action.error == "SMTP 550"
    with pytest.raises(RecallError) as err:
        api.end("act-1", 2, "done")
    assert _code(err) == "unknown_action"
    with pytest.raises(RecallError) as err:
        api.end("never-claimed", 1, "done")
    assert _code(err) == "unknown_action"
    with pytest.raises(RecallError) as err:
        api.end("act-1", 1, "exploded")
    assert _code(err) == "invalid_value"


def test_abandoned_attempt_may_run_again_under_the_same_key(api: Api) -> None:
    _claim(api, idempotency_key="k")
    assert api.end("act-1", 1, "abandoned") is True
    second = _claim(api, idempotency_key="k")
    assert second.status == "claimed" and second.action.attempt == 2
    assert second.action.idempotency_key == "k"
    api.end("act-1", 2, "abandoned")
    with pytest.raises(RecallError) as err:
        _claim(api, digest="other-args")
    assert _code(err) == "approval_mismatch"


def test_actions_lists_latest_attempts_and_open_ones(api: Api) -> None:
    for n in range(3):
        _claim(api, action_id=f"act-{n}")
    api.end("act-0", 1, "done", result="r0")
    api.end("act-2", 1, "abandoned")
    _claim(api, action_id="act-2")
    listed = api.actions("ag")
    assert [(a.action_id, a.attempt, a.status) for a in listed] == [
        ("act-0", 1, "done"),
        ("act-1", 1, "open"),
        ("act-2", 2, "open"),
    ]
    assert [a.action_id for a in api.actions("ag", open_only=True)] == ["act-1", "act-2"]
    assert api.actions("nobody") == []


def test_resolve_settles_an_open_action(api: Api) -> None:
    _claim(api, action_id="act-done")
    _claim(api, action_id="act-not")
    settled = api.resolve("act-done", "done", note="I saw the email arrive")
    assert settled.status == "done" and settled.resolved_by == "person"
    assert settled.note == "I saw the email arrive"
    assert _claim(api, action_id="act-done").status == "done"
    assert api.resolve("act-not", False).status == "not_done"
    rerun = _claim(api, action_id="act-not")
    assert rerun.status == "claimed" and rerun.action.attempt == 2
    assert api.actions("ag", open_only=True)[0].action_id == "act-not"


def test_resolve_refuses_what_it_cannot_settle(api: Api) -> None:
    _claim(api, action_id="act-abc123")
    api.end("act-abc123", 1, "done")
    with pytest.raises(RecallError) as err:
        api.resolve("act-abc123", "done")
    assert _code(err) == "not_open"
    with pytest.raises(RecallError) as err:
        api.resolve("nope", "done")
    assert _code(err) == "unknown_action"
    _claim(api, action_id="act-xyz789")
    with pytest.raises(RecallError) as err:
        api.resolve("act-xyz789", "maybe")
    assert _code(err) == "invalid_value"
    assert api.resolve("act-xyz", "not_done").action_id == "act-xyz789", "a unique prefix works"
    _claim(api, action_id="act-xyz000")
    with pytest.raises(RecallError) as err:
        api.resolve("act-xyz", "done")
    assert _code(err) == "unknown_action" and "ambiguous" in str(err.value)


@pytest.mark.parametrize("outcome", ["not_done", "done"])
def test_resolve_refuses_while_the_agents_lease_is_live(
    api: Api, store: RecallStore, outcome: str
) -> None:
    """A call whose run still holds the agent's lease may be running right now: settling it
    by hand would drop its own end and (``not_done``) let a resume run it a second time."""
    lease = api.acquire_lease("ag", "worker-1", 300.0)
    running = _claim(api, action_id="act-pay", epoch=lease.epoch)
    with pytest.raises(LeaseHeld) as err:
        api.resolve("act-pay", outcome)
    assert _code(err) == "lease_held" and err.value.details["holder"] == "worker-1"
    assert "may still be running" in str(err.value) and "worker-1" in str(err.value)
    assert api.end("act-pay", running.action.attempt, "done", result="paid") is True
    assert _claim(api, action_id="act-pay").status == "done", "the call never runs twice"
    # Once the run is over (its lease released, or expired) the action is in doubt: settle it.
    _claim(api, action_id="act-mail", epoch=lease.epoch)
    assert api.release_lease("ag", "worker-1", lease.epoch) is True
    assert api.resolve("act-mail", outcome).status == outcome


def test_agents_summarise_records(api: Api) -> None:
    api.record("b-agent", [HumanMessage("x", id="1"), HumanMessage("y", id="2")])
    _claim(api)
    got = {a.agent_id: a for a in api.agents()}
    assert sorted(got) == ["ag", "b-agent"]
    assert (got["b-agent"].turns, got["b-agent"].open_actions) == (2, 0)
    assert (got["ag"].turns, got["ag"].open_actions) == (0, 1)
    assert api.has_agent("ag") and not api.has_agent("nobody")


# --- approvals -----------------------------------------------------------------------------


def test_call_records_give_each_calls_latest_attempt_and_decision(api: Api) -> None:
    api.claim("ag", "run-1", tool="t", args={}, args_digest="d")
    api.end("run-1", 1, "abandoned")
    api.claim("ag", "run-1", tool="t", args={}, args_digest="d")
    api.end("run-1", 2, "done", result="ok")
    api.record_decision("ag", "pay-1", "requested", args={"n": 1}, args_digest="d1")
    api.record_decision("ag", "pay-1", "reject", message="no")
    api.claim("other", "run-2", tool="t", args={}, args_digest="d")
    found = api.call_records("ag", ["run-1", "pay-1", "run-2", "none", "run-1"])
    assert sorted(found) == ["pay-1", "run-1"]  # another agent's call is not this one's
    run = found["run-1"].action
    assert run is not None and (run.attempt, run.status, run.result) == (2, "done", "ok")
    assert found["run-1"].decision is None
    assert (found["pay-1"].action, found["pay-1"].decision) == (None, "reject")
    assert found["pay-1"].message == "no"
    assert api.call_records("ag", []) == {}


def test_approval_is_spent_once_for_exactly_its_arguments(api: Api) -> None:
    api.record_decision("ag", "pay-1", "requested", args={"n": 10}, args_digest="d10")
    assert [p.action_id for p in api.pending_approvals("ag")] == ["pay-1"]
    yes = api.record_decision("ag", "pay-1", "approve", args={"n": 10}, args_digest="d10")
    assert yes.decision == "approve" and yes.args == {"n": 10}
    assert api.pending_approvals("ag") == []
    with pytest.raises(ApprovalMismatch) as err:
        api.spend_approval("ag", "pay-1", "d9999", 1)
    assert _code(err) == "approval_mismatch" and "other arguments" in str(err.value)
    assert api.spend_approval("ag", "pay-1", "d10", 1).approval_id == yes.approval_id
    with pytest.raises(ApprovalMismatch) as err:
        api.spend_approval("ag", "pay-1", "d10", 2)
    assert "already used" in str(err.value)
    with pytest.raises(ApprovalMismatch):
        api.spend_approval("other-agent", "pay-1", "d10", 1)


def test_a_later_no_is_enforced(api: Api) -> None:
    api.record_decision("ag", "pay-1", "approve", args_digest="d")
    api.record_decision("ag", "pay-1", "reject", message="wrong account")
    with pytest.raises(ApprovalDenied) as err:
        api.spend_approval("ag", "pay-1", "d", 1)
    assert _code(err) == "approval_denied" and "wrong account" in str(err.value)
    api.record_decision("ag", "pay-1", "approve", args_digest="d")
    assert api.spend_approval("ag", "pay-1", "d", 1).decision == "approve"


def test_no_decision_means_approval_required(api: Api) -> None:
    with pytest.raises(RecallError) as err:
        api.spend_approval("ag", "pay-1", "d", 1)
    assert _code(err) == "approval_required"
    api.record_decision("ag", "pay-1", "requested", args_digest="d")
    with pytest.raises(RecallError) as err:
        api.spend_approval("ag", "pay-1", "d", 1)
    assert _code(err) == "approval_required"
    with pytest.raises(RecallError) as err:
        api.record_decision("ag", "pay-1", "maybe")
    assert _code(err) == "invalid_value"


def test_a_forged_or_foreign_decision_does_not_spend(
    api: Api, store: RecallStore, store_target: str
) -> None:
    real = api.record_decision("ag", "pay-1", "approve", args_digest="d10")
    assert api.verify_approvals() == []
    # Someone with database access writes a "yes" for other arguments, without the secret.
    with store._db.tx(write=True) as tx:
        tx.run(
            "INSERT INTO recall_approvals (approval_id, agent_id, action_id, decision, args_digest, "
            "signature, created_at, seq, attempt) "
            "VALUES (?, 'ag', 'pay-1', 'approve', 'd9999', ?, {now}, 2, 1)",
            (real.approval_id + "z", real.signature),
        )
    with pytest.raises(ApprovalMismatch) as err:
        api.spend_approval("ag", "pay-1", "d9999", 1)
    assert "signature" in str(err.value)
    assert [a.args_digest for a in api.verify_approvals()] == ["d9999"]
    # A store opened with another secret cannot spend decisions signed with ours.
    api.record_decision("ag", "pay-2", "approve", args_digest="d")
    with RecallStore.open(store_target, secret="another-secret-" + "1" * 32) as other:
        with pytest.raises(ApprovalMismatch):
            other.spend_approval("ag", "pay-2", "d", 1)
    assert api.spend_approval("ag", "pay-2", "d", 1).action_id == "pay-2"


# --- leases --------------------------------------------------------------------------------


def test_lease_acquire_free_ours_and_held(api: Api) -> None:
    first = api.acquire_lease("ag", "worker-a", 30.0)
    assert (first.holder, first.epoch) == ("worker-a", 1)
    # Its own lease, still live: another process under the same holder id (a worker restarted
    # under its name) takes it at once, at a new epoch that fences the old one out.
    again = api.acquire_lease("ag", "worker-a", 60.0)
    assert again.epoch == 2 and again.expires_at > first.expires_at
    with pytest.raises(LeaseHeld) as err:
        api.acquire_lease("ag", "worker-b", 30.0)
    e = err.value
    assert e.code == "lease_held"
    assert e.details["holder"] == "worker-a" and e.details["epoch"] == 2
    assert e.details["agent_id"] == "ag" and e.details["expires_at"] == again.expires_at
    assert "worker-a" in str(e) and "wait=" in str(e)
    assert api.lease("ag") == again
    assert api.lease("nobody") is None


def test_lease_epoch_grows_on_every_change_of_holder(api: Api, store: RecallStore) -> None:
    a = api.acquire_lease("ag", "worker-a", 0.05)
    wait_db_clock_past(store, a.expires_at)
    b = api.acquire_lease("ag", "worker-b", 30.0)
    assert (b.holder, b.epoch) == ("worker-b", 2)
    assert api.release_lease("ag", "worker-b", 2) is True
    a2 = api.acquire_lease("ag", "worker-a", 30.0)
    assert (a2.holder, a2.epoch) == ("worker-a", 3), "a released lease is free at once"
    assert api.release_lease("ag", "worker-a", 3) is True
    # Released, then taken again by the same holder (the next run of one process): the epoch
    # stays, and so does what a process remembers of its own last run (the catch-up it skips).
    assert api.acquire_lease("ag", "worker-a", 30.0).epoch == 3
    assert api.acquire_lease("ag", "worker-a", 30.0).epoch == 4, "live: another process"


def test_lease_renew_and_release_need_the_current_holder_and_epoch(
    api: Api, store: RecallStore
) -> None:
    a = api.acquire_lease("ag", "worker-a", 0.05)
    wait_db_clock_past(store, a.expires_at)
    b = api.acquire_lease("ag", "worker-b", 5.0)
    assert api.renew_lease("ag", "worker-a", a.epoch, 30.0) is False, (
        "a fenced-out holder cannot renew"
    )
    assert api.release_lease("ag", "worker-a", a.epoch) is False
    assert api.renew_lease("ag", "worker-b", b.epoch - 1, 30.0) is False
    assert api.renew_lease("ag", "worker-b", b.epoch, 30.0) is True
    renewed = api.lease("ag")
    assert renewed.expires_at > b.expires_at and renewed.expires_at > db_now(store) + 20
    with pytest.raises(LeaseHeld):
        api.acquire_lease("ag", "worker-a", 5.0)


# --- a run's final write: its last turns with its lease's release --------------------------


def _said(*ids: str) -> list[HumanMessage]:
    return [HumanMessage(f"text of {i}", id=i) for i in ids]


def _recorded(store: RecallStore, agent: str) -> list[str]:
    return _ids(store.turns(agent))


def test_a_final_write_records_and_gives_the_lease_up_in_one_transaction(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = store.acquire_lease("ag", "worker-a", 30.0)
    opened = count_transactions(store, monkeypatch)
    assert store._end_run("ag", "worker-a", lease.epoch, _said("m1", "m2"), thread_id="t") is True
    assert len(opened) == 1
    assert _recorded(store, "ag") == ["m1", "m2"]
    assert [t.thread_id for t in store.turns("ag")] == ["t", "t"]
    assert store.lease("ag").expires_at == 0, "given up, not left to expire"
    assert store.acquire_lease("ag", "worker-b", 30.0).holder == "worker-b"


def test_a_final_write_under_a_lease_taken_over_records_nothing(store: RecallStore) -> None:
    # The holder ended after another took its expired lease over: the turns are the new
    # holder's to record (its catch-up reads them from the checkpoints, before its own), and
    # the lease stays the new holder's.
    mine = store.acquire_lease("ag", "worker-a", 0.05)
    store.record("ag", _said("m0"))
    wait_db_clock_past(store, mine.expires_at)
    theirs = store.acquire_lease("ag", "worker-b", 30.0)
    assert store._end_run("ag", "worker-a", mine.epoch, _said("m1"), thread_id="t") is False
    assert _recorded(store, "ag") == ["m0"]
    assert store.lease("ag") == theirs


def test_a_final_write_after_the_lease_expired_unclaimed_still_records(
    store: RecallStore,
) -> None:
    mine = store.acquire_lease("ag", "worker-a", 0.05)
    wait_db_clock_past(store, mine.expires_at)
    assert store._end_run("ag", "worker-a", mine.epoch, _said("m1"), thread_id="t") is True
    assert _recorded(store, "ag") == ["m1"]


def test_a_final_write_skips_what_is_recorded_and_leaves_no_gap(store: RecallStore) -> None:
    # On PostgreSQL the one statement is refused by the unique index, and the locking path
    # (release, then the ids already recorded read under the agent row's lock) takes over.
    lease = store.acquire_lease("ag", "worker-a", 30.0)
    store.record("ag", _said("m1"))
    assert store._end_run("ag", "worker-a", lease.epoch, _said("m1", "m2", "m3"), thread_id="t")
    assert [(t.msg_id, t.seq) for t in store.turns("ag")] == [("m1", 1), ("m2", 2), ("m3", 3)]
    assert store.lease("ag").expires_at == 0
    assert verify(store).problems == []


def test_a_final_write_with_no_messages_only_gives_the_lease_up(store: RecallStore) -> None:
    lease = store.acquire_lease("ag", "worker-a", 30.0)
    assert store._end_run("ag", "worker-a", lease.epoch, [], thread_id="t") is True
    assert store.lease("ag").expires_at == 0
    assert _recorded(store, "ag") == []


def test_a_released_lease_is_not_renewed(api: Api) -> None:
    # A renewal that raced the run's end (the renewer picked the lease, the run released it)
    # must not hold the lease again for a whole ttl with nobody behind it.
    lease = api.acquire_lease("ag", "worker-a", 30.0)
    assert api.release_lease("ag", "worker-a", lease.epoch) is True
    assert api.renew_lease("ag", "worker-a", lease.epoch, 30.0) is False
    assert api.lease("ag").expires_at == 0
    assert api.acquire_lease("ag", "worker-b", 30.0).holder == "worker-b"


def test_repeat_lookup_of_a_finished_action_takes_no_write_lock(tmp_path: Any) -> None:
    """A resume re-claims finished calls; that must not queue behind (or fail on) writers."""
    import sqlite3

    path = str(tmp_path / "recall.db")
    with RecallStore.open(path, busy_timeout=0.2) as store:
        _claim(Api(store, "sync"))
        store.end("act-1", 1, "done", result="sent")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            assert (
                store.claim("ag", "act-1", tool="t", args={}, args_digest="d1").action.result
                == "sent"
            )
            with pytest.raises(RecallError) as err:
                store.claim("ag", "act-2", tool="t", args={}, args_digest="d1")
            assert err.value.code == "database" and "locked" in str(err.value)
        finally:
            blocker.rollback()
            blocker.close()


def test_a_long_list_sent_again_is_checked_by_id_before_anything_is_serialised(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hook's first call in a new process sends the whole history; most of it is recorded
    # already. PostgreSQL's one-statement recording would serialise and ship all of it.
    agent = f"hist-{uuid.uuid4().hex}"  # the session's database is shared by tests
    with RecallStore.open(pg_database) as store:
        history = [HumanMessage(f"m{i}", id=f"h{i}") for i in range(400)]
        assert store.record(agent, history) == 400
        with captured_sql(monkeypatch) as seen:
            assert store.record(agent, [*history, HumanMessage("new", id="h400")]) == 1
        assert any("msg_id IN" in sql for sql, _ in seen)
        assert not any("WITH ag AS (INSERT INTO recall_agents" in sql for sql, _ in seen)
        with captured_sql(monkeypatch) as seen:
            assert store.record(agent, [HumanMessage("next", id="h401")]) == 1
        assert [sql for sql, _ in seen if "recall_turns" in sql][0].startswith(
            "WITH ag AS (INSERT INTO recall_agents"
        )
        assert [t.seq for t in store.turns(agent, last=3)] == [400, 401, 402]


def test_the_thread_marker_answers_the_previous_thread_and_keeps_the_items_shape(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run's start notes the agent's thread and learns where it ran before (to record what a
    # crash left there). On PostgreSQL the read and the write are one statement.
    ns = ("recall", "ag", "runs")
    assert store._switch_thread("ag", "t1") is None  # first run: nowhere before
    assert store.get(ns, "thread").value == {"thread_id": "t1"}  # type: ignore[union-attr]
    assert store._switch_thread("ag", "t1") is None  # same thread: nothing to catch up
    statements: list[str] = []
    real_one, real_run = Tx.one, Tx.run
    monkeypatch.setattr(
        Tx, "one", lambda tx, sql, p=(): statements.append(sql) or real_one(tx, sql, p)
    )
    monkeypatch.setattr(
        Tx, "run", lambda tx, sql, p=(): statements.append(sql) or real_run(tx, sql, p)
    )
    assert store._switch_thread("ag", "t2") == "t1"
    monkeypatch.undo()
    # PostgreSQL: one statement, one round trip; SQLite: the read and the upsert.
    assert len(statements) == (1 if store.dialect == "postgres" else 2), statements
    item = store.get(ns, "thread")
    assert item is not None and item.value == {"thread_id": "t2"}
    assert store._switch_thread("ag", "t1") == "t2"
    assert store._switch_thread("other", "t1") is None  # per agent
    assert store.get(ns, "thread").value == {"thread_id": "t1"}  # type: ignore[union-attr]
    # Not a searchable item: the marker is bookkeeping, not a memory.
    assert all(i.key != "thread" for i in store.search(ns, query="t1"))


def test_taking_a_lease_is_one_statement_without_a_transaction_on_postgresql(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The take is one conditional upsert, atomic on its own: PostgreSQL runs it autocommitted
    # (one round trip); SQLite keeps BEGIN IMMEDIATE on its writers' connection.
    opened: list[bool] = []
    real_tx = store._db.tx

    def spy(write: bool = False, **kwargs: Any) -> Any:
        opened.append(write)
        return real_tx(write, **kwargs)

    monkeypatch.setattr(store._db, "tx", spy)
    lease = store.acquire_lease("ag", "me", 60.0)
    assert opened == [store.dialect == "sqlite"]
    with pytest.raises(LeaseHeld) as held:
        store.acquire_lease("ag", "someone else", 60.0)
    assert (held.value.details["holder"], held.value.details["epoch"]) == ("me", lease.epoch)
    assert store.release_lease("ag", "me", lease.epoch) is True
    assert store.acquire_lease("ag", "someone else", 60.0).epoch == lease.epoch + 1
