"""Approvals bind to the exact arguments a person saw, are spent once, and a "no" wins.

The tampering cases follow research 0.4: between the interrupt and the resume the saved call
is replaced (same message id, same tool call id) with ``pay(9999, "mallory")``. With
HumanInTheLoopMiddleware that executes; here it must not.
"""

from __future__ import annotations

from typing import Any

import pytest
from fix_tools import Zygote, pay_graph, read_effects, zygotes  # noqa: F401 (fixture)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_recall import RecallError


def _start(graph: Any, agent: str) -> tuple[dict[str, Any], Any]:
    config = {"configurable": {"thread_id": agent}}
    out = graph.invoke({"messages": [HumanMessage("pay alice 10")]}, config)
    [pending] = out["__interrupt__"]
    return config, pending


def _paid(effects: str) -> list[tuple[int, str]]:
    return [(e["amount"], e["to"]) for e in read_effects(effects)]


def _last_tool_message(out: dict[str, Any]) -> ToolMessage:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]


def _tamper(graph: Any, config: dict[str, Any], amount: int = 9999, to: str = "mallory") -> None:
    """Replace the saved call, keeping the message id and the tool call id."""
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    forged = dict(ai.tool_calls[0], args={"amount": amount, "to": to})
    graph.update_state(config, {"messages": [AIMessage(ai.content, id=ai.id, tool_calls=[forged])]})


def test_request_shows_the_call_and_an_approval_runs_it_once(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, pending = _start(graph, "ok")
    value = pending.value
    assert (value["type"], value["tool"], value["args"]) == (
        "approval_request",
        "pay",
        {"amount": 10, "to": "alice"},
    )
    assert [a.action_id for a in store.pending_approvals("ok")] == [value["action_id"]]
    out = graph.invoke(Command(resume={"type": "approve", "digest": value["digest"]}), config)
    assert _paid(effects) == [(10, "alice")]
    assert _last_tool_message(out).content == "paid 10 to alice"
    assert store.pending_approvals("ok") == [] and store.verify_approvals() == []


def test_edited_saved_call_is_refused_and_nothing_runs(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "tamper")
    _tamper(graph, config)
    # A bare resume: what executes pay(9999, "mallory") under HumanInTheLoopMiddleware.
    out = graph.invoke(Command(resume={"type": "approve"}), config)
    assert _paid(effects) == []
    message = _last_tool_message(out)
    assert message.status == "error" and message.artifact["recall"]["code"] == "approval_mismatch"


def test_hitl_decisions_form_is_accepted_and_bound_the_same_way(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "hitl")
    _tamper(graph, config)
    graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert _paid(effects) == []


def test_replayed_resume_does_not_run_the_call_again(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "replay")
    graph.invoke(Command(resume={"type": "approve"}), config)
    graph.invoke(Command(resume={"type": "approve"}), config)
    before_tools = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    graph.invoke(Command(resume={"type": "approve"}), before_tools.config)
    assert _paid(effects) == [(10, "alice")]


def test_reject_runs_nothing_and_tells_the_model(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "reject")
    out = graph.invoke(Command(resume={"type": "reject", "message": "wrong invoice"}), config)
    assert _paid(effects) == []
    message = _last_tool_message(out)
    assert "rejected" in str(message.content) and "wrong invoice" in str(message.content)
    assert store.latest_decision(message.artifact["recall"]["action_id"]).decision == "reject"


@pytest.mark.parametrize(
    "edit",
    [
        {"type": "edit", "args": {"amount": 5, "to": "bob"}},
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {"name": "pay", "args": {"amount": 5, "to": "bob"}},
                }
            ]
        },
    ],
)
def test_edit_runs_the_edited_arguments_and_tells_the_model(store, saver, tmp_path, edit) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "edit")
    out = graph.invoke(Command(resume=edit), config)
    assert _paid(effects) == [(5, "bob")]
    content = str(_last_tool_message(out).content)
    assert "edited" in content and "pay(amount=5, to='bob')" in content


def test_edit_cannot_switch_the_tool(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "switch")
    edit = {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {"name": "refund", "args": {"amount": 5, "to": "bob"}},
            }
        ]
    }
    out = graph.invoke(Command(resume=edit), config)
    # Asked again, saying why: refused, the call was closed while its request stayed pending
    # for good (listed as waiting for a person, with no question left to answer it).
    [again] = out["__interrupt__"]
    assert "names tool 'refund'" in again.value["problem"]
    assert _paid(effects) == [] and store.actions("switch") == []
    graph.invoke(Command(resume={"type": "approve"}), config)
    assert _paid(effects) == [(10, "alice")] and store.pending_approvals("switch") == []


def test_an_answer_for_another_action_is_asked_again(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, first = _start(graph, "elsewhere")
    out = graph.invoke(Command(resume={"type": "approve", "action_id": "a-stale-one"}), config)
    [again] = out["__interrupt__"]
    assert "given for action a-stale-one" in again.value["problem"]
    assert [a.action_id for a in store.pending_approvals("elsewhere")] == [first.value["action_id"]]
    graph.invoke(Command(resume={"type": "approve", "action_id": first.value["action_id"]}), config)
    assert _paid(effects) == [(10, "alice")] and store.pending_approvals("elsewhere") == []


def test_approval_for_another_digest_is_refused(store, saver, tmp_path) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "digest")
    out = graph.invoke(Command(resume={"type": "approve", "digest": "0" * 64}), config)
    assert (
        _paid(effects) == []
        and _last_tool_message(out).artifact["recall"]["code"] == "approval_mismatch"
    )


@pytest.mark.parametrize(
    "answer", ["yes please", True, {"type": "yes"}, {"type": "edit"}, {"type": "edit", "args": "5"}]
)
def test_invalid_answer_can_be_given_again(store, saver, tmp_path, answer) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, _ = _start(graph, "invalid")
    # Was pydantic's ValidationError, listing every accepted form that did not match.
    with pytest.raises(RecallError) as err:
        graph.invoke(Command(resume=answer), config)
    assert err.value.code == "invalid_value"
    assert "the question is still open" in str(err.value) and '{"type": "approve"}' in str(
        err.value
    )
    assert store.latest_decision(err.value.details["action_id"]).decision == "requested"
    graph.invoke(Command(resume={"type": "approve"}), config)
    assert _paid(effects) == [(10, "alice")]


def test_resume_none_fails_inside_langgraph_and_the_question_stays_open(
    store, saver, tmp_path
) -> None:
    # What the README tells users: LangGraph (1.2.24) fails on Command(resume=None) before any
    # node runs, so the node cannot answer it. If a release changes that, so must the README.
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, pending = _start(graph, "resume-none")
    with pytest.raises(UnboundLocalError):
        graph.invoke(Command(resume=None), config)
    assert _paid(effects) == []
    assert [a.action_id for a in store.pending_approvals("resume-none")] == [
        pending.value["action_id"]
    ]
    graph.invoke(Command(resume={"type": "approve"}), config)
    assert _paid(effects) == [(10, "alice")]


@pytest.mark.parametrize(
    "args, says",
    [
        ({"amount": 5, "to": "bob", "evil": 1}, "takes no 'evil'"),
        ({"amount": "lots", "to": "bob"}, "amount"),
        ({"amount": 5}, "to: Field required"),
    ],
)
def test_an_edit_the_tool_would_refuse_is_asked_again_before_anything_is_recorded(
    store, saver, tmp_path, args, says
) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, first = _start(graph, "edit-bad")
    # Before, such an edit was recorded and signed as the approval: the call then failed on
    # its arguments (or ran with a key dropped), and the person could not correct it.
    out = graph.invoke(Command(resume={"type": "edit", "args": args}), config)
    [again] = out["__interrupt__"]
    assert again.value["action_id"] == first.value["action_id"]
    assert says in again.value["problem"]
    assert store.latest_decision(first.value["action_id"]).decision == "requested"
    assert _paid(effects) == [] and store.actions("edit-bad") == []
    out = graph.invoke(Command(resume={"type": "edit", "args": {"amount": 5, "to": "bob"}}), config)
    assert _paid(effects) == [(5, "bob")]
    assert "__interrupt__" not in out


@pytest.mark.parametrize("decisions", [[], [{"type": "approve"}, {"type": "approve"}]])
def test_a_decisions_list_that_is_not_one_decision_is_asked_again(
    store, saver, tmp_path, decisions
) -> None:
    effects = str(tmp_path / "e.log")
    graph = pay_graph(store, saver, effects)
    config, first = _start(graph, "count")
    # It was recorded as the person's rejection ("expected one decision, got 2").
    out = graph.invoke(Command(resume={"decisions": decisions}), config)
    [again] = out["__interrupt__"]
    assert f"expected one decision, got {len(decisions)}" in again.value["problem"]
    assert store.latest_decision(first.value["action_id"]).decision == "requested"
    graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert _paid(effects) == [(10, "alice")]


# --- across processes -------------------------------------------------------------------------


def _worker(
    z: Zygote,
    target: str,
    agent: str,
    effects: str,
    step: str,
    resume: Any = None,
    faults: str | None = None,
) -> int:
    kwargs: dict[str, Any] = {"target": target, "agent_id": agent, "effects": effects, "step": step}
    if resume is not None:
        kwargs["resume"] = resume
    if faults:
        kwargs["faults"] = faults
    z.start("fix_tools:pay_worker", **kwargs)
    code = z.wait(120)
    assert code is not None
    return code


@pytest.mark.slow
def test_approved_on_one_worker_executed_once_by_another(
    zygotes,  # noqa: F811 (the fixture)
    store_target,
    store,
    tmp_path,
) -> None:
    effects = str(tmp_path / "e.log")
    z = zygotes[0]
    assert _worker(z, store_target, "two", effects, "start") == 0
    # Worker 2 records the person's "yes" and dies before spending it or running anything.
    assert (
        _worker(
            z,
            store_target,
            "two",
            effects,
            "resume",
            {"type": "approve"},
            "approval_recorded=1:exit",
        )
        == 99
    )
    assert _paid(effects) == []
    # Worker 3 picks the run up: it runs exactly the approved call, once.
    assert _worker(z, store_target, "two", effects, "continue") == 0
    assert _worker(z, store_target, "two", effects, "continue") == 0
    assert _paid(effects) == [(10, "alice")]


@pytest.mark.slow
def test_a_later_no_is_enforced(zygotes, store_target, store, tmp_path) -> None:  # noqa: F811
    effects = str(tmp_path / "e.log")
    z = zygotes[0]
    assert _worker(z, store_target, "later-no", effects, "start") == 0
    [request] = store.pending_approvals("later-no")
    assert (
        _worker(
            z,
            store_target,
            "later-no",
            effects,
            "resume",
            {"type": "approve"},
            "approval_recorded=1:exit",
        )
        == 99
    )
    assert store.latest_decision(request.action_id).decision == "approve"
    store.record_decision("later-no", request.action_id, "reject", message="changed my mind")
    assert _worker(z, store_target, "later-no", effects, "continue") == 0
    assert _paid(effects) == [] and store.actions("later-no") == []


@pytest.mark.slow
def test_approval_is_spent_by_one_attempt(zygotes, store_target, store, tmp_path) -> None:  # noqa: F811
    """A crash after the approved call started leaves it in doubt; a person says it did not
    happen. The old "yes" was used by that attempt: the call does not run again on it."""
    effects = str(tmp_path / "e.log")
    z = zygotes[0]
    assert _worker(z, store_target, "spent", effects, "start") == 0
    assert (
        _worker(
            z, store_target, "spent", effects, "resume", {"type": "approve"}, "tool_claimed=1:exit"
        )
        == 99
    )
    [action] = store.actions("spent", open_only=True)
    # The worker died holding the agent's lease: resolve refuses while it is live (the call
    # might still be running). The person waits it out; here its holder's release stands in.
    dead = store.lease("spent")
    assert dead is not None and store.release_lease("spent", dead.holder, dead.epoch)
    store.resolve(action.action_id, "not_done", note="the bank has no such payment")
    assert _worker(z, store_target, "spent", effects, "continue") == 0
    assert _paid(effects) == []
    assert store.action(action.action_id).status == "not_done"
    # The model is told why, and what to do: call again, to be put to a person again.
    told = [t.message.content for t in store.turns("spent") if t.message.type == "tool"]
    assert any(
        "settled as not done (the bank has no such payment)" in str(c)
        and "call the tool again" in str(c)
        for c in told
    ), told


def test_an_unusable_answer_raises_even_when_tool_errors_are_handled(
    store, saver, tmp_path
) -> None:
    from fix_tools import build_graph, call, pay_tool, reply

    from langgraph_recall.tools import DurableToolNode

    effects = str(tmp_path / "e.log")
    node = DurableToolNode(
        [pay_tool(effects)], classes={"pay": "external"}, approve=("pay",), handle_tool_errors=True
    )
    script = [reply("", call("pay", amount=10, to="alice")), reply("done")]
    graph = build_graph(node, script, store=store, checkpointer=saver)
    config, _ = _start(graph, "typo")
    # With handle_tool_errors=True the refusal became the tool's answer: the question closed
    # and the run went on to the model.
    with pytest.raises(RecallError) as err:
        graph.invoke(Command(resume={"type": "aprove"}), config)
    assert err.value.code == "invalid_value" and "still open" in str(err.value)
    [pending] = graph.get_state(config).interrupts
    assert pending.value["type"] == "approval_request"
    assert _paid(effects) == []


# --- a gated tool that asks a question of its own -----------------------------------------------

MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


def _asking_pay_graph(store: Any, effects: str, layout: str = "node") -> Any:
    """pay(amount, to), gated, asks "which account?" with interrupt() once approved."""
    from fix_tools import build_graph, record_effect
    from langchain_core.tools import tool
    from langgraph.types import interrupt

    from langgraph_recall.testing import call, reply
    from langgraph_recall.tools import DurableToolNode

    @tool
    def pay(amount: int, to: str) -> str:
        """Pay someone."""
        account = interrupt({"question": "which account?"})
        record_effect(effects, what="pay", amount=amount, to=to, account=account)
        return f"paid {amount} to {to} from {account}"

    node = DurableToolNode([pay], classes={"pay": "external"}, approve=("pay",))
    script = [reply("", call("pay", amount=10, to="alice")), reply("done")]
    return build_graph(node, script, store=store, checkpointer=store.checkpointer(), layout=layout)


def _go(graph: Any, value: Any, config: dict[str, Any], use_async: bool) -> dict[str, Any]:
    import asyncio

    if use_async:
        return asyncio.run(graph.ainvoke(value, config))
    return graph.invoke(value, config)  # type: ignore[no-any-return]


def _accounts(effects: str) -> list[Any]:
    return [e["account"] for e in read_effects(effects)]


@pytest.mark.parametrize("use_async", MODES)
@pytest.mark.parametrize("layout", ["node", "send"])
def test_the_tools_own_question_gets_its_answer_after_the_approval_was_asked_again(
    store, tmp_path, use_async, layout
) -> None:
    effects = str(tmp_path / "e.log")
    graph = _asking_pay_graph(store, effects, layout)
    config = {"configurable": {"thread_id": f"again-{layout}"}}
    _go(graph, {"messages": [HumanMessage("pay")]}, config, use_async)
    out = _go(graph, Command(resume={"decisions": []}), config, use_async)  # asked again
    assert "expected one decision" in out["__interrupt__"][0].value["problem"]
    out = _go(graph, Command(resume={"type": "approve"}), config, use_async)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    _go(graph, Command(resume="savings"), config, use_async)
    # The decided approval took back only the first of its two answers: the tool's question
    # got {"type": "approve"} and the payment was made with it.
    assert _accounts(effects) == ["savings"]


@pytest.mark.parametrize("use_async", MODES)
def test_the_tools_own_question_gets_its_answer_after_update_state(
    store, tmp_path, use_async
) -> None:
    effects = str(tmp_path / "e.log")
    graph = _asking_pay_graph(store, effects, "send")
    config = {"configurable": {"thread_id": "updated"}}
    _go(graph, {"messages": [HumanMessage("pay")]}, config, use_async)
    out = _go(graph, Command(resume={"type": "approve"}), config, use_async)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    graph.update_state(config, {"messages": [ai]}, as_node="agent")  # starts the task afresh
    out = _go(graph, None, config, use_async)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    # The decided approval took "savings" as an answer to itself and failed the run, every time.
    _go(graph, Command(resume="savings"), config, use_async)
    assert _accounts(effects) == ["savings"]


def _two_question_graph(store: Any, effects: str, layout: str) -> Any:
    """pay, gated, asks "which account?" then "memo?"; "ordered": beside a sibling call in one
    task (the ordered questions), else alone in its task."""
    from fix_tools import build_graph, record_effect
    from langchain_core.tools import tool
    from langgraph.types import interrupt

    from langgraph_recall.testing import call, reply
    from langgraph_recall.tools import DurableToolNode

    @tool
    def pay(amount: int, to: str) -> str:
        """Pay someone."""
        account = interrupt({"question": "which account?"})
        memo = interrupt({"question": "memo?"})
        record_effect(effects, what="pay", amount=amount, to=to, account=account, memo=memo)
        return "paid"

    @tool
    def note(text: str) -> str:
        """Take a note."""
        return "noted"

    calls = [call("pay", amount=10, to="alice")]
    if layout == "ordered":
        calls.append(call("note", text="x"))
    node = DurableToolNode([pay, note], classes={"pay": "external", "note": "pure"}, approve="pay")
    return build_graph(
        node,
        [reply("", *calls), reply("done")],
        store=store,
        checkpointer=store.checkpointer(),
        layout="node" if layout == "ordered" else layout,
    )


@pytest.mark.parametrize("decided", ["then update_state", "through the store"])
@pytest.mark.parametrize("layout", ["send", "node", "ordered"])
def test_a_decided_approval_takes_none_of_the_tools_answers(
    store, tmp_path, layout, decided
) -> None:
    effects = str(tmp_path / "e.log")
    graph = _two_question_graph(store, effects, layout)
    config = {"configurable": {"thread_id": "two"}}
    out = graph.invoke({"messages": [HumanMessage("pay")]}, config)
    if decided == "through the store":  # an operator's UI records it; the run goes on
        request = out["__interrupt__"][0].value
        store.record_decision("two", request["action_id"], "approve", args_digest=request["digest"])
    else:
        graph.invoke(Command(resume={"type": "approve"}), config)
        ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)]
        graph.update_state(config, {"messages": [ai[-1]]}, as_node="agent")  # a new task
    out = graph.invoke(None, config)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    out = graph.invoke(Command(resume="savings"), config)
    assert out["__interrupt__"][0].value == {"question": "memo?"}
    graph.invoke(Command(resume="rent"), config)
    # The approval, which asked nothing in this task, took "savings" as its own answer: the
    # payment went out with account "rent", and "memo?" was asked twice.
    assert [(e["account"], e["memo"]) for e in read_effects(effects)] == [("savings", "rent")]


def test_an_answer_sent_back_for_naming_a_sibling_stays_with_the_call_it_was_given_to(
    store, tmp_path
) -> None:
    """Two gated calls in one task: an answer to A naming B's action is sent back; on later
    runs A must still take it back as its own, or every answer after it shifts by one (B's
    "no" was answered with that old "yes", and bob was paid)."""
    from fix_tools import build_graph, pay_tool

    from langgraph_recall.testing import call, reply
    from langgraph_recall.tools import DurableToolNode
    from langgraph_recall.tools._canonical import action_key

    effects = str(tmp_path / "e.log")
    node = DurableToolNode([pay_tool(effects)], classes={"pay": "external"}, approve=("pay",))
    script = [reply("", call("pay", amount=10, to="alice"), call("pay", amount=20, to="bob"))]
    graph = build_graph(
        node, [*script, reply("done")], store=store, checkpointer=store.checkpointer()
    )
    config = {"configurable": {"thread_id": "ab"}}
    graph.invoke({"messages": [HumanMessage("pay")]}, config)
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    b_id = action_key("ab", str(ai.id), str(ai.tool_calls[1]["id"]), "pay")
    out = graph.invoke(Command(resume={"type": "approve", "action_id": b_id}), config)
    assert "given for action" in out["__interrupt__"][0].value["problem"]
    out = graph.invoke(Command(resume={"type": "approve"}), config)
    assert out["__interrupt__"][0].value["action_id"] == b_id
    graph.invoke(Command(resume={"type": "reject", "message": "not bob"}), config)
    assert _paid(effects) == [(10, "alice")]
    assert store.latest_decision(b_id).decision == "reject"


@pytest.mark.parametrize("layout", ["send", "node"])
def test_after_update_state_the_tools_question_gets_even_an_answer_shaped_like_an_approval(
    store, tmp_path, layout
) -> None:
    # The decision keeps the task it was asked in and how many answers it took: in the new
    # task update_state starts, it takes none, whatever the answers look like.
    effects = str(tmp_path / "e.log")
    graph = _asking_pay_graph(store, effects, layout)
    config = {"configurable": {"thread_id": f"shaped-{layout}"}}
    graph.invoke({"messages": [HumanMessage("pay")]}, config)
    graph.invoke(Command(resume={"type": "approve"}), config)
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    graph.update_state(config, {"messages": [ai]}, as_node="agent")
    out = graph.invoke(None, config)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    graph.invoke(Command(resume={"type": "approve"}), config)
    assert _accounts(effects) == [{"type": "approve"}]


def test_an_approval_decided_through_the_store_takes_back_the_answers_it_sent_back(
    store, tmp_path
) -> None:
    # Nothing on record says how many answers it took; the ones sent back with a problem are
    # the only ones it can have taken, and the tool's question must not get them.
    effects = str(tmp_path / "e.log")
    graph = _asking_pay_graph(store, effects, "send")
    config = {"configurable": {"thread_id": "operator"}}
    out = graph.invoke({"messages": [HumanMessage("pay")]}, config)
    out = graph.invoke(Command(resume={"type": "edit", "args": {"amount": "ten"}}), config)
    request = out["__interrupt__"][0].value
    assert request.get("problem")
    store.record_decision(
        "operator", request["action_id"], "approve", args_digest=request["digest"]
    )
    out = graph.invoke(None, config)
    assert out["__interrupt__"][0].value == {"question": "which account?"}
    graph.invoke(Command(resume="savings"), config)
    assert _accounts(effects) == ["savings"]
