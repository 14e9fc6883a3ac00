"""RecallMiddleware on ``create_agent``: the briefing in the system message (never stored), the
recall tools, the recording, and the durable-tool options."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fix_agents import TaskModel, config, task_tools
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_recall._briefing import RECALL_TOOL_NAMES
from langgraph_recall._errors import RecallError, UnclassifiedTool
from langgraph_recall._middleware import RecallMiddleware
from langgraph_recall.store import RecallStore
from langgraph_recall.testing import ScriptedChatModel, call, reply
from langgraph_recall.tools import ActionEnd, DurableToolNode, recall_class

MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


def _invoke(graph: Any, inputs: Any, cfg: dict[str, Any], use_async: bool) -> dict[str, Any]:
    if use_async:
        return asyncio.run(graph.ainvoke(inputs, cfg))
    return graph.invoke(inputs, cfg)  # type: ignore[no-any-return]


@pytest.mark.parametrize("use_async", MODES)
def test_the_briefing_joins_the_system_prompt_and_is_never_stored(
    store: RecallStore, tmp_path: Any, use_async: bool
) -> None:
    store.update_working_state("billing", goal="keep the ledger balanced")
    model = TaskModel()
    saver = InMemorySaver()
    agent = create_agent(
        model,
        task_tools(str(tmp_path) + "/e.txt"),
        system_prompt="You migrate billing data.",
        middleware=[RecallMiddleware(classes={"work": "external", "check": "pure"})],
        checkpointer=saver,
        store=store,
    )
    cfg = config("t1", "billing")
    out = _invoke(agent, {"messages": [HumanMessage("TASK-0: go.")]}, cfg, use_async)

    for seen in model.seen:
        system = seen[0]
        assert isinstance(system, SystemMessage)
        assert str(system.content).startswith(
            "You migrate billing data.\n\n# Briefing: agent billing"
        )
        assert sum(isinstance(m, SystemMessage) for m in seen) == 1
    assert "goal: keep the ledger balanced" in str(model.seen[0][0].content)
    assert not any(isinstance(m, SystemMessage) for m in out["messages"])
    for saved in saver.list(cfg):  # no checkpoint holds any briefing
        assert "# Briefing" not in repr(saved.checkpoint["channel_values"])
    assert [t.msg_id for t in store.turns("billing")] == [m.id for m in out["messages"]]


def test_too_many_calls_in_doubt_for_its_budget_do_not_fail_the_run(
    store: RecallStore, tmp_path: Any
) -> None:
    # Built on every model call: a budget that cannot list every call in doubt lists what fits
    # and counts the rest; a refusal would fail each run until every call was resolved.
    for i in range(60):
        store.claim(
            "billing", f"act-{i}", tool="work", args={"n": i, "x": "y" * 80}, args_digest=f"d{i}"
        )
    model = TaskModel()
    agent = create_agent(
        model,
        task_tools(str(tmp_path) + "/e.txt"),
        middleware=[
            RecallMiddleware(classes={"work": "external", "check": "pure"}, token_budget=600)
        ],
        checkpointer=InMemorySaver(),
        store=store,
    )
    agent.invoke({"messages": [HumanMessage("TASK-0: go.")]}, config("t1", "billing"))
    assert "more unconfirmed call(s)" in str(model.seen[0][0].content)


def test_a_system_prompt_of_content_blocks_keeps_its_blocks_first(store: RecallStore) -> None:
    model = ScriptedChatModel([reply("ok")])
    prompt = SystemMessage(
        [{"type": "text", "text": "Static.", "cache_control": {"type": "ephemeral"}}]
    )
    agent = create_agent(
        model, [], system_prompt=prompt, middleware=[RecallMiddleware()], store=store
    )
    agent.invoke({"messages": [HumanMessage("hi")]}, config("t", "a"))
    blocks = model.seen[0][0].content
    assert blocks[0] == {"type": "text", "text": "Static.", "cache_control": {"type": "ephemeral"}}
    assert blocks[1]["type"] == "text" and blocks[1]["text"].startswith("# Briefing: agent a")


def test_it_registers_the_recall_tools_as_pure() -> None:
    tools = RecallMiddleware().tools
    assert {t.name for t in tools} == RECALL_TOOL_NAMES
    assert all(t.metadata == {"recall_class": "pure"} for t in tools)
    assert RecallMiddleware(tools=False).tools == []


@pytest.mark.parametrize("use_async", MODES)
@pytest.mark.parametrize("saver_of", ["memory", "recall", "other-store"])
def test_settle_runs_before_the_model_sees_anything(
    store: RecallStore, use_async: bool, saver_of: str, tmp_path: Any
) -> None:
    # A crash left an email in doubt; the resolver can tell it went out. It is asked once,
    # before the model: by store.checkpointer() at the run's start, or by before_agent under
    # any other checkpointer (or one whose store is not where the middleware records).
    store.claim("a", "act-email", tool="send_email", args={"to": "ops"}, args_digest="d")
    events: list[str] = []

    def resolver(action: Any) -> ActionEnd:
        events.append(f"resolved {action.tool}")
        return ActionEnd("done", result="sent", resolution="found it in the outbox")

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    class Watching(ScriptedChatModel):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            events.append("model")
            return super()._generate(messages, *args, **kwargs)

    model = Watching([reply("done")])
    other = RecallStore.open(str(tmp_path / "other.db")) if saver_of == "other-store" else None
    saver: Any = InMemorySaver()
    if saver_of != "memory":
        saver = (other or store).checkpointer()
    middleware = RecallMiddleware(
        classes={"send_email": "external"}, resolver=resolver, store=store if other else None
    )
    agent = create_agent(
        model, [send_email], middleware=[middleware], checkpointer=saver, store=store
    )
    try:
        _invoke(agent, {"messages": [HumanMessage("hi")]}, config("t", "a"), use_async)
    finally:
        if saver_of != "memory":
            saver.close()
        if other is not None:
            other.close()
    assert events == ["resolved send_email", "model"]
    assert store.action("act-email").status == "done"
    assert "Unconfirmed calls" not in str(model.seen[0][0].content)


def _pay_agent(
    store: RecallStore, sent: list[int], amount: int = 9999, **options: Any
) -> tuple[Any, Any]:
    """A create_agent agent whose model asks for pay(amount) once; ``sent`` collects payments."""

    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        sent.append(amount)
        return f"paid {amount}"

    model = ScriptedChatModel([reply("", call("pay", amount=amount)), reply("done")])
    agent = create_agent(
        model,
        [pay],
        middleware=[RecallMiddleware(**{"classes": {"pay": "external"}, **options})],
        checkpointer=InMemorySaver(),
        store=store,
    )
    return agent, model


def test_approval_and_once_only_options_reach_the_tool_calls(
    store: RecallStore, tmp_path: Any
) -> None:
    sent: list[int] = []
    agent, _ = _pay_agent(store, sent, amount=10, approve=("pay",))
    cfg = config("t", "a")
    out = agent.invoke({"messages": [HumanMessage("pay 10")]}, cfg)
    request = out["__interrupt__"][0].value
    assert request["type"] == "approval_request" and request["args"] == {"amount": 10}
    assert sent == []
    out = agent.invoke(Command(resume={"type": "approve"}), cfg)
    assert sent == [10]
    assert out["messages"][-1].content == "done"
    # The same call again (a replayed resume) returns the recorded result, it does not pay twice.
    assert [a.status for a in store.actions("a")] == ["done"]


@pytest.mark.parametrize("use_async", MODES)
def test_a_run_that_ends_on_a_tool_result_records_it_too(
    store: RecallStore, use_async: bool
) -> None:
    @tool(return_direct=True)
    def lookup(q: str) -> str:
        """Look something up and answer with it directly."""
        return f"answer to {q}"

    model = ScriptedChatModel([reply("", call("lookup", q="rates"))])
    agent = create_agent(
        model,
        [lookup],
        middleware=[RecallMiddleware(classes={"lookup": "pure"})],
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = _invoke(agent, {"messages": [HumanMessage("rates?")]}, config("t", "a"), use_async)
    assert out["messages"][-1].content == "answer to rates"  # the run ended on the tool result
    assert [t.msg_id for t in store.turns("a")] == [m.id for m in out["messages"]]


@pytest.mark.parametrize("use_async", MODES)
async def test_a_tool_without_a_class_is_refused_before_the_model_is_called(
    store: RecallStore, use_async: bool
) -> None:
    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @tool
    def look(q: str) -> str:
        """Look something up."""
        return "found"

    model = ScriptedChatModel([reply("", call("pay", amount=10)), reply("done")])
    agent = create_agent(
        model,
        [pay, look],
        middleware=[RecallMiddleware(classes={"look": "pure"})],
        checkpointer=InMemorySaver(),
        store=store,
    )
    cfg = config("t-unclassified", "u")
    inputs = {"messages": [HumanMessage("pay 10")]}
    # The refusal used to come at the tool call: the model had asked for pay already, and the
    # run stopped with that call unanswered in the state.
    with pytest.raises(UnclassifiedTool) as err:
        await agent.ainvoke(inputs, cfg) if use_async else agent.invoke(inputs, cfg)
    assert err.value.code == "unclassified_tool" and err.value.details["tools"] == ["pay"]
    assert model.seen == []


def test_approve_given_as_one_name_gates_that_tool(store: RecallStore) -> None:
    # approve="pay" became ("p", "a", "y"): nothing was gated and pay(9999) ran unasked.
    sent: list[int] = []
    agent, _ = _pay_agent(store, sent, approve="pay")
    out = agent.invoke({"messages": [HumanMessage("pay")]}, config("t-str", "s"))
    assert out["__interrupt__"][0].value["tool"] == "pay"
    assert sent == []


@pytest.mark.parametrize("use_async", MODES)
@pytest.mark.parametrize(
    "options",
    [
        {"approve": ("pya",)},
        {"classes": {"pay": "external", "pya": "pure"}},
        {"undo": {"py": print}},
    ],
)
async def test_a_name_the_model_is_not_offered_is_refused_before_it_is_called(
    store: RecallStore, use_async: bool, options: dict[str, Any]
) -> None:
    # approve=("pya",) was taken as is: pay ran without asking.
    sent: list[int] = []
    agent, model = _pay_agent(store, sent, **options)
    cfg = config("t-typo", "typo")
    inputs = {"messages": [HumanMessage("pay")]}
    with pytest.raises(RecallError) as err:
        await agent.ainvoke(inputs, cfg) if use_async else agent.invoke(inputs, cfg)
    assert err.value.code == "invalid_value"
    assert "not offered" in str(err.value) and "RecallMiddleware before it" in str(err.value)
    assert err.value.details["tools"][0] in ("pya", "py")
    assert model.seen == [] and sent == []


@pytest.mark.parametrize("use_async", MODES)
def test_a_tool_that_declares_its_approval_is_gated_when_classes_names_it_too(
    store: RecallStore, use_async: bool
) -> None:
    # With classes={"pay": ...} the middleware never read the tool's own approve=True, so
    # pay(9999) ran unasked (DurableToolNode, given the same options, asked).
    sent: list[int] = []

    @recall_class("external", approve=True)
    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        sent.append(amount)
        return f"paid {amount}"

    model = ScriptedChatModel([reply("", call("pay", amount=9999)), reply("done")])
    agent = create_agent(
        model,
        [pay],
        middleware=[RecallMiddleware(classes={"pay": "external"})],
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = _invoke(agent, {"messages": [HumanMessage("pay")]}, config("t-decl", "d"), use_async)
    assert out["__interrupt__"][0].value["tool"] == "pay"
    assert sent == []


@pytest.mark.parametrize("use_async", MODES)
def test_the_store_given_to_the_middleware_serves_its_tool_calls(
    store: RecallStore, tmp_path: Any, use_async: bool
) -> None:
    # Compiled without a store: the tool calls found none and were refused after the model had
    # asked for them, while the turns went to the store given.
    model = ScriptedChatModel(
        [
            reply("", call("work", step=1), call("update_working_state", goal="migrate")),
            reply("done"),
        ]
    )
    agent = create_agent(
        model,
        task_tools(str(tmp_path / "e.txt")),
        middleware=[RecallMiddleware(classes={"work": "external", "check": "pure"}, store=store)],
        checkpointer=InMemorySaver(),
    )
    _invoke(agent, {"messages": [HumanMessage("go")]}, config("t-given", "given"), use_async)
    assert [(a.tool, a.status) for a in store.actions("given")] == [("work", "done")]
    assert store.working_state("given")["goal"] == "migrate"


BAD_OPTIONS = [
    {"classes": "pay"},
    {"classes": ["pay"]},
    {"classes": {1: "external"}},
    {"approve": True},
    {"approve": [1]},
    {"undo": "refund"},
    {"undo": [print]},
    {"undo": {"pay": "refund"}},
    {"resolver": "yes"},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=[str(o) for o in BAD_OPTIONS])
@pytest.mark.parametrize("which", ["middleware", "node"])
def test_options_of_the_wrong_kind_are_refused_by_name(which: str, options: dict[str, Any]) -> None:
    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    given = {"classes": {"pay": "external"}, **options}
    with pytest.raises(RecallError) as err:
        if which == "middleware":
            RecallMiddleware(**given)
        else:
            DurableToolNode([pay], **given)
    assert err.value.code == "invalid_value"
    assert f"{next(iter(options))}=" in str(err.value)


def test_approve_none_means_no_tool_needs_approval(store: RecallStore) -> None:
    sent: list[int] = []
    agent, _ = _pay_agent(store, sent, amount=3, approve=None)
    agent.invoke({"messages": [HumanMessage("pay")]}, config("t-none", "none"))
    assert sent == [3]


def test_the_store_given_to_the_middleware_leaves_the_agents_own_store_to_its_tools(
    store: RecallStore,
) -> None:
    from langgraph.store.memory import InMemoryStore

    app_store = InMemoryStore()
    app_store.put(("prefs", "u1"), "color", {"value": "blue"})

    @tool
    def favourite_color(user: str, runtime: ToolRuntime) -> str:
        """The user's favourite colour."""
        item = runtime.store.get(("prefs", user), "color")
        return item.value["value"] if item else "unknown"

    model = ScriptedChatModel(
        [
            reply("", call("favourite_color", user="u1"), call("milestone", text="asked")),
            reply("ok"),
        ]
    )
    agent = create_agent(
        model,
        [favourite_color],
        middleware=[RecallMiddleware(classes={"favourite_color": "idempotent"}, store=store)],
        checkpointer=InMemorySaver(),
        store=app_store,
    )
    out = agent.invoke({"messages": [HumanMessage("colour?")]}, config("t-own", "own"))
    # The tool read the app's store (it got "unknown" from the RecallStore); the durable call
    # and the recall tool recorded in the store given.
    assert [m.content for m in out["messages"] if m.type == "tool"][0] == "blue"
    assert [a.status for a in store.actions("own")] == ["done"]
    assert store.working_state("own")["last_milestone"] == "asked"
