"""Replay and diff of recorded runs, on SQLite and PostgreSQL.

- ``ReplayChatModel`` re-runs a recorded agent offline: it answers with the recorded model
  replies, the durable tools hand back their recorded results (the email is not sent again),
  and the replayed run has the same steps as the recording.
- A request that differs from the recording (another input, a tool that now returns something
  else) raises ``replay_mismatch`` naming the model call where it parted.
- ``diff`` finds the first step where two agents' runs differ, in one database and across two,
  and says "identical" for identical runs.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_recall import (
    DurableToolNode,
    RecallError,
    RecallStore,
    ReplayChatModel,
    diff,
    with_briefing,
)
from langgraph_recall._diff import steps_of
from langgraph_recall.testing import ScriptedChatModel, call, reply

SCRIPT = [
    reply("", call("check_stock", item="widget")),
    reply("", call("send_email", to="ops@example.com", subject="widgets are low")),
    reply("Ops know the widgets are low."),
]
ASK = "Check the widget stock and tell ops if it is low."


class Shop:
    """A tiny agent: a pure stock lookup and an external email, with the briefing in front."""

    def __init__(self, store: RecallStore, folder: str, stock: int = 3) -> None:
        self.store = store
        self.outbox = os.path.join(folder, "outbox.jsonl")
        self.stock = stock

    def sent(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.outbox):
            return []
        with open(self.outbox) as f:
            return [json.loads(line) for line in f]

    def graph(self, model: Any, checkpointer: Any = None) -> Any:
        outbox, stock = self.outbox, self.stock

        @tool
        def check_stock(item: str) -> str:
            """How many of an item are left."""
            return f"{stock} {item}s left"

        @tool
        def send_email(to: str, subject: str) -> str:
            """Send an email."""
            with open(outbox, "a") as f:
                f.write(json.dumps({"to": to, "subject": subject}) + "\n")
            return f"email to {to} sent"

        node = DurableToolNode(
            [check_stock, send_email], classes={"check_stock": "pure", "send_email": "external"}
        )
        store = self.store

        def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
            messages = with_briefing(state["messages"], config=config, store=store)
            return {"messages": [model.invoke(messages)]}

        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_node("tools", node)
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition)
        g.add_edge("tools", "agent")
        return g.compile(store=store, checkpointer=checkpointer or store.checkpointer())

    def run(self, model: Any, agent: str, thread: str, first: BaseMessage) -> list[BaseMessage]:
        cfg = {"configurable": {"thread_id": thread, "agent_id": agent}}
        out = self.graph(model).invoke({"messages": [first]}, cfg)
        return list(out["messages"])

    def replay(self, agent: str, first: BaseMessage, *, model: Any = None) -> list[BaseMessage]:
        """Replay ``agent`` the documented way: the same agent id (so durable tools find their
        records) and a checkpointer that records nothing (so the replay adds no turns)."""
        graph = self.graph(model or ReplayChatModel(self.store, agent), InMemorySaver())
        cfg = {"configurable": {"thread_id": f"replay-{secrets.token_hex(3)}", "agent_id": agent}}
        return list(graph.invoke({"messages": [first]}, cfg)["messages"])


class CountModelCalls(BaseCallbackHandler):
    def __init__(self) -> None:
        self.calls = 0

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1


@pytest.fixture
def recorded(store: RecallStore, tmp_path: Any) -> Iterator[Shop]:
    """The agent "shop" ran once: it checked stock and emailed ops."""
    shop = Shop(store, str(tmp_path))
    model = ScriptedChatModel(SCRIPT)
    shop.run(model, "shop", "t-1", HumanMessage(ASK, id="ask-1"))
    assert len(model.seen) == 3
    assert len(shop.sent()) == 1
    yield shop


def _first_input(store: RecallStore, agent: str) -> BaseMessage:
    return store.turns(agent)[0].message


def test_replay_reruns_the_recorded_run_offline_without_repeating_effects(
    recorded: Shop, store: RecallStore
) -> None:
    recording = [t.message for t in store.turns("shop")]
    replay = ReplayChatModel(store, "shop")
    counter = CountModelCalls()
    replay.callbacks = [counter]
    # The model is the recording and the durable tools answer from their records, so nothing
    # outside the process is touched.
    out = recorded.replay("shop", recording[0], model=replay)
    assert steps_of(out) == steps_of(recording)
    assert counter.calls == 3  # every reply came from the replay model
    assert len(recorded.sent()) == 1  # the email was not sent again
    assert out[-2].content == "email to ops@example.com sent"  # its recorded result came back
    assert store.actions("shop", open_only=True) == []
    # The replay left the agent's records as they were.
    assert [t.msg_id for t in store.turns("shop")] == [m.id for m in recording]


def test_replay_names_the_model_call_where_a_tool_result_differs(
    recorded: Shop, store: RecallStore
) -> None:
    recorded.stock = 5  # the pure lookup now answers differently from the recording
    with pytest.raises(RecallError) as caught:
        recorded.run(
            ReplayChatModel(store, "shop"), "shop", "replay-2", _first_input(store, "shop")
        )
    err = caught.value
    assert err.code == "replay_mismatch"
    assert err.details["step"] == 2
    assert "model call #2" in str(err)
    assert "3 widgets left" in str(err) and "5 widgets left" in str(err)
    assert len(recorded.sent()) == 1  # it stopped before the email step


def test_replay_names_the_first_model_call_when_the_input_differs(
    recorded: Shop, store: RecallStore
) -> None:
    other = HumanMessage("Order more widgets.", id="ask-other")
    with pytest.raises(RecallError) as caught:
        recorded.replay("shop", other)
    assert caught.value.code == "replay_mismatch"
    assert caught.value.details["step"] == 1
    assert "Order more widgets." in str(caught.value)


def test_replay_of_an_agent_without_records_says_so(store: RecallStore) -> None:
    with pytest.raises(RecallError) as caught:
        ReplayChatModel(store, "nobody").invoke([HumanMessage("hi")])
    assert caught.value.code == "unknown_agent"


# --- diff ----------------------------------------------------------------------------------------


def _run_shop(store: RecallStore, folder: str, agent: str, stock: int) -> None:
    shop = Shop(store, folder, stock=stock)
    model = ScriptedChatModel(SCRIPT, name_prefix=agent)
    shop.run(model, agent, agent, HumanMessage(ASK, id=f"{agent}-ask"))


@pytest.fixture
def other_store(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> Iterator[RecallStore]:
    """A second database (SQLite file) or schema (PostgreSQL)."""
    if backend == "sqlite":
        target = os.path.join(str(tmp_path), "other.db")
    else:
        import psycopg
        from conftest import with_schema

        base = request.getfixturevalue("pg_database")
        schema = "t_" + secrets.token_hex(5)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        target = with_schema(base, schema)
    with RecallStore.open(target) as s:
        yield s


def test_diff_says_identical_for_the_same_run_under_two_agents(
    store: RecallStore, tmp_path: Any
) -> None:
    _run_shop(store, str(tmp_path), "first", stock=3)
    _run_shop(store, str(tmp_path), "second", stock=3)
    result = diff(store, "first", "second")
    assert result.identical
    assert (result.same_steps, result.left_steps, result.right_steps) == (6, 6, 6)
    assert str(result) == "first and second: identical (6 steps)"


def test_diff_finds_the_first_differing_step(store: RecallStore, tmp_path: Any) -> None:
    _run_shop(store, str(tmp_path), "first", stock=3)
    _run_shop(store, str(tmp_path), "second", stock=5)
    result = diff(store, "first", "second")
    assert not result.identical
    # input, model -> check_stock, then the stock lookup's result is where they part.
    assert (result.step, result.same_steps) == (3, 2)
    assert str(result.left_step) == "tool_result: check_stock -> '3 widgets left'"
    assert str(result.right_step) == "tool_result: check_stock -> '5 widgets left'"
    assert result.as_dict()["first_difference"] == 3


def test_diff_across_two_databases(
    store: RecallStore, other_store: RecallStore, tmp_path: Any
) -> None:
    _run_shop(store, str(tmp_path), "shop", stock=3)
    _run_shop(other_store, str(tmp_path), "shop", stock=3)
    same = diff(store, "shop", "shop", store_b=other_store)
    assert same.identical and same.same_steps == 6
    # A run that stopped early (only the input recorded) differs where the other goes on.
    other_store.record("short", [HumanMessage(ASK, id="short-ask")])
    short = diff(store, "shop", "short", store_b=other_store)
    assert (short.step, short.same_steps) == (2, 1)
    assert short.left_step is not None and short.left_step.kind == "model"
    assert short.right_step is None
    assert "(run ended)" in str(short)


def test_diff_of_an_unknown_agent_raises_unknown_agent(
    store: RecallStore, other_store: RecallStore, tmp_path: Any
) -> None:
    _run_shop(store, str(tmp_path), "shop", stock=3)
    # A mistyped id read as an empty run: "shop and shpo agree for 0 steps", or, for two
    # mistyped ids, "identical".
    for a, b, missing in [("shpo", "shop", "shpo"), ("shop", "shpo", "shpo"), ("x", "y", "x")]:
        with pytest.raises(RecallError) as raised:
            diff(store, a, b)
        assert raised.value.code == "unknown_agent"
        assert raised.value.details["agent_id"] == missing and repr(missing) in str(raised.value)
    # Across two databases, agent_b is looked for in the second one.
    with pytest.raises(RecallError) as raised:
        diff(store, "shop", "shop", store_b=other_store)
    assert raised.value.code == "unknown_agent" and raised.value.details["agent_id"] == "shop"
