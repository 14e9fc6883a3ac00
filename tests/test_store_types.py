"""Tool arguments and results come back with their types, through LangGraph's serializer and
never through pickle, on both backends."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_recall.store import RecallStore
from langgraph_recall.store._codec import _serde


@dataclasses.dataclass
class Invoice:
    number: int
    total: Decimal
    due: dt.date


class Customer(pydantic.BaseModel):
    name: str
    tags: list[str]
    since: dt.datetime


UTC = dt.timezone.utc

VALUES: dict[str, Any] = {
    "str": "héllo 東京 😀",
    "int": 2**62,
    "negative": -7,
    "float": 0.1,
    "bool": True,
    "none": None,
    "decimal": Decimal("10.10"),
    "datetime_utc": dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC),
    "datetime_offset": dt.datetime(
        2024, 1, 1, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))
    ),
    "datetime_naive": dt.datetime(2024, 1, 1, 9, 30),
    "date": dt.date(2024, 12, 31),
    "timedelta": dt.timedelta(days=2, seconds=5),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "bytes": b"\x00\xffbinary",
    "set": {1, 2, 3},
    "dataclass": Invoice(7, Decimal("99.95"), dt.date(2025, 1, 31)),
    "pydantic": Customer(name="Ada", tags=["vip"], since=dt.datetime(2020, 5, 1, tzinfo=UTC)),
    "ai_message": AIMessage(
        "calling", id="ai-1", tool_calls=[{"name": "pay", "args": {"n": 10}, "id": "call-1"}]
    ),
    "tool_message": ToolMessage("paid", tool_call_id="call-1", id="tm-1", status="success"),
    "human_blocks": HumanMessage(content=[{"type": "text", "text": "hi"}], id="h-1"),
    "nested": {
        "invoices": [Invoice(1, Decimal("1.00"), dt.date(2024, 1, 1))],
        "at": dt.datetime(2024, 1, 1, tzinfo=UTC),
        "raw": b"\x01",
        "amount": Decimal("-0.000001"),
    },
}


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


@pytest.fixture
def no_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if anything pickles or unpickles while the test runs."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle was used")

    for name in ("dumps", "loads", "dump", "load"):
        monkeypatch.setattr(pickle, name, refuse)


def test_the_serializer_never_falls_back_to_pickle() -> None:
    assert _serde.pickle_fallback is False


@pytest.mark.parametrize("name", list(VALUES))
def test_action_args_and_results_round_trip_with_types(
    store: RecallStore, name: str, no_pickle: None
) -> None:
    value = VALUES[name]
    claim = store.claim("ag", f"act-{name}", tool="t", args=value, args_digest="d")
    assert _same(claim.action.args, value)
    assert store.end(f"act-{name}", 1, "done", result=value)
    done = store.claim("ag", f"act-{name}", tool="t", args=value, args_digest="d")
    assert done.status == "done"
    assert _same(done.action.result, value), (done.action.result, value)
    assert _same(store.action(f"act-{name}").result, value)
    assert _same(store.actions("ag")[0].args, value)
    with store._db.tx() as tx:
        row = tx.one(
            "SELECT args_type, result_type FROM recall_actions WHERE action_id = ?",
            (f"act-{name}",),
        )
    assert row is not None and "pickle" not in row[0] and "pickle" not in row[1]


def test_tuples_come_back_as_lists_as_in_langgraph_checkpoints(store: RecallStore) -> None:
    """LangGraph's serializer (msgpack) has no tuple type; checkpoints behave the same way."""
    store.claim("ag", "act-tuple", tool="t", args={"pair": (1, "a")}, args_digest="d")
    assert store.action("act-tuple").args == {"pair": [1, "a"]}


async def test_results_round_trip_through_the_async_twins(
    store: RecallStore, no_pickle: None
) -> None:
    value = VALUES["nested"]
    await store.aclaim("ag", "act-async", tool="t", args=value, args_digest="d")
    await store.aend("act-async", 1, "done", result=value)
    assert _same((await store.aaction("act-async")).result, value)


def test_approval_args_round_trip_with_types(store: RecallStore, no_pickle: None) -> None:
    value = VALUES["nested"]
    store.record_decision("ag", "pay-1", "approve", args=value, args_digest="d")
    got = store.latest_decision("pay-1")
    assert got is not None and _same(got.args, value)


def test_recorded_messages_round_trip_exactly(store: RecallStore, no_pickle: None) -> None:
    messages = [VALUES["human_blocks"], VALUES["ai_message"], VALUES["tool_message"]]
    store.record("ag", messages)
    got = [t.message for t in store.turns("ag")]
    assert [type(m) for m in got] == [type(m) for m in messages]
    assert got == messages
