"""The briefing as a specification: content and priority, the budget, determinism, cost."""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
from fix_store import write_planned
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from langgraph_recall import _briefing_turns
from langgraph_recall._briefing import BRIEFING_ID, Briefing, build_briefing
from langgraph_recall._briefing_lines import APPROVAL_TITLE, DOUBT_TITLE, ITEM_CHARS
from langgraph_recall._errors import RecallError
from langgraph_recall._hooks import with_briefing
from langgraph_recall._render import call_text
from langgraph_recall.store import RecallStore, _transcript


def _call(name: str, cid: str, **args: object) -> dict[str, object]:
    return {"name": name, "args": args, "id": cid, "type": "tool_call"}


def _exchange(i: int, text: str = "") -> list:
    """One human turn, a tool call, its result and a reply; ids unique per ``i``."""
    return [
        HumanMessage(f"ask {i} {text}", id=f"h{i}"),
        AIMessage("", tool_calls=[_call("lookup", f"c{i}", q=f"q{i}")], id=f"a{i}"),
        ToolMessage(f"found {i}", tool_call_id=f"c{i}", name="lookup", id=f"t{i}"),
        AIMessage(f"answer {i}", id=f"r{i}"),
    ]


def _section_order(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def _tokens(text: str) -> int:
    return count_tokens_approximately([SystemMessage(text)])


# --- content and priority --------------------------------------------------------------------


def test_sections_come_in_priority_order_with_in_doubt_external_calls_first(
    store: RecallStore,
) -> None:
    agent = "billing"
    store.record(agent, _exchange(1, "about billing"))
    store.update_working_state(agent, goal="migrate billing", plan="dump, load", progress="dumped")
    store.milestone(agent, "dump finished")
    store.set_pointer(agent, "dump", "/data/dump.sql", note="raw")
    store.claim(
        agent, "act-idem", tool="charge", args={"n": 1}, args_digest="d1", klass="idempotent"
    )
    store.claim(agent, "act-ext", tool="send_email", args={"to": "ops"}, args_digest="d2")
    store.record_decision(agent, "act-pay", "requested", args={"amount": 10}, args_digest="d3")
    store.put(("recall", agent, "memories"), "m1", {"text": "billing amounts are in cents"})

    b = store.briefing(agent, token_budget=2000)

    assert _section_order(b.text) == [
        DOUBT_TITLE,
        APPROVAL_TITLE,
        "## Working state",
        "## Pointers",
        "## Relevant memories",
        "## Recent turns, oldest first",
    ]
    assert "NOT finished while 2 call(s) are in doubt: do not repeat them" in b.text
    assert b.text.index("- send_email(to='ops') [action act-ext]") < b.text.index("charge(n=1)")
    assert '- a call with {"amount":10} [action act-pay]' in b.text
    assert "goal: migrate billing" in b.text and "last milestone: dump finished" in b.text
    assert "- dump: /data/dump.sql (raw)" in b.text
    assert "- billing amounts are in cents" in b.text
    assert b.sections == (
        "header",
        "open_actions",
        "approvals",
        "working_state",
        "pointers",
        "memories",
        "turns",
    )


def test_a_planned_call_that_never_started_is_not_counted_in_doubt(store: RecallStore) -> None:
    # Written ahead with its AI message, its tool never began: listed as not started yet,
    # neither in the calls in doubt nor in the header's count of them.
    write_planned(store, "ag", "p-1", "issue_refund", {"order": "O-1"})
    text = build_briefing(store, "ag").text
    assert "in doubt" not in text.split("\n")[1]
    assert DOUBT_TITLE not in text
    assert "issue_refund(order='O-1') -> not started yet [action p-1]" in text
    store.claim("ag", "c-1", tool="send_email", args={"to": "x"}, args_digest="e")
    text = build_briefing(store, "ag").text
    assert "while 1 call(s) are in doubt" in text
    doubts = text.split(DOUBT_TITLE)[1].split("\n## ")[0]
    assert "send_email" in doubts and "issue_refund" not in doubts


@pytest.mark.parametrize("budget", [80, 100, 110])
def test_a_budget_too_small_for_any_doubt_line_still_says_not_to_repeat_them(
    store: RecallStore, budget: int
) -> None:
    # The section of calls in doubt does not fit at all here; the header claimed "the 200
    # call(s) below" over nothing, and said nothing against calling them again.
    for i in range(200):
        store.claim("ag", f"act-{i}", tool="charge", args={"n": i}, args_digest="d")
    b = build_briefing(store, "ag", token_budget=budget, doubts_over_budget="count")
    assert b.tokens <= budget
    assert "NOT finished while 200 call(s) are in doubt: do not repeat them" in b.text


def test_a_budget_too_small_for_the_header_names_the_budget_it_needs(store: RecallStore) -> None:
    agent = "agent-" + "x" * 200  # the header names the agent: its length is not fixed
    store.record(agent, [HumanMessage("hello", id="h1")])
    with pytest.raises(RecallError) as err:
        build_briefing(store, agent, token_budget=60)
    assert err.value.code == "invalid_value"
    need = err.value.details["token_budget"]
    assert f"give at least {need} tokens" in str(err.value)
    assert build_briefing(store, agent, token_budget=need).tokens <= need
    with pytest.raises(RecallError):
        build_briefing(store, agent, token_budget=need - 1)


def test_a_long_approval_line_is_cut_before_its_action_id(store: RecallStore) -> None:
    args = {f"field_{k}": f"value {k} " + "v" * 20 for k in range(30)}
    store.record_decision("a", "act-pay", "requested", args=args, args_digest="d")
    (line,) = [ln for ln in store.briefing("a").text.splitlines() if "a call with" in ln]
    assert re.search(r"… \(\+\d+ chars\) \[action act-pay\]$", line)
    assert len(line) <= ITEM_CHARS


def test_tool_calls_read_as_calls_and_long_arguments_as_their_length(store: RecallStore) -> None:
    store.record(
        "a",
        [AIMessage("", tool_calls=[_call("write", "c1", path="x.txt", body="z" * 500)], id="a1")],
    )
    text = store.briefing("a").text
    assert "assistant: called write(path='x.txt', body=<502 chars>)" in text
    assert "z" * 201 not in text


def test_arguments_of_any_recorded_type_render(store: RecallStore) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    store.record(
        "a",
        [AIMessage("", tool_calls=[_call("pay", "c1", amount=Decimal("10.50"), at=when)], id="a1")],
    )
    expected = call_text("pay", {"amount": Decimal("10.50"), "at": when})  # as recorded
    assert f"assistant: called {expected}" in store.briefing("a").text


def test_large_results_are_references_the_model_can_open(store: RecallStore) -> None:
    big = "RESULT " + "x" * (store.output_threshold + 100)
    store.record(
        "a",
        [
            AIMessage("", tool_calls=[_call("fetch", "c1", url="u")], id="a1"),
            ToolMessage(big, tool_call_id="c1", name="fetch", id="t1"),
        ],
    )
    text = store.briefing("a").text
    ref = text.split('fetch_output(ref="')[1].split('"')[0]
    assert f"tool fetch: [stored output, {len(big)} chars" in text
    assert "x" * 500 not in text
    assert store.fetch_output(ref) == big


def test_large_content_block_results_are_references_like_string_ones(store: RecallStore) -> None:
    big = "RESULT " + "x" * (store.output_threshold + 100)
    blocks = [{"type": "text", "text": big}]
    store.record("a", [ToolMessage(blocks, tool_call_id="c1", name="fetch", id="t1")])
    (turn,) = store.turns("a")
    assert turn.output_ref is not None and store.fetch_output(turn.output_ref) == big
    text = store.briefing("a").text
    assert f"tool fetch: [stored output, {len(big)} chars" in text
    assert f'fetch_output(ref="{turn.output_ref}")' in text


def test_a_long_block_result_holding_more_than_text_is_kept_whole(store: RecallStore) -> None:
    # Stored as an output, a result keeps only the text of its blocks: an image (a browser
    # tool's screenshot) beside a long text was lost from the records, which are append-only.
    big = "RESULT " + "x" * (store.output_threshold + 100)
    image = {"type": "image", "source_type": "base64", "data": "iVBORw0K", "mime_type": "image/png"}
    blocks = [{"type": "text", "text": big}, image]
    store.record("a", [ToolMessage(blocks, tool_call_id="c1", name="shot", id="t1")])
    (turn,) = store.turns("a")
    assert turn.output_ref is None and turn.message.content == blocks


def test_a_long_tool_call_turn_over_budget_is_shortened_not_dropped(store: RecallStore) -> None:
    calls = [_call("lookup", f"c{i}", q=f"query number {i} " + "q" * 30) for i in range(30)]
    store.record("a", [HumanMessage("start", id="h0"), AIMessage("", tool_calls=calls, id="a1")])
    b = store.briefing("a", token_budget=500)
    assert b.tokens <= 500 and b.turns_shown == 1
    assert "assistant: called lookup(q='query number 0 " in b.text
    # Whole calls only (a call cut in the middle shows no outcome), the rest counted.
    assert re.search(r"qqq'\) … and \d+ more call\(s\) \[whole turn: fetch_output", b.text)
    assert "(1 earlier turns not shown)" in b.text


def test_agent_ids_with_dots_keep_their_outputs_and_memories_apart(store: RecallStore) -> None:
    big = "RESULT " + "x" * (store.output_threshold + 100)
    for agent in ("team", "team.billing"):
        store.record(agent, [ToolMessage(big + agent, tool_call_id="c", name="f", id="t1")])
    text = store.briefing("team.billing").text
    ref = text.split('fetch_output(ref="')[1].split('"')[0]
    assert "starts: 'RESULT xxx" in text  # the preview was found under the escaped namespace
    assert store.fetch_output(ref).endswith("team.billing")


def test_recall_tool_chatter_does_not_crowd_out_work(store: RecallStore) -> None:
    store.record(
        "a",
        [
            AIMessage(
                "",
                tool_calls=[
                    _call("update_working_state", "c1", progress="half"),
                    _call("deploy", "c2", env="prod"),
                ],
                id="a1",
            ),
            ToolMessage("saved: progress", tool_call_id="c1", name="update_working_state", id="t1"),
            ToolMessage("deployed", tool_call_id="c2", name="deploy", id="t2"),
            AIMessage("", tool_calls=[_call("milestone", "c3", text="deployed")], id="a2"),
            ToolMessage("milestone saved", tool_call_id="c3", name="milestone", id="t3"),
        ],
    )
    text = store.briefing("a").text
    assert "assistant: called deploy(env='prod')" in text
    assert "tool deploy: deployed" in text
    assert "update_working_state" not in text.split("## Recent turns")[1]
    assert "saved" not in text and "milestone(" not in text


def test_turns_already_in_the_model_input_are_left_out(store: RecallStore) -> None:
    store.record("a", _exchange(1) + _exchange(2))
    text = store.briefing("a", exclude_msg_ids=["h2", "a2", "t2", "r2"]).text
    assert "## Earlier turns not in this conversation, oldest first" in text
    assert "ask 1" in text and "answer 1" in text
    assert "ask 2" not in text and "answer 2" not in text and "found 2" not in text


def test_recent_turns_are_the_newest_that_fit_printed_oldest_first(store: RecallStore) -> None:
    store.record("a", [m for i in range(1, 201) for m in _exchange(i)])
    b = store.briefing("a", token_budget=400)
    lines = b.text.split("## Recent turns, oldest first\n")[1].splitlines()
    shown = [int(line.split()[-1]) for line in lines if line.startswith("assistant: answer")]
    assert shown and shown == sorted(shown) and shown[-1] == 200
    assert shown == list(range(shown[0], 201))  # contiguous up to the newest
    assert lines[-1] == "assistant: answer 200"
    first_seq = (shown[0] - 1) * 4 + 4  # the reply of the oldest exchange shown, or later
    note = lines[0]
    assert note.startswith("(") and note.endswith(" earlier turns not shown)")
    assert int(note[1:].split()[0]) <= first_seq
    assert b.turns_shown == len(lines) - 1


def test_the_same_records_give_the_same_text(store: RecallStore) -> None:
    store.record("a", _exchange(1))
    store.update_working_state("a", goal="g")
    store.claim("a", "act-1", tool="send", args={"x": 1}, args_digest="d")
    first = store.briefing("a")
    assert store.briefing("a") == first
    store.record("a", _exchange(2))
    assert store.briefing("a") != first  # and it follows the records


def test_a_fresh_agent_is_told_it_starts_fresh(store: RecallStore) -> None:
    text = store.briefing("nobody").text
    assert "fresh start" in text and "Resuming" not in text


def test_memories_are_searched_with_the_latest_human_message(store: RecallStore) -> None:
    ns = ("recall", "a", "memories")
    store.put(ns, "m1", {"text": "invoices are sent on fridays"})
    store.put(ns, "m2", {"text": "refunds need a manager"})
    store.record("a", [HumanMessage("how do refunds work?", id="h1")])
    b = store.briefing("a", memory_limit=1)
    assert "- refunds need a manager" in b.text and "fridays" not in b.text
    asked = store.briefing("a", memory_limit=1, query="when are invoices sent")
    assert "- invoices are sent on fridays" in asked.text
    assert "Relevant memories" not in store.briefing("a", memory_namespace=None).text


def test_message_and_notebook_views(store: RecallStore) -> None:
    store.record("a", [HumanMessage("use <b>tags</b>", id="h1")])
    b = store.briefing("a")
    assert isinstance(b.message, SystemMessage)
    assert b.message.content == b.text and b.message.id == BRIEFING_ID
    assert "&lt;b&gt;tags&lt;/b&gt;" in b._repr_html_() and "<b>tags" not in b._repr_html_()
    assert b._repr_markdown_().startswith(b.text)
    assert str(b) == b.text


async def test_async_briefing_is_the_same(store: RecallStore) -> None:
    store.record("a", _exchange(1))
    assert await store.abriefing("a", token_budget=500) == store.briefing("a", token_budget=500)


# --- the budget ------------------------------------------------------------------------------


def _fill(
    store: RecallStore,
    agent: str,
    *,
    state_chars: int,
    pointers: int,
    doubts: int,
    turns: int,
    turn_chars: int,
) -> None:
    if state_chars:
        store.update_working_state(
            agent, goal="G" * state_chars, plan="P" * (state_chars // 2), notes="N" * state_chars
        )
    for i in range(pointers):
        store.set_pointer(agent, f"p{i}", f"/path/{i}/" + "d" * 40)
    for i in range(doubts):
        store.claim(
            agent,
            f"{agent}-act{i}",
            tool="send",
            args={"i": i, "body": "b" * 300},
            args_digest=f"d{i}",
        )
    msgs = []
    for i in range(turns):
        msgs.append(HumanMessage(f"q{i} " + "w " * (turn_chars // 2), id=f"{agent}-h{i}"))
        msgs.append(AIMessage(f"a{i} " + "v" * turn_chars, id=f"{agent}-a{i}"))
    store.record(agent, msgs)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    budget=st.integers(min_value=200, max_value=8000),
    state_chars=st.sampled_from([0, 40, 3000, 40000]),
    pointers=st.integers(0, 30),
    doubts=st.integers(0, 12),
    turns=st.integers(0, 60),
    turn_chars=st.sampled_from([5, 300, 3000]),
)
def test_the_budget_bounds_the_whole_briefing(
    store: RecallStore,
    budget: int,
    state_chars: int,
    pointers: int,
    doubts: int,
    turns: int,
    turn_chars: int,
) -> None:
    agent = uuid.uuid4().hex[:10]
    _fill(
        store,
        agent,
        state_chars=state_chars,
        pointers=pointers,
        doubts=doubts,
        turns=turns,
        turn_chars=turn_chars,
    )
    try:
        b = store.briefing(agent, token_budget=budget)
    except RecallError as err:
        # Too small for every call in doubt: refused, naming a budget that holds them.
        assert err.code == "invalid_value" and doubts
        budget = err.details["token_budget"]
        b = store.briefing(agent, token_budget=budget)
    assert b.tokens == _tokens(b.text) <= budget
    # The most important part always survives: what the agent is, and any call in doubt.
    assert b.text.startswith(f"# Briefing: agent {agent}")
    if doubts:
        assert "## Unconfirmed calls" in b.text and "send(i=0, body=<302 chars>)" in b.text


@pytest.mark.parametrize("budget", [200, 1000, 8000])
def test_a_custom_counter_bounds_it_too_even_when_not_additive(
    store: RecallStore, budget: int
) -> None:
    _fill(store, "a", state_chars=3000, pointers=20, doubts=3, turns=80, turn_chars=300)

    def superlinear(messages: list) -> int:
        # Longer texts cost more than the sum of their parts: per-line estimates undercount.
        chars = sum(len(str(m.content)) for m in messages)
        return math.ceil((chars / 3.5) ** 1.04) + 4

    try:
        b = build_briefing(store, "a", token_budget=budget, token_counter=superlinear)
    except RecallError as err:
        # Too small for the calls in doubt once counted whole: refused, naming one that fits.
        assert budget == 200 and err.code == "invalid_value"
        budget = err.details["token_budget"]
        b = build_briefing(store, "a", token_budget=budget, token_counter=superlinear)
    assert b.tokens == superlinear([SystemMessage(b.text)]) <= budget
    assert "## Unconfirmed calls" in b.text and b.text.count("[action a-act") == 3
    # Inside a running agent the same budget is not refused: what does not fit is counted.
    b = build_briefing(
        store, "a", token_budget=200, token_counter=superlinear, doubts_over_budget="count"
    )
    assert b.tokens <= 200 and "## Unconfirmed calls" in b.text


def test_at_the_smallest_budget_the_most_important_parts_survive(store: RecallStore) -> None:
    _fill(store, "a", state_chars=0, pointers=10, doubts=1, turns=50, turn_chars=300)
    store.update_working_state("a", goal="ship the billing migration", progress="step 4 of 6")
    b = store.briefing("a", token_budget=200)
    assert b.tokens <= 200
    assert "send(i=0, body=<302 chars>)" in b.text
    assert "goal: ship the billing migration" in b.text
    assert "progress: step 4 of 6" in b.text
    assert "## Recent turns" not in b.text  # the least important part gives way first


def _long_doubts(store: RecallStore, agent: str, n: int) -> list[str]:
    """``n`` open external calls, each about 400 characters as a call; their action ids."""
    ids = [f"{agent}-act{i}" for i in range(n)]
    for i, action_id in enumerate(ids):
        args = {f"field_{k}": f"value {i}.{k} " + "v" * 20 for k in range(12)}
        store.claim(agent, action_id, tool="send", args=args, args_digest=f"d{i}")
    return ids


def test_in_doubt_calls_over_budget_are_shortened_not_dropped(store: RecallStore) -> None:
    ids = _long_doubts(store, "a", 8)
    assert _tokens("\n".join(a.call_text() for a in store.actions("a"))) > 600
    b = store.briefing("a", token_budget=600)
    assert b.tokens <= 600
    assert all(f"[action {i}]" in b.text for i in ids), "each call in doubt keeps its line and id"
    assert "more" not in b.text and "- send(field_0='value 0.0" in b.text


def test_a_budget_too_small_for_the_calls_in_doubt_is_refused_naming_one_that_fits(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _long_doubts(store, "a", 40)
    store.record("a", [m for i in range(20) for m in _exchange(i)])
    pages = _rows_read(store, monkeypatch)
    with pytest.raises(RecallError) as err:
        store.briefing("a", token_budget=600)
    assert pages == []  # refused as soon as the calls are placed, before any turn is read
    fit = err.value.details["token_budget"]
    assert err.value.code == "invalid_value" and f"give at least {fit} tokens" in str(err.value)
    b = store.briefing("a", token_budget=fit)
    assert b.tokens <= fit and all(f"[action {i}]" in b.text for i in ids)
    with pytest.raises(RecallError):
        store.briefing("a", token_budget=fit - 1)  # the least that fits


def test_too_many_calls_in_doubt_for_the_default_budget_are_counted_not_refused(
    store: RecallStore,
) -> None:
    """The refusal is for a budget the caller chose. With the default one (the CLI's show, a
    running agent's hooks and middleware) a briefing that raised would fail the agent's run or
    hide everything else: the calls that fit are listed, the rest counted."""
    ids = _long_doubts(store, "a", 200)
    with pytest.raises(RecallError):
        store.briefing("a", token_budget=2000)  # asked for: refused, naming one that fits
    b = store.briefing("a")
    assert b.tokens <= b.token_budget == 2000
    assert f"[action {ids[0]}]" in b.text
    listed = sum(f"[action {i}]" in b.text for i in ids)
    assert 0 < listed < 200 and f"… and {200 - listed} more unconfirmed call(s)" in b.text
    cfg = {"configurable": {"thread_id": "t", "agent_id": "a"}}
    for budget in (2000, 400):  # in a running agent never refused, even a budget given
        out = with_briefing(
            [HumanMessage("go", id="h")], config=cfg, store=store, token_budget=budget
        )
        text = str(out[0].content)
        assert _tokens(text) <= budget and "more unconfirmed call(s)" in text


def test_calls_in_doubt_trimmed_for_a_non_additive_counter_are_still_counted(
    store: RecallStore,
) -> None:
    # A counter whose per-line costs undercount the whole (each line rounded down) leaves the
    # final trim to take lines off: calls in doubt it takes are counted, never hidden, and a
    # budget given that cannot hold them all is refused instead.
    ids = _long_doubts(store, "a", 200)

    def floors(messages: list) -> int:
        return sum(len(str(m.content)) for m in messages) // 3 + 5

    b = store.briefing("a", token_budget=3800, token_counter=floors, doubts_over_budget="count")
    listed = sum(f"[action {i}]" in b.text for i in ids)
    assert b.tokens <= 3800 and 0 < listed < 200
    assert f"… and {200 - listed} more unconfirmed call(s)" in b.text
    with pytest.raises(RecallError) as err:
        store.briefing("a", token_budget=3800, token_counter=floors)
    assert err.value.code == "invalid_value"
    fit = err.value.details["token_budget"]
    b = store.briefing("a", token_budget=fit, token_counter=floors)
    assert b.tokens <= fit and all(f"[action {i}]" in b.text for i in ids)


def test_a_working_state_over_budget_is_shortened_and_says_so(store: RecallStore) -> None:
    store.update_working_state("a", goal="reach the goal " * 10, notes="n" * 50_000)
    b = store.briefing("a", token_budget=300)
    assert b.tokens <= 300 and b.shortened
    assert "(working state shortened to fit the token budget)" in b.text
    assert "goal: reach the goal reach the goal" in b.text  # the short goal kept whole
    assert re.search(r"n… \(\+\d+ chars\)", b.text)
    assert not store.briefing("a", token_budget=20_000).shortened


def test_a_budget_too_small_for_the_header_is_refused(store: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        store.briefing("a", token_budget=20)
    assert err.value.code == "invalid_value"


# --- cost --------------------------------------------------------------------------------------


def test_it_reads_only_what_fits_whatever_the_history_length(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[int] = []
    real = _transcript.loads_fields

    def counting(*args: object, **kwargs: object) -> object:
        decoded.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    store.record("short", [m for i in range(50) for m in _exchange(i)])
    store.record("long", [m for i in range(2500) for m in _exchange(i)])
    monkeypatch.setattr(_transcript, "loads_fields", counting)
    store.briefing("short", token_budget=1000)
    short = len(decoded)
    decoded.clear()
    b = store.briefing("long", token_budget=1000)
    assert 0 < len(decoded) <= short + 8  # 10,000 turns read like 200: only a page that fits
    assert len(decoded) < 4 * b.turns_shown


def test_briefing_type_is_a_value(store: RecallStore) -> None:
    b = store.briefing("a")
    assert isinstance(b, Briefing) and b.token_budget == 2000 and b.agent_id == "a"


# --- briefing before every model call (the whole conversation in the input) ---------------------


def _ids(messages: list) -> list[str]:
    return [str(m.id) for m in messages]


def _rows_read(store: RecallStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row limits of every turn page the store is asked for, as they happen."""
    limits: list[int] = []
    real = store.turn_page

    def counting(agent_id: str, limit: int, **kwargs: object) -> object:
        limits.append(limit)
        return real(agent_id, limit, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "turn_page", counting)
    return limits


def test_with_every_turn_in_the_input_no_turn_is_shown(store: RecallStore) -> None:
    store.update_working_state("a", goal="add the numbers")
    convo: list = []
    for i in range(6):
        convo += _exchange(i)
        store.record("a", _exchange(i))
        b = store.briefing("a", exclude_msg_ids=_ids(convo), query="ask")
        assert b.turns_shown == 0 and "turns" not in b.text
        assert b.sections == ("header", "working_state")
        assert b.text == (
            "# Briefing: agent a, from its records\n"
            "Resuming from what this agent wrote down (after a crash, or in another process): "
            "trust it and do not redo finished steps.\n"
            "## Working state\n"
            "goal: add the numbers"
        )


def test_briefings_in_a_loop_say_what_a_fresh_process_would(
    store: RecallStore, store_target: str
) -> None:
    # Briefings remember which turns an input held (turns are append-only); each must still
    # read exactly as a store with no such memory reads it, whatever changed in between.
    other = RecallStore.open(store_target)
    fresh = RecallStore.open(store_target)

    def both(agent: str, convo: list, **kw: object) -> str:
        warm = store.briefing(agent, exclude_msg_ids=_ids(convo), **kw)  # type: ignore[arg-type]
        cold = fresh.briefing(agent, exclude_msg_ids=_ids(convo), **kw)  # type: ignore[arg-type]
        assert warm == cold
        _briefing_turns.SKIPPED._by_store.pop(fresh, None)  # forget: the next one is a first again
        return warm.text

    def looped(agent: str) -> list:
        """Eight model calls, the whole conversation in the input each time."""
        convo: list = []
        for i in range(8):
            convo += _exchange(i)
            store.record(agent, _exchange(i), thread_id="t1")
            assert "## Earlier turns" not in both(agent, convo)
        return convo

    try:
        # Another thread of the agent records between two calls: its turns show, each time.
        convo = looped("a")
        other.record("a", _exchange(100), thread_id="t2")
        text = both("a", convo)
        assert "ask 100" in text and "answer 100" in text and "ask 7" not in text
        assert both("a", convo) == text
        convo += _exchange(100)
        assert "## Earlier turns" not in both("a", convo)

        # More turns from elsewhere than a first small page holds: all shown, each time.
        convo = looped("b")
        other.record("b", [m for j in range(200, 206) for m in _exchange(j)], thread_id="t2")
        text = both("b", convo)
        assert all(f"answer {j}" in text for j in range(200, 206)) and "ask 7" not in text
        assert both("b", convo) == text

        # The input loses its oldest turns (trimmed): those turns show again.
        convo = looped("c")
        trimmed = [m for m in convo if m.id not in {"h0", "a0", "t0", "r0"}]
        text = both("c", trimmed)
        assert "ask 0" in text and "answer 0" in text and "answer 1" not in text

        # An id the input holds but no turn has changes nothing; a tight budget neither.
        convo = looped("d")
        assert "## Earlier turns" not in both("d", [*convo, HumanMessage("x", id="new")])
        assert "## Earlier turns" not in both("d", convo, token_budget=300)
    finally:
        other.close()
        fresh.close()


# 1200 exchanges: 4800 messages, more than one page of skipped rows (4096 and the budget's).
@pytest.mark.parametrize("exchanges", [500, 1200])
def test_a_briefing_per_model_call_reads_only_the_turns_recorded_since_the_last(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, exchanges: int
) -> None:
    convo = [m for i in range(exchanges) for m in _exchange(i)]
    store.record("a", convo)
    limits = _rows_read(store, monkeypatch)
    store.briefing("a", exclude_msg_ids=_ids(convo))
    assert sum(limits) >= len(convo)  # the first briefing reads the history once
    for i in range(exchanges, exchanges + 5):
        convo += _exchange(i)
        store.record("a", _exchange(i))
        limits.clear()
        b = store.briefing("a", exclude_msg_ids=_ids(convo))
        assert b.turns_shown == 0
        assert len(limits) == 1 and limits[0] <= 4 + 2  # the new turns and two more


def test_a_conversation_longer_than_a_page_does_not_hide_the_older_turns_it_lacks(
    store: RecallStore,
) -> None:
    # The agent's earlier work, on another thread: the model's input does not hold it.
    store.record("a", _exchange(9999, "on the old thread"), thread_id="old")
    # Then a conversation of 4800 messages, all in the input. The reader skips them a page at
    # a time; a page of nothing but skipped rows is not the end of the history (the briefing
    # stopped there and never showed the older work).
    convo = [m for i in range(1200) for m in _exchange(i)]
    store.record("a", convo, thread_id="t")
    b = store.briefing("a", exclude_msg_ids=_ids(convo))
    assert "## Earlier turns not in this conversation, oldest first" in b.text
    assert "ask 9999 on the old thread" in b.text and "answer 9999" in b.text
    assert "answer 0" not in b.text and b.turns_shown == 4


@pytest.mark.parametrize("history", [50, 400])  # all of it read, or until the budget is spent
def test_an_input_without_the_older_turns_costs_no_extra_read_per_call(
    store: RecallStore, monkeypatch: pytest.MonkeyPatch, history: int
) -> None:
    convo = [m for i in range(history) for m in _exchange(i)]
    store.record("a", convo)
    limits = _rows_read(store, monkeypatch)
    pages = []
    for i in range(history, history + 10):  # the model sees only the last ten exchanges
        convo += _exchange(i)
        store.record("a", _exchange(i))
        limits.clear()
        text = store.briefing("a", exclude_msg_ids=_ids(convo[-40:])).text
        assert f"answer {i - 10}" in text and f"answer {i - 9}" not in text
        pages.append(len(limits))
    # One small first page, then as many pages as before each time: it is not tried again.
    assert pages[1:] == [pages[1]] * 9 and pages[0] == pages[1] + 1


@pytest.fixture
def fresh(store_target: str) -> Iterator[RecallStore]:
    """A second store on the same database, to read what a process with no memo reads."""
    other = RecallStore.open(store_target)
    yield other
    other.close()


def _earlier_thread_then_conversation(store: RecallStore) -> list:
    """Agent "a": three exchanges on an earlier thread, then a conversation of 300 exchanges
    (1200 messages) on thread "t"; returns the conversation."""
    store.record("a", [m for j in range(900, 903) for m in _exchange(j)], thread_id="old")
    convo = [m for i in range(300) for m in _exchange(i)]
    store.record("a", convo, thread_id="t")
    return convo


def _as_a_full_read_says(store: RecallStore, fresh: RecallStore, convo: list) -> Briefing:
    """Agent "a"'s briefing with ``convo`` in the input, from ``store`` (using what earlier
    briefings proved), checked equal to ``fresh``'s, which reads everything."""
    warm = store.briefing("a", exclude_msg_ids=_ids(convo))
    cold = fresh.briefing("a", exclude_msg_ids=_ids(convo))
    _briefing_turns.SKIPPED._by_store.pop(fresh, None)  # forget: the next one is a first again
    assert warm == cold
    return warm


def test_an_agent_with_an_earlier_thread_is_briefed_reading_only_the_new_turns(
    store: RecallStore, fresh: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent's earlier thread, then a long conversation the model's input holds whole: each
    # briefing shows the earlier thread's turns, and, once one has read the conversation, the
    # next ones read the few turns recorded since and the earlier thread, not the conversation.
    convo = _earlier_thread_then_conversation(store)
    limits = _rows_read(store, monkeypatch)
    first = store.briefing("a", exclude_msg_ids=_ids(convo))
    assert sum(limits) >= len(convo)
    for i in range(300, 305):
        convo += _exchange(i)
        store.record("a", _exchange(i), thread_id="t")
        limits.clear()
        warm = _as_a_full_read_says(store, fresh, convo)
        assert all(f"answer {j}" in warm.text for j in range(900, 903))
        # Two reads: the new turns and two more, then (the conversation stepped over) the
        # earlier thread's 12 turns, in a page sized by the budget alone (at most 256 rows
        # and a few), not by the 1200 turns of the conversation.
        assert len(limits) == 2 and limits[0] <= 4 + 2 and limits[1] <= 260, limits
    assert first.text == warm.text


def test_a_turn_of_another_thread_above_the_conversation_does_not_bring_back_full_reads(
    store: RecallStore, fresh: RecallStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One turn of another thread recorded above the conversation between two model calls: the
    # briefing after it stepped over the conversation, but kept only the few turns above that
    # turn, and every later one read the whole conversation again.
    convo = _earlier_thread_then_conversation(store)
    limits = _rows_read(store, monkeypatch)
    store.briefing("a", exclude_msg_ids=_ids(convo))
    for i in range(300, 306):
        if i == 302:
            store.record("a", [HumanMessage("side", id="side")], thread_id="side")
        convo += _exchange(i)
        store.record("a", _exchange(i), thread_id="t")
        limits.clear()
        _as_a_full_read_says(store, fresh, convo)
        assert sum(limits) < 300, (i, limits)  # not the 1200 turns of the conversation


def test_a_briefing_stepping_over_a_long_block_stops_its_scan_where_a_full_read_does(
    store: RecallStore, store_target: str
) -> None:
    # More than a page of the conversation in the input (4400 messages), over 1000 turns of an
    # earlier thread below it, and one turn of another thread recorded above it since: the scan
    # cap ends the read among the earlier turns. Stepping over the block to its bottom and paging
    # from there put the pages, and so the cap's cut, a turn off the full read's.
    fresh = RecallStore.open(store_target)
    try:
        agent = "long-block"
        store.record(
            agent, [HumanMessage(f"old {i}", id=f"o{i}") for i in range(1100)], thread_id="old"
        )
        convo = [AIMessage(f"c {i}", id=f"c{i}") for i in range(4400)]
        store.record(agent, convo, thread_id="t")
        store.briefing(agent, token_budget=8000, exclude_msg_ids=_ids(convo))
        store.record(agent, [HumanMessage("side", id="side")], thread_id="side")
        convo.append(AIMessage("c new", id="c-new"))
        store.record(agent, convo[-1:], thread_id="t")
        warm = store.briefing(agent, token_budget=8000, exclude_msg_ids=_ids(convo))
        cold = fresh.briefing(agent, token_budget=8000, exclude_msg_ids=_ids(convo))
        assert warm == cold
    finally:
        fresh.close()


@pytest.mark.parametrize("seed", range(6))
def test_briefings_that_step_over_known_turns_say_what_a_full_read_says(
    store: RecallStore, store_target: str, seed: int
) -> None:
    # Random histories: turns of other threads at random places between the conversation's,
    # inputs that grow, lose their oldest turns or miss some, budgets small and large. A
    # briefing that uses what earlier ones proved must read exactly as one that reads it all.
    import random

    rng = random.Random(seed)
    fresh = RecallStore.open(store_target)
    try:
        agent = f"fuzz-{seed}"
        convo: list = []
        n = 0
        for step in range(14):
            kind = rng.random()
            count = rng.randint(1, 30)
            batch = [m for j in range(n, n + count) for m in _exchange(j)]
            n += count
            if kind < 0.25:
                store.record(agent, batch, thread_id="other")  # not in the input
            else:
                store.record(agent, batch, thread_id="t")
                convo += batch
            seen = convo
            if rng.random() < 0.2:
                seen = convo[rng.randint(0, len(convo) // 2) :]  # the oldest turns trimmed
            elif rng.random() < 0.1:
                seen = [m for m in convo if rng.random() < 0.97]  # a few left out
            budget = rng.choice([300, 2000, 8000])
            warm = store.briefing(agent, token_budget=budget, exclude_msg_ids=_ids(seen))
            cold = fresh.briefing(agent, token_budget=budget, exclude_msg_ids=_ids(seen))
            _briefing_turns.SKIPPED._by_store.pop(fresh, None)
            assert warm == cold, (seed, step)
    finally:
        fresh.close()
