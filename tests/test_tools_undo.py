"""store.undo(agent): newest first, each undo once, stopping at anything in doubt."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fix_store import write_planned
from fix_tools import build_graph, call, reply
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_recall import ActionEnd, InDoubt, LeaseHeld, LeaseLost, RecallError, RecallStore
from langgraph_recall.tools import DurableToolNode, IdempotencyKey
from langgraph_recall.tools._canonical import action_key, args_digest
from langgraph_recall.tools._undo import undo_action_id


def _charging_agent(
    store: Any, saver: Any, agent: str, refunds: list[Any], charges: int = 3
) -> Any:
    @tool
    def charge(amount: Decimal, customer: str, key: IdempotencyKey) -> str:
        """Charge a customer."""
        return f"charged {amount} to {customer}"

    @tool
    def note(text: str) -> str:
        """Write a note (no undo)."""
        return "noted"

    def refund(amount: Decimal, customer: str, result: Any, idempotency_key: str) -> str:
        refunds.append((amount, customer, type(amount), result.content, idempotency_key))
        return f"refunded {amount}"

    node = DurableToolNode(
        [charge, note],
        classes={"charge": "external", "note": "external"},
        undo={"charge": refund},
    )
    script = [
        reply("", call("charge", amount=f"{i + 1}.50", customer=f"c{i}")) for i in range(charges)
    ]
    script.insert(1, reply("", call("note", text="hi")))
    graph = build_graph(
        node, [*script, reply("done")], store=store, checkpointer=saver, name_prefix=agent
    )
    graph.invoke(
        {"messages": [HumanMessage("charge them")]}, {"configurable": {"thread_id": agent}}
    )
    return node


def test_undo_reverses_done_actions_newest_first_with_original_types(store, saver) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "undo", refunds)
    report = store.undo("undo")
    assert [(r[0], r[1], r[2]) for r in refunds] == [
        (Decimal("3.50"), "c2", Decimal),
        (Decimal("2.50"), "c1", Decimal),
        (Decimal("1.50"), "c0", Decimal),
    ]
    assert [r[3] for r in refunds] == [
        "charged 3.50 to c2",
        "charged 2.50 to c1",
        "charged 1.50 to c0",
    ]
    charges = [a for a in store.actions("undo") if a.tool == "charge"]
    assert report.undone == [a.action_id for a in reversed(charges)]
    assert [r[4] for r in refunds] == [undo_action_id(a.action_id) for a in reversed(charges)]
    [note] = [a for a in store.actions("undo") if a.tool == "note"]
    assert report.no_undo == [note.action_id] and report.stopped_at is None


def test_each_undo_runs_once(store, saver) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "once", refunds)
    first = store.undo("once")
    second = store.undo("once")
    assert len(refunds) == 3
    # It said "undone: 3" again, as if it had refunded them twice.
    assert second.undone == [] and second.already_undone == first.undone


def test_undo_stops_at_an_action_in_doubt(store, saver) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "doubt", refunds)
    # A later charge left open by a crash: what happened after it is unknown.
    stuck = action_key("doubt", "x", "y", "charge")
    args = {"amount": Decimal("9"), "customer": "c9"}
    store.claim("doubt", stuck, tool="charge", args=args, args_digest=args_digest("charge", args))
    report = store.undo("doubt")
    assert refunds == [] and report.undone == [] and report.stopped_at == stuck


def test_undo_walks_past_a_planned_call_that_never_started(store, saver) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "planned", refunds)
    # A later charge planned with its AI message, its tool never begun: nothing to reverse,
    # and nothing unknown after it, so the walk goes on.
    args = {"amount": Decimal("9"), "customer": "c9"}
    digest = args_digest("charge", args)
    key = action_key("planned", "x", "y", "charge")
    write_planned(store, "planned", key, "charge", args, digest)
    report = store.undo("planned")
    assert len(refunds) == 3 and report.stopped_at is None


def test_a_failed_undo_is_reported_and_not_retried(store, saver) -> None:
    calls: list[str] = []

    def refund(amount: Decimal, customer: str) -> str:
        calls.append(customer)
        raise RuntimeError("bank down")

    agent = "failing"

    @tool
    def charge(amount: Decimal, customer: str) -> str:
        """Charge."""
        return "charged"

    node = DurableToolNode([charge], classes={"charge": "external"}, undo={"charge": refund})
    graph = build_graph(
        node,
        [reply("", call("charge", amount="1", customer="c0")), reply("ok")],
        store=store,
        checkpointer=saver,
    )
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": agent}})
    assert store.undo(agent).failed == [store.actions(agent)[0].action_id]
    assert store.undo(agent).failed == [store.actions(agent)[0].action_id]
    assert calls == ["c0"]


def test_a_new_process_passes_its_undo_functions_to_undo(store, saver, store_target) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "later", refunds)
    # A new process (a fresh store on the same records) that has run no node: its registry is
    # empty, so without undo= nothing can be reversed, and it says so.
    with RecallStore.open(store_target) as fresh:
        report = fresh.undo("later")
        assert refunds == [] and report.undone == [] and len(report.no_undo) == 4

        def refund(amount: Decimal, customer: str) -> str:
            refunds.append((amount, customer))
            return "refunded"

        report = fresh.undo("later", undo={"charge": refund})
        assert refunds == [
            (Decimal("3.50"), "c2"),
            (Decimal("2.50"), "c1"),
            (Decimal("1.50"), "c0"),
        ]
        assert len(report.undone) == 3 and len(report.no_undo) == 1  # the note has none
        with pytest.raises(RecallError) as err:
            fresh.undo("later", undo={"charge": "refund"})  # type: ignore[dict-item]
        assert err.value.code == "invalid_value"


def test_the_undo_of_the_node_that_ran_last_is_the_one_used(store, saver) -> None:
    # A notebook cell run again builds the node with a fixed undo function; the store kept
    # calling the first one it was ever given for that tool name.
    old: list[Any] = []
    _charging_agent(store, saver, "first", old, charges=1)
    new: list[Any] = []
    _charging_agent(store, saver, "second", new, charges=1)
    store.undo("second")
    assert old == [] and len(new) == 1


def test_an_undo_for_a_pure_tool_is_refused_when_the_node_is_built() -> None:
    from langgraph_recall import RecallMiddleware

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    def unlookup(q: str) -> None:
        raise AssertionError("never called: a pure call is not recorded")

    # It was accepted, and store.undo() then never found a call of the tool to reverse.
    for build in (
        lambda: DurableToolNode([lookup], classes={"lookup": "pure"}, undo={"lookup": unlookup}),
        lambda: RecallMiddleware(classes={"lookup": "pure"}, undo={"lookup": unlookup}),
    ):
        with pytest.raises(RecallError) as err:
            build()
        assert err.value.code == "invalid_value"
        assert "undo= names pure tools: lookup" in str(err.value)
        assert err.value.details["tools"] == ["lookup"]
    # The same function for a recorded class is accepted.
    DurableToolNode([lookup], classes={"lookup": "external"}, undo={"lookup": unlookup})


@pytest.mark.parametrize("flaw", ["signature", "async", "tool"])
def test_a_bad_undo_function_is_refused_before_anything_is_recorded(
    store: Any, saver: Any, flaw: str
) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "bad-undo", refunds)
    called: list[str] = []

    def refund(amount: Decimal, customer: str) -> None:
        called.append(customer)

    def wrong_args(body: str) -> None:  # the note's argument is text
        called.append("wrong")

    async def async_unnote(text: str) -> None:
        called.append("async")

    @tool
    def wrong_tool(body: str) -> str:
        """Remove a note (a LangChain tool taking other arguments than note's)."""
        called.append("tool")
        return "removed"

    bad = {"signature": wrong_args, "async": async_unnote, "tool": wrong_tool}[flaw]
    # The note is older than two of the charges: they were refunded before the bad function
    # was met, and the bad undo itself was recorded as failed (never to run again once fixed).
    with pytest.raises(RecallError) as err:
        store.undo("bad-undo", undo={"charge": refund, "note": bad})
    assert err.value.code == "invalid_value"
    message = str(err.value)
    assert "note" in message and "Nothing was undone or recorded" in message
    assert ("async" in message) if flaw == "async" else ("(text)" in message)
    if flaw == "tool":  # what the tool could not take, not only what it had to
        assert "body" in message
    assert called == [] and refunds == []
    assert not [a for a in store.actions("bad-undo") if a.tool.startswith("undo:")]

    def unnote(text: str) -> None:
        called.append(text)

    report = store.undo("bad-undo", undo={"charge": refund, "note": unnote})
    assert len(report.undone) == 4 and report.failed == []
    assert called == ["c2", "c1", "hi", "c0"]


def test_undo_gets_the_whole_result_of_a_long_answer(store: Any, saver: Any) -> None:
    # The record of a long answer keeps a reference to an output, not the text: the undo got
    # "[output ...: N characters]" where it needed the receipt at the end of the text.
    receipt = "receipt r-42"
    long_answer = "x" * (store.output_threshold + 100) + receipt

    @tool
    def export(name: str) -> str:
        """Export a report."""
        return long_answer

    seen: list[Any] = []

    def unexport(name: str, result: Any) -> None:
        seen.append(result)

    node = DurableToolNode([export], classes={"export": "external"}, undo={"export": unexport})
    graph = build_graph(
        node, [reply("", call("export", name="q3")), reply("ok")], store=store, checkpointer=saver
    )
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "long"}})
    [action] = store.actions("long")
    assert receipt not in str(action.result.content)  # the record holds a reference
    assert len(store.undo("long").undone) == 1
    [result] = seen
    assert result.content == long_answer and result.name == "export"
    assert not any(k.startswith("recall_") for k in result.additional_kwargs)


def test_settling_leaves_an_undo_in_doubt_open_for_a_person(store: Any, saver: Any) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "settle-undo", refunds, charges=1)
    [charge_action] = [a for a in store.actions("settle-undo") if a.tool == "charge"]
    # A refund whose process died in it: whether the money went back is unknown.
    undo_id = undo_action_id(charge_action.action_id)
    args = dict(charge_action.args)
    store.claim(
        "settle-undo",
        undo_id,
        tool="undo:charge",
        args=args,
        args_digest=args_digest("undo:charge", args),
    )
    offered: list[str] = []

    def resolver(action: Any) -> ActionEnd:
        offered.append(action.tool)
        return ActionEnd("done", result="the charge went through")  # true of the charge

    @tool
    def charge(amount: Decimal, customer: str) -> str:
        """Charge a customer."""
        return "charged"

    node = DurableToolNode([charge], classes={"charge": "external"}, resolver=resolver)
    report = node.settle(store, "settle-undo")
    # The resolver, asked about the charge's undo, said "done" and closed the refund as made.
    assert offered == [] and report.closed == []
    assert [a.action_id for a in report.open] == [undo_id]
    assert store.action(undo_id).status == "open"
    assert store.undo("settle-undo").stopped_at == undo_id and refunds == []


def test_an_undo_returning_what_cannot_be_recorded_is_recorded_done_with_its_repr(
    store: Any, saver: Any
) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "odd-return", refunds, charges=1)

    class Receipt:
        def __repr__(self) -> str:
            return "Receipt(r-7)"

    calls: list[str] = []

    def refund(amount: Decimal, customer: str) -> Receipt:
        calls.append(customer)
        return Receipt()

    # The refund happened, then recording its end raised: the undo stayed open (in doubt)
    # and every later undo() stopped at it.
    report = store.undo("odd-return", undo={"charge": refund})
    [charge_action] = [a for a in store.actions("odd-return") if a.tool == "charge"]
    assert report.undone == [charge_action.action_id] and calls == ["c0"]
    undone = store.action(undo_action_id(charge_action.action_id))
    assert undone.status == "done" and undone.result == "Receipt(r-7)"
    assert "Receipt" in (undone.note or "")
    again = store.undo("odd-return", undo={"charge": refund})
    assert again.already_undone == report.undone and again.stopped_at is None and calls == ["c0"]


def test_an_undo_raising_in_doubt_stays_open_and_the_walk_stops_at_it(
    store: Any, saver: Any
) -> None:
    refunds: list[Any] = []
    _charging_agent(store, saver, "undo-doubt", refunds)
    calls: list[str] = []

    def refund(amount: Decimal, customer: str) -> str:
        calls.append(customer)
        if customer == "c1":  # the bank took the request and never answered
            raise InDoubt("the bank closed the connection before answering")
        return "refunded"

    charges = [a.action_id for a in store.actions("undo-doubt") if a.tool == "charge"]
    stuck = undo_action_id(charges[1])
    # It was recorded failed (a person reads "not refunded", and refunds again) and the walk
    # went on to refund c0.
    report = store.undo("undo-doubt", undo={"charge": refund})
    assert report.undone == [charges[2]] and report.failed == []
    assert report.stopped_at == stuck and calls == ["c2", "c1"]
    assert store.action(stuck).status == "open" and store.action(stuck).tool == "undo:charge"
    again = store.undo("undo-doubt", undo={"charge": refund})
    assert again.stopped_at == stuck and calls == ["c2", "c1"]
    # A person checks with the bank: the refund went through; the walk goes on past it.
    store.resolve(stuck, "done")
    last = store.undo("undo-doubt", undo={"charge": refund})
    assert last.undone == [charges[0]] and last.stopped_at is None and calls[-1] == "c0"


# --- the agent's lease ---------------------------------------------------------------------------


def _refund_to(refunds: list[str]) -> Any:
    def refund(amount: Decimal, customer: str) -> str:
        refunds.append(customer)
        return "refunded"

    return refund


def test_undo_while_another_holder_has_the_agents_lease_is_lease_held(
    store: Any, saver: Any
) -> None:
    _charging_agent(store, saver, "busy", [], charges=2)
    refunds: list[str] = []
    # A run of the agent in another process: undo refunded under it.
    other = store.acquire_lease("busy", "worker-2", 60)
    with pytest.raises(LeaseHeld) as err:
        store.undo("busy", undo={"charge": _refund_to(refunds)})
    assert err.value.code == "lease_held" and "worker-2" in str(err.value)
    assert "Nothing was undone or recorded" in str(err.value)
    assert refunds == [] and not [a for a in store.actions("busy") if a.tool.startswith("undo:")]
    store.release_lease("busy", "worker-2", other.epoch)
    assert len(store.undo("busy", undo={"charge": _refund_to(refunds)}).undone) == 2
    # It gave the lease back: a run of the agent may start at once.
    assert store.acquire_lease("busy", "worker-2", 60).holder == "worker-2"


def test_undo_that_loses_the_lease_mid_way_starts_no_other_undo(store: Any, saver: Any) -> None:
    _charging_agent(store, saver, "lost", [], charges=3)
    refunds: list[str] = []

    def refund(amount: Decimal, customer: str) -> str:
        refunds.append(customer)
        if customer == "c2":  # meanwhile another process takes the agent over
            mine = store.lease("lost")
            store.release_lease("lost", mine.holder, mine.epoch)
            store.acquire_lease("lost", "worker-2", 60)
        return "refunded"

    charges = [a.action_id for a in store.actions("lost") if a.tool == "charge"]
    with pytest.raises(LeaseLost) as err:
        store.undo("lost", undo={"charge": refund})
    assert err.value.code == "lease_lost" and err.value.details["undone"] == [charges[2]]
    assert "worker-2" in str(err.value)
    # The refund that ran is recorded; none started under the new holder.
    assert refunds == ["c2"] and store.action(undo_action_id(charges[2])).status == "done"
    assert not [a for a in store.actions("lost") if a.action_id == undo_action_id(charges[1])]
    assert store.lease("lost").holder == "worker-2"  # not given back: it was not ours


@pytest.mark.slow
def test_a_killed_undo_blocks_undo_until_its_lease_expires(
    store: Any, saver: Any, store_target: str, tmp_path: Path
) -> None:
    _charging_agent(store, saver, "killed", [], charges=2)
    charges = [a.action_id for a in store.actions("killed") if a.tool == "charge"]
    started = tmp_path / "refund-started"
    code = (
        "import os, sys, time\n"
        "from langgraph_recall import RecallStore\n"
        "def refund(amount, customer):\n"
        "    open(os.environ['STARTED'], 'w').close()\n"
        "    time.sleep(120)  # killed here, mid-refund\n"
        "RecallStore.open(os.environ['TARGET']).undo('killed', undo={'charge': refund}, "
        "lease_ttl=2)\n"
    )
    env = {**os.environ, "TARGET": store_target, "STARTED": str(started)}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert child.poll() is None, "the undo process ended before its refund started"
            assert time.monotonic() < deadline, "the undo process never started its refund"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    refunds: list[str] = []
    # Its lease is still live: the refund may be on its way, so nothing else may act.
    with pytest.raises(LeaseHeld):
        store.undo("killed", undo={"charge": _refund_to(refunds)})
    expires_at = store.lease("killed").expires_at
    time.sleep(max(0.0, expires_at - time.time()) + 0.2)
    # Expired: undo runs, and stops at the refund the kill left open.
    report = store.undo("killed", undo={"charge": _refund_to(refunds)})
    assert report.stopped_at == undo_action_id(charges[1]) and report.undone == []
    assert refunds == []


def test_a_langchain_tool_given_to_undo_runs_as_the_node_would_run_it(
    store: Any, saver: Any
) -> None:
    # DurableToolNode(undo=...) takes a LangChain tool; the same dict given to store.undo by a
    # new process was refused ("must map a tool name to a function": a tool is not callable).
    _charging_agent(store, saver, "tool-undo", [], charges=2)
    refunded: list[str] = []

    @tool
    def refund(amount: Decimal, customer: str) -> str:
        """Refund a charge."""
        refunded.append(f"{customer}:{amount}")
        return "refunded"

    report = store.undo("tool-undo", undo={"charge": refund})
    assert refunded == ["c1:2.50", "c0:1.50"] and len(report.undone) == 2


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_undo_right_after_a_run_langgraph_refused_is_not_lease_held(
    store: Any, saver: Any, tmp_path: Path, use_async: bool
) -> None:
    # Command(resume=None) at an approval fails inside LangGraph after the run took the lease.
    # The agent's next run gives that lease back itself; undo, right after, in the same
    # process, was refused with lease_held "a run of the agent..." by a run that never ran.
    import asyncio

    from fix_tools import pay_graph
    from langgraph.types import Command

    graph = pay_graph(store, saver, str(tmp_path / "effects"))
    config = {"configurable": {"thread_id": "refused-run"}}
    inputs = {"messages": [HumanMessage("pay alice 10")]}

    async def main() -> Any:
        await graph.ainvoke(inputs, config)
        with pytest.raises(Exception):  # noqa: B017 - LangGraph's own error, not ours
            await graph.ainvoke(Command(resume=None), config)
        return await store.aundo("refused-run")

    if use_async:
        report = asyncio.run(main())
    else:
        graph.invoke(inputs, config)
        with pytest.raises(Exception):  # noqa: B017 - LangGraph's own error, not ours
            graph.invoke(Command(resume=None), config)
        report = store.undo("refused-run")
    assert report.undone == [] and report.stopped_at is None


def test_undo_inside_a_run_of_the_agent_says_the_run_here_holds_it(store: Any, saver: Any) -> None:
    # Called from a tool of the agent's own run (or while a graph.stream() of it is not read
    # to the end) undo is refused; it said "a run of the agent, another undo, or one that was
    # killed", and a person looked for another process that was not there.
    _charging_agent(store, saver, "inside", [], charges=1)
    seen: list[str] = []

    @tool
    def roll_back() -> str:
        """Undo what the agent did."""
        try:
            store.undo("inside", undo={"charge": _refund_to([])})
        except LeaseHeld as exc:
            seen.append(str(exc))
        return "tried"

    node = DurableToolNode([roll_back], classes={"roll_back": "pure"})
    graph = build_graph(
        node, [reply("", call("roll_back")), reply("done")], store=store, checkpointer=saver
    )
    graph.invoke(
        {"messages": [HumanMessage("roll back")]},
        {"configurable": {"thread_id": "inside-2", "agent_id": "inside"}},
    )
    [message] = seen
    assert "this process" in message and "inside" in message
    assert "graph.stream" in message and "once the run has returned" in message
    # After the run, it works.
    assert len(store.undo("inside", undo={"charge": _refund_to([])}).undone) == 1


def test_a_langchain_tool_given_as_undo_gets_the_undos_idempotency_key(
    store: Any, saver: Any
) -> None:
    # A tool taking IdempotencyKey (as the tools it undoes do) was invoked without it: its
    # undo failed for good ("key: field required"), or, checked first, was refused.
    _charging_agent(store, saver, "tool-key", [], charges=1)
    got: list[str] = []

    @tool
    def refund(amount: Decimal, customer: str, key: IdempotencyKey) -> str:
        """Refund a charge."""
        got.append(key)
        return "refunded"

    report = store.undo("tool-key", undo={"charge": refund})
    [charge] = [a.action_id for a in store.actions("tool-key") if a.tool == "charge"]
    assert report.undone == [charge] and got == [undo_action_id(charge)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_undo_of_an_unknown_agent_is_unknown_agent_and_takes_no_lease(
    store: Any, mode: str
) -> None:
    import asyncio

    from langgraph_recall import RecallError

    store.record("known", [HumanMessage("hi", id="1")])
    with pytest.raises(RecallError) as err:
        if mode == "sync":
            store.undo("knwon")
        else:
            asyncio.run(store.aundo("knwon"))
    assert err.value.code == "unknown_agent"
    assert "known" in str(err.value) and "check the agent id" in str(err.value)
    # It used to return an empty report and leave a lease row under the mistyped name.
    assert store.lease("knwon") is None
    assert not store.has_agent("knwon")
