"""The recall tools: small schemas, the store and agent found from the running graph, errors the
model can act on, pure for the durable tool node."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_recall._briefing import RECALL_TOOL_NAMES
from langgraph_recall._errors import RecallError
from langgraph_recall._recall_tools import recall_tools
from langgraph_recall.store import RecallStore
from langgraph_recall.store._actions import action_key
from langgraph_recall.tools import DurableToolNode

MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


def _run_calls(
    store: RecallStore,
    calls: list[dict[str, Any]],
    *,
    agent: str = "a",
    use_async: bool = False,
    node: Any = None,
) -> list[Any]:
    """Run tool calls through a tool node in a graph compiled with the store; the results."""
    g = StateGraph(MessagesState)
    g.add_node("tools", node or ToolNode(recall_tools()))
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    app = g.compile(store=store, checkpointer=InMemorySaver())
    ai = AIMessage(
        "", tool_calls=[{**c, "id": f"c{i}", "type": "tool_call"} for i, c in enumerate(calls)]
    )
    cfg = {"configurable": {"thread_id": "t", "agent_id": agent}}
    inputs = {"messages": [ai]}
    out = asyncio.run(app.ainvoke(inputs, cfg)) if use_async else app.invoke(inputs, cfg)
    return out["messages"][1:]


def test_schemas_sent_with_every_call_stay_small() -> None:
    tools = recall_tools()
    assert [t.name for t in tools] == [
        "update_working_state",
        "milestone",
        "set_pointer",
        "fetch_output",
    ]
    assert set(RECALL_TOOL_NAMES) == {t.name for t in tools}
    total = count_tokens_approximately([], tools=tools)
    assert total <= 350  # measured: 337 with count_tokens_approximately (schemas with titles)
    for t in tools:
        schema = t.tool_call_schema.model_json_schema()
        assert "runtime" not in schema["properties"]  # injected, never seen by the model
        assert len(t.description) <= 90
        assert t.metadata == {"recall_class": "pure"}


@pytest.mark.parametrize("use_async", MODES)
def test_they_write_to_the_running_graphs_store_and_agent(
    store: RecallStore, use_async: bool
) -> None:
    ref = store.put_output("billing", "0123456789" * 1000)
    results = _run_calls(
        store,
        [
            {"name": "update_working_state", "args": {"goal": "balance", "progress": "half"}},
            {"name": "milestone", "args": {"text": "ledger loaded"}},
            {
                "name": "set_pointer",
                "args": {"name": "ledger", "target": "s3://b/l.csv", "note": "v2"},
            },
            {"name": "fetch_output", "args": {"ref": ref, "offset": 9990}},
        ],
        agent="billing",
        use_async=use_async,
    )
    assert [r.status for r in results] == ["success"] * 4
    assert store.working_state("billing") == {
        "goal": "balance",
        "progress": "half",
        "last_milestone": "ledger loaded",
    }
    pointer = store.pointers("billing")["ledger"]
    assert (pointer.target, pointer.note) == ("s3://b/l.csv", "v2")
    assert results[3].content == f"[{ref} chars 9990-10000 of 10000]\n0123456789"
    assert store.working_state("a") == {}  # nothing leaked to another agent


@pytest.mark.parametrize("use_async", MODES)
def test_a_new_goal_from_the_model_clears_the_last_tasks_fields_and_says_so(
    store: RecallStore, use_async: bool
) -> None:
    store.update_working_state("a", goal="refund R-16", progress="R-16 done")
    # One call per run: the calls of one AI message may run in parallel.
    results = [
        *_run_calls(
            store,
            [{"name": "update_working_state", "args": {"progress": "R-16 emailed"}}],
            use_async=use_async,
        ),
        *_run_calls(
            store,
            [{"name": "update_working_state", "args": {"goal": "refund R-17", "plan": "look up"}}],
            use_async=use_async,
        ),
    ]
    assert results[0].content == "saved: progress"
    assert results[1].content == (
        "saved: goal, plan (a new goal: the previous task's fields were cleared)"
    )
    assert store.working_state("a") == {"goal": "refund R-17", "plan": "look up"}


def test_fetch_output_reads_in_chunks_and_says_where_the_next_one_starts(
    store: RecallStore,
) -> None:
    text = "".join(f"{i:05d}" for i in range(2000))  # 10,000 characters
    ref = store.put_output("a", text)
    first, second = _run_calls(
        store,
        [
            {"name": "fetch_output", "args": {"ref": f'"{ref}"'}},
            {"name": "fetch_output", "args": {"ref": ref, "offset": 4000}},
        ],
    )
    assert first.content.startswith(
        f'[{ref} chars 0-4000 of 10000; more: fetch_output(ref="{ref}", offset=4000)]\n'
    )
    assert first.content.endswith(text[:4000])
    assert second.content.endswith(text[4000:8000])


def test_a_turn_the_briefing_cuts_can_be_read_whole(store: RecallStore) -> None:
    # Over 600 characters the briefing cuts a turn; under the output threshold the turn has
    # no output of its own, so the briefing names the turn itself.
    text = "".join(f"{i:05d}" for i in range(400))  # 2,000 characters
    store.record("a", [HumanMessage(text, id="h1")])
    assert 'fetch_output(ref="turn-1")' in store.briefing("a").text
    whole, missing = _run_calls(
        store,
        [
            {"name": "fetch_output", "args": {"ref": "turn-1"}},
            {"name": "fetch_output", "args": {"ref": "turn-2"}},
        ],
    )
    assert whole.content == f"[turn-1 chars 0-2000 of 2000]\n{text}"
    assert missing.status == "error" and "no turn 'turn-2'" in str(missing.content)
    # The store's own fetch_output reads outputs; it says where such a ref is read instead of
    # asking for the ref "exactly as the briefing shows it", which it is.
    with pytest.raises(RecallError) as err:
        store.fetch_output("turn-1")
    assert err.value.code == "unknown_output" and "store.turns(agent_id)" in str(err.value)


def test_a_turn_shortened_to_fit_the_budget_names_itself_and_reads_with_its_calls(
    store: RecallStore,
) -> None:
    # A turn of many tool calls is cut to what is left of the budget: its line still ends with
    # the ref, and the ref reads the whole turn, its calls included (they are what was cut).
    calls = [
        {"name": "lookup", "args": {"q": f"query number {i} " + "q" * 30}, "id": f"c{i}"}
        for i in range(30)
    ]
    store.record("a", [HumanMessage("start", id="h0"), AIMessage("", tool_calls=calls, id="a1")])
    text = store.briefing("a", token_budget=500).text
    assert "assistant: called lookup(q='query number 0 " in text
    assert text.rstrip().endswith('[whole turn: fetch_output(ref="turn-2")]')
    (whole,) = _run_calls(store, [{"name": "fetch_output", "args": {"ref": "turn-2"}}])
    assert "query number 29 " + "q" * 30 in str(whole.content)


def test_a_shortened_turn_read_whole_shows_each_calls_outcome(store: RecallStore) -> None:
    # The calls the briefing left out of a turn too long for it, read whole, carry their
    # outcomes as the briefing's line would: none shows up as unanswered.
    calls = [
        {"name": "refund", "args": {"order": f"O-{i} " + "q" * 40}, "id": f"c{i}"}
        for i in range(30)
    ]
    store.record("a", [HumanMessage("start", id="h0"), AIMessage("", tool_calls=calls, id="a1")])
    for i in range(30):
        action_id = action_key("a", "a1", f"c{i}", "refund")
        store.claim("a", action_id, tool="refund", args=calls[i]["args"], args_digest="d")
        if i < 29:
            store.end(action_id, 1, "done", result=f"refund r-{i} issued")
    text = store.briefing("a", token_budget=600).text
    assert "more call(s)" in text and "refund r-0 issued" in text
    (whole,) = _run_calls(store, [{"name": "fetch_output", "args": {"ref": "turn-2"}}])
    lines = str(whole.content).splitlines()[1:]
    assert len(lines) == 30 and all(" -> " in ln for ln in lines)
    assert lines[28].endswith(" -> done: refund r-28 issued")
    assert lines[29].endswith(
        " -> in doubt: do not call it again; it is settled by a resolver or a person"
    )


def test_a_malformed_turn_ref_is_a_tool_error_not_a_failed_run(store: RecallStore) -> None:
    # int() refuses some digits str.isdigit() takes, and SQLite an int past 64 bits: either
    # raised out of the tool node and failed the agent's run.
    store.record("a", [HumanMessage("x" * 2000, id="h1")])
    refs = ["turn-\u00b2", "turn-" + "9" * 30, "turn--1", "turn-0"]
    results = _run_calls(store, [{"name": "fetch_output", "args": {"ref": r}} for r in refs])
    assert [r.status for r in results] == ["error"] * 4
    assert all("no turn" in str(r.content) for r in results)


def test_bad_arguments_get_a_message_the_model_can_act_on(store: RecallStore) -> None:
    mine = store.put_output("a", "x" * 100)
    theirs = store.put_output("other-agent", "secret " * 100)
    results = _run_calls(
        store,
        [
            {"name": "update_working_state", "args": {}},
            {"name": "milestone", "args": {"text": "  "}},
            {"name": "set_pointer", "args": {"name": "doc", "target": ""}},
            {"name": "fetch_output", "args": {"ref": "out-nope"}},
            {"name": "fetch_output", "args": {"ref": theirs}},
            {"name": "fetch_output", "args": {"ref": mine, "offset": 500}},
            {"name": "fetch_output", "args": {"ref": mine, "offset": "start"}},
        ],
    )
    assert [r.status for r in results] == ["error"] * 7
    texts = [str(r.content) for r in results]
    assert "Pass at least one of goal, plan, progress, decisions, notes" in texts[0]
    assert "Say in one line what was finished" in texts[1]
    assert "give a short name and a target" in texts[2]
    assert "Use a ref exactly as the briefing shows it" in texts[3]
    assert "no stored output" in texts[4] and "secret" not in texts[4]
    assert "past the end; the output has 100 chars" in texts[5]
    assert "offset" in texts[6] and "valid integer" in texts[6]
    assert store.working_state("a") == {} and store.pointers("a") == {}


def test_the_durable_tool_node_runs_them_as_pure_tools(store: RecallStore) -> None:
    node = DurableToolNode(recall_tools())  # no classes given: they carry their own
    (result,) = _run_calls(store, [{"name": "milestone", "args": {"text": "done"}}], node=node)
    assert result.status == "success"
    assert store.actions("a") == []  # pure: no action record
    assert json.dumps(store.working_state("a")) == '{"last_milestone": "done"}'
