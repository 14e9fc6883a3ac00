"""Several tool calls in one AI message, run by one ToolNode task (the ``tools_condition``
layout): a sibling's interrupt re-runs the whole task on resume (research 2d)."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

import pytest
from fix_tools import build_graph, call, read_effects, record_effect, reply
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from langgraph_recall.tools import DurableToolNode, IdempotencyKey


def _tools(effects: str) -> list[Any]:
    @tool
    def notify(who: str, key: IdempotencyKey) -> str:
        """Side effect that finishes at once."""
        record_effect(effects, what="notify", who=who, key=key)
        return f"notified {who}"

    @tool
    def ask(question: str, key: IdempotencyKey) -> str:
        """Asks a person (interrupt inside the tool), then acts on the answer."""
        record_effect(effects, what="ask-started", key=key)
        answer = interrupt({"question": question})
        record_effect(effects, what="ask-done", answer=answer, key=key)
        return f"answer: {answer}"

    return [notify, ask]


def _plain_tools(effects: str) -> list[Any]:
    @tool
    def notify(who: str) -> str:
        """Side effect that finishes at once."""
        record_effect(effects, what="notify", who=who)
        return f"notified {who}"

    @tool
    def ask(question: str) -> str:
        """Asks a person."""
        answer = interrupt({"question": question})
        record_effect(effects, what="ask-done", answer=answer)
        return f"answer: {answer}"

    return [notify, ask]


SCRIPT = [reply("", call("notify", who="ops"), call("ask", question="go ahead?")), reply("done")]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_finished_sibling_runs_once_when_another_call_interrupts(
    store, saver, tmp_path, mode
) -> None:
    effects = str(tmp_path / "e.log")
    node = DurableToolNode(_tools(effects), classes={"notify": "external", "ask": "external"})
    graph = build_graph(node, SCRIPT, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": f"sib-{mode}"}}
    start = {"messages": [HumanMessage("go")]}
    if mode == "sync":
        graph.invoke(start, config)
        out = graph.invoke(Command(resume="yes"), config)
    else:
        await graph.ainvoke(start, config)
        out = await graph.ainvoke(Command(resume="yes"), config)
    done = Counter(e["what"] for e in read_effects(effects))
    assert done["notify"] == 1 and done["ask-done"] == 1
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [
        "notified ops",
        "answer: yes",
    ]
    # The interrupted call's re-run is the same action under the same key (a later attempt:
    # one that asks before its sibling is through also stops once to wait for its turn).
    keys = {e["key"] for e in read_effects(effects) if e["what"].startswith("ask")}
    ask_action = next(a for a in store.actions(f"sib-{mode}") if a.tool == "ask")
    assert keys == {ask_action.idempotency_key} and ask_action.attempt >= 2


def test_plain_toolnode_runs_the_finished_sibling_again(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = build_graph(ToolNode(_plain_tools(effects)), SCRIPT, store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "plain"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    graph.invoke(Command(resume="yes"), config)
    assert Counter(e["what"] for e in read_effects(effects))["notify"] == 2


def test_gated_calls_in_one_message_each_get_their_own_decision_in_call_order(
    store, saver, tmp_path
) -> None:
    effects = str(tmp_path / "e.log")

    @tool
    def pay(amount: int, to: str, key: IdempotencyKey) -> str:
        """Pay."""
        record_effect(effects, amount=amount, to=to)
        return f"paid {amount} to {to}"

    calls = [call("pay", amount=10 * (i + 1), to=f"p{i}") for i in range(3)]
    for round_ in range(4):  # threads race differently each time; the questions must not
        node = DurableToolNode([pay], classes={"pay": "external"}, approve=("pay",))
        graph = build_graph(
            node, [reply("", *calls), reply("done")], store=store, checkpointer=saver
        )
        config = {"configurable": {"thread_id": f"gated-{round_}"}}
        out = graph.invoke({"messages": [HumanMessage("pay them")]}, config)
        asked = []
        answers = iter(
            [{"type": "approve"}, {"type": "reject", "message": "not p1"}, {"type": "approve"}]
        )
        while "__interrupt__" in out:
            [pending] = out["__interrupt__"]
            asked.append(pending.value["args"]["to"])
            out = graph.invoke(Command(resume={pending.id: next(answers)}), config)
        assert asked == ["p0", "p1", "p2"]
        paid = [(e["amount"], e["to"]) for e in read_effects(effects)]
        assert paid == [(10, "p0"), (30, "p2")]
        rejected = [
            m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"
        ]
        assert len(rejected) == 1 and "not p1" in str(rejected[0].content)
        os.remove(effects)


# --- questions asked inside tools, beside other questions --------------------------------------


def _asking_tools(effects: str) -> list[Any]:
    @tool
    def delete_branch(name: str, key: IdempotencyKey) -> str:
        """Deletes a branch once a person confirms (asks inside the tool)."""
        time.sleep(0.2)  # looks the branch up first: its question comes after the other's
        answer = interrupt({"confirm": f"delete branch {name}?"})
        if answer == "yes":
            record_effect(effects, what="delete", name=name, key=key)
            return f"deleted {name}"
        return f"kept {name}"

    @tool
    def refund(order: str, key: IdempotencyKey) -> str:
        """Refunds an order once a person confirms (asks inside the tool)."""
        answer = interrupt({"confirm": f"refund {order}?"})
        if answer == "yes":
            record_effect(effects, what="refund", order=order, key=key)
        return f"refund {order}: {answer}"

    @tool
    def pay(amount: int, to: str, key: IdempotencyKey) -> str:
        """Pays someone (gated by approve=)."""
        record_effect(effects, what="pay", amount=amount, to=to, key=key)
        return f"paid {amount} to {to}"

    return [delete_branch, refund, pay]


def _asking_graph(store: Any, saver: Any, effects: str, calls: list[Any], **options: Any) -> Any:
    """A graph whose model asks once for ``calls`` (one step), then answers "ok"."""
    node = DurableToolNode(
        _asking_tools(effects),
        classes={"delete_branch": "external", "refund": "external", "pay": "external"},
        **options,
    )
    return build_graph(node, [reply("", *calls), reply("ok")], store=store, checkpointer=saver)


def _invoke(graph: Any, value: Any, config: dict[str, Any], mode: str) -> dict[str, Any]:
    # A loop of its own per run, as a script's asyncio.run(): what is still running when the run
    # returns is cancelled with the loop, not left to finish during the next run.
    if mode == "async":
        return asyncio.run(graph.ainvoke(value, config))
    return graph.invoke(value, config)


def _asked(out: dict[str, Any]) -> list[Any]:
    return [i.value for i in out.get("__interrupt__", [])]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_answer_to_a_tools_question_never_approves_a_sibling_call(
    store, saver, tmp_path, mode
) -> None:
    effects = str(tmp_path / "e.log")
    calls = [call("delete_branch", name="old"), call("pay", amount=9999, to="mallory")]
    graph = _asking_graph(store, saver, effects, calls, approve=("pay",))
    cfg = {"configurable": {"thread_id": f"leak-{mode}"}}
    out = _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    assert _asked(out) == [{"confirm": "delete branch old?"}]
    # The "yes" below went to pay's approval, which was never shown: pay(9999, mallory) ran.
    out = _invoke(graph, Command(resume="yes"), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["delete"]
    [request] = _asked(out)
    assert (request["type"], request["tool"]) == ("approval_request", "pay")
    out = _invoke(graph, Command(resume={"type": "reject", "message": "no"}), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["delete"]
    replies = [(m.name, m.status) for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies == [("delete_branch", "success"), ("pay", "error")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_question_inside_a_tool_gets_the_answer_given_to_it(
    store, saver, tmp_path, mode
) -> None:
    effects = str(tmp_path / "e.log")
    calls = [call("refund", order="o-1"), call("delete_branch", name="main")]
    graph = _asking_graph(store, saver, effects, calls)
    cfg = {"configurable": {"thread_id": f"shift-{mode}"}}
    out = _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    assert _asked(out) == [{"confirm": "refund o-1?"}]
    out = _invoke(graph, Command(resume="yes"), cfg, mode)
    assert _asked(out) == [{"confirm": "delete branch main?"}]
    # The finished refund, answered from its record, stopped asking: the "no" below moved one
    # place and the branch was deleted with the refund's "yes".
    out = _invoke(graph, Command(resume="no"), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["refund"]
    replies = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies == ["refund o-1: yes", "kept main"]
    # Under ainvoke the second asker was left open (in doubt): its interrupt came after
    # asyncio.gather had raised the first one.
    assert store.actions(f"shift-{mode}", open_only=True) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_quick_question_waits_for_the_calls_before_it(store, saver, tmp_path, mode) -> None:
    effects = str(tmp_path / "e.log")
    # delete_branch looks its branch up before asking; refund asks at once, so it asked first
    # and took the answer given to the question shown (delete_branch's, the first call's).
    calls = [call("delete_branch", name="old"), call("refund", order="o-1")]
    graph = _asking_graph(store, saver, effects, calls)
    cfg = {"configurable": {"thread_id": f"quick-{mode}"}}
    out = _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    assert _asked(out) == [{"confirm": "delete branch old?"}]
    out = _invoke(graph, Command(resume="yes"), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["delete"]
    assert _asked(out) == [{"confirm": "refund o-1?"}]
    out = _invoke(graph, Command(resume="no"), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["delete"]
    replies = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies == ["deleted old", "refund o-1: no"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_edit_sent_back_with_a_problem_keeps_the_places_after_it(
    store, saver, tmp_path, mode
) -> None:
    effects = str(tmp_path / "e.log")
    calls = [call("pay", amount=10, to="bob"), call("pay", amount=9999, to="mallory")]
    graph = _asking_graph(store, saver, effects, calls, approve=("pay",))
    cfg = {"configurable": {"thread_id": f"edit-{mode}"}}
    out = _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    # The first edit does not fit the tool and comes back with a problem: it took a place too,
    # and when pay(bob) was answered from its record it took one, so the valid edit went on
    # to the mallory call and the person's "reject" was never read: both paid 5 to bob.
    for answer in (
        {"type": "edit", "args": {"amount": "lots"}},
        {"type": "edit", "args": {"amount": 5, "to": "bob"}},
        {"type": "reject", "message": "never pay mallory"},
    ):
        assert _asked(out)
        out = _invoke(graph, Command(resume=answer), cfg, mode)
    assert [(e["amount"], e["to"]) for e in read_effects(effects)] == [(5, "bob")]
    replies = [(m.status, str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies[0][0] == "success" and "paid 5 to bob" in replies[0][1]
    assert replies[1][0] == "error" and "rejected pay(amount=9999" in replies[1][1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_update_state_the_next_question_gets_the_next_answer(
    store, saver, tmp_path, mode
) -> None:
    effects = str(tmp_path / "e.log")
    calls = [call("refund", order="o-1"), call("delete_branch", name="main")]
    graph = _asking_graph(store, saver, effects, calls)
    cfg = {"configurable": {"thread_id": f"upd-{mode}"}}
    _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    out = _invoke(graph, Command(resume="yes"), cfg, mode)
    assert _asked(out) == [{"confirm": "delete branch main?"}]
    # A new checkpoint: the step runs as a new task, which holds none of its answers. The
    # refund, answered from its record, moved the counter past them and LangGraph failed
    # with AssertionError(([], 1)); delete_branch was recorded as failed, never asked.
    graph.update_state(cfg, {"messages": []}, as_node="agent")
    out = _invoke(graph, None, cfg, mode)
    assert _asked(out) == [{"confirm": "delete branch main?"}]
    out = _invoke(graph, Command(resume="no"), cfg, mode)
    assert [e["what"] for e in read_effects(effects)] == ["refund"]
    replies = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies == ["refund o-1: yes", "kept main"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_that_raises_does_not_cut_off_a_slower_sibling(store, saver, tmp_path, mode) -> None:
    effects = str(tmp_path / "e.log")

    @tool
    def boom(x: int, key: IdempotencyKey) -> str:
        """Raises."""
        raise RuntimeError("boom")

    @tool
    def slow_send(to: str, key: IdempotencyKey) -> str:
        """A slow external send."""
        time.sleep(0.5)
        record_effect(effects, what="send", to=to, key=key)
        return f"sent {to}"

    node = DurableToolNode([boom, slow_send], classes={"boom": "external", "slow_send": "external"})
    script = [reply("", call("boom", x=1), call("slow_send", to="ann")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    cfg = {"configurable": {"thread_id": f"raise-{mode}"}}
    # ToolNode's default error handling lets the tool's error end the run; asyncio.gather
    # raised it at once and the send, still running, never recorded its end: in doubt.
    with pytest.raises(RuntimeError, match="boom"):
        _invoke(graph, {"messages": [HumanMessage("go")]}, cfg, mode)
    assert [e["to"] for e in read_effects(effects)] == ["ann"]
    status = {a.tool: a.status for a in store.actions(f"raise-{mode}")}
    assert status == {"boom": "failed", "slow_send": "done"}


def crash_asking_worker(target: str, effects: str, stage: str, crash: bool = False) -> int:
    """One run of a refund (asks), a slow lookup and a delete_branch (asks) in one step, in a
    process of its own; ``crash``: the lookup kills the process once the refund has finished
    in that run, before the task's answers are saved. ``stage``: "start", "none" (what a
    restarted worker does) or the answer to resume with."""
    from langgraph_recall import RecallStore

    @tool
    def lookup(x: str) -> str:
        """Pure and slow."""
        time.sleep(0.5)
        if crash:
            os._exit(9)
        return f"looked up {x}"

    node = DurableToolNode(
        [*_asking_tools(effects), lookup],
        classes={"delete_branch": "external", "refund": "external", "pay": "external"}
        | {"lookup": "pure"},
    )
    calls = [call("refund", order="o-1"), call("lookup", x="q"), call("delete_branch", name="main")]
    value: Any = Command(resume=stage)
    if stage in ("start", "none"):
        value = {"messages": [HumanMessage("go")]} if stage == "start" else None
    store = RecallStore.open(target)
    try:
        checkpointer = store.checkpointer(lease_ttl=1.0, wait=10.0)
        graph = build_graph(
            node, [reply("", *calls), reply("ok")], store=store, checkpointer=checkpointer
        )
        graph.invoke(value, {"configurable": {"thread_id": "crash-ask"}})
        return 0
    finally:
        store.close()


@pytest.mark.slow
def test_a_crash_that_loses_the_steps_answers_still_gives_each_its_own(
    store: Any, store_target: str, tmp_path: Any
) -> None:
    from fix_tools import spawn

    effects = str(tmp_path / "e.log")

    def run(stage: str, crash: bool = False) -> int | None:
        worker = spawn(
            "test_tools_parallel:crash_asking_worker",
            target=store_target,
            effects=effects,
            stage=stage,
            crash=crash,
        )
        return worker.wait(120)

    assert run("start") == 0
    # The refund takes "yes" and finishes; the process dies in the lookup before the step's
    # answers are saved. The restarted worker's refund, answered from its record, took no
    # answer, and delete_branch took the refund's "yes" without being asked: main deleted.
    assert run("yes", crash=True) == 9
    assert run("none") == 0
    assert [e["what"] for e in read_effects(effects)] == ["refund"]
    assert run("no") == 0
    assert [e["what"] for e in read_effects(effects)] == ["refund"]
    done = {
        a.tool: (a.status, getattr(a.result, "content", None)) for a in store.actions("crash-ask")
    }
    assert done["delete_branch"] == ("done", "kept main")
    assert done["refund"] == ("done", "refund o-1: yes")


def test_a_call_waiting_too_long_for_its_turn_is_a_durability_error(monkeypatch) -> None:
    from langgraph_recall import RecallError
    from langgraph_recall.tools import _order

    # The async wait raised a bare TimeoutError where the sync one raised RecallError.
    monkeypatch.setattr(_order, "TURN_TIMEOUT", 0.05)
    turns = _order.Turns(["first", "second"])
    with pytest.raises(RecallError) as err:
        turns.wait("second")
    assert err.value.code == "durability"
    with pytest.raises(RecallError) as err:
        asyncio.run(turns.await_turn("second"))
    assert err.value.code == "durability" and "second" in str(err.value)
    turns.release("first")
    turns.wait("second")
