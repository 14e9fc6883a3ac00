"""A LangChain message packed straight from its fields gives LangGraph's serializer's very bytes.

Recording skips the serializer's ``model_dump`` for plain messages (``_codec._message_bytes``).
That is only safe if nothing changes: the bytes stored, the message read back, and the id an
id-less message is given (a hash of those bytes) must be what the serializer alone gives, or a
message recorded before would be recorded again under a new id.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_recall._hooks import _UnstoredBriefing
from langgraph_recall.store import _codec
from langgraph_recall.store._transcript import message_id

SERDE = JsonPlusSerializer()

_text = st.text(max_size=12)
# msgpack's integers (larger ones fail alike on both paths); every float, NaN included.
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), _text)
_json = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)
_calls = st.lists(
    st.builds(
        lambda name, args, i: {"name": name, "args": args, "id": f"call-{i}"},
        _text,
        st.dictionaries(_text, _json, max_size=4),
        st.integers(0, 99),
    ),
    max_size=3,
)
_content = st.one_of(
    _text,
    st.lists(st.builds(lambda t: {"type": "text", "text": t}, _text), max_size=3),
)
_ids = st.one_of(st.none(), _text)


def _ai(content: Any, calls: Any, kwargs: Any, mid: Any) -> AIMessage:
    return AIMessage(content, tool_calls=calls, additional_kwargs=kwargs, id=mid)


_messages = st.one_of(
    st.builds(_ai, _content, _calls, st.dictionaries(_text, _json, max_size=3), _ids),
    st.builds(lambda c, i: HumanMessage(c, id=i), _content, _ids),
    st.builds(lambda c, i: SystemMessage(c, id=i), _content, _ids),
    st.builds(
        lambda c, a, i: ToolMessage(c, tool_call_id="call-1", artifact=a, id=i),
        _content,
        _json,
        _ids,
    ),
    st.builds(lambda c, r: ChatMessage(c, role=r), _content, _text),
    st.builds(lambda c, n: FunctionMessage(c, name=n), _content, _text),
    st.builds(lambda c, extra: HumanMessage(c, **{"extra_field": extra}), _content, _json),
)


@settings(max_examples=300, deadline=None)
@given(_messages)
def test_plain_messages_give_the_serializers_bytes(message: BaseMessage) -> None:
    assert _codec._message_bytes(message) is not None  # the fast path took it
    assert _codec.dumps_typed(message) == SERDE.dumps_typed(message)


class _Model(pydantic.BaseModel):
    x: int


@pytest.mark.parametrize(
    "message",
    [
        # What the serializer's model_dump converts: a model, a datetime, a UUID, a Decimal,
        # a set. The fast path must hand these to the serializer, not pack them itself.
        AIMessage("", additional_kwargs={"parsed": _Model(x=1)}),
        HumanMessage("", additional_kwargs={"at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}),
        ToolMessage("", tool_call_id="c", artifact=uuid.uuid4()),
        ToolMessage("", tool_call_id="c", artifact={"total": Decimal("9.99")}),
        ToolMessage("", tool_call_id="c", artifact={1, 2}),
    ],
    ids=["model", "datetime", "uuid", "decimal", "set"],
)
def test_messages_holding_converted_values_go_through_the_serializer(message: BaseMessage) -> None:
    assert _codec._message_bytes(message) is None
    assert _codec.dumps_typed(message) == SERDE.dumps_typed(message)
    back = _codec.loads_typed(*_codec.dumps_typed(message))
    assert back == SERDE.loads_typed(SERDE.dumps_typed(message))


def test_a_message_class_that_dumps_itself_keeps_its_own_dump() -> None:
    # The hooks' briefing stores a marker in place of its text: packing its fields would store
    # the whole briefing.
    briefing = _UnstoredBriefing("the whole briefing text")
    assert type(briefing) not in _codec._PLAIN_DUMP
    assert _codec.dumps_typed(briefing) == SERDE.dumps_typed(briefing)
    assert b"the whole briefing text" not in _codec.dumps_typed(briefing)[1]

    class Mine(HumanMessage):  # a user's subclass: the serializer decides
        pass

    assert Mine not in _codec._PLAIN_DUMP


def test_chunks_and_edited_messages_give_the_serializers_bytes() -> None:
    chunk = AIMessageChunk(
        "par", tool_call_chunks=[{"name": "f", "args": "{", "id": "1", "index": 0}]
    )
    edited = AIMessage("before", id="ai-1")
    edited.content = "after"  # LangGraph's add_messages also sets ids this way
    built = AIMessage.model_construct(
        content="x", tool_calls=[{"id": "c", "args": {}, "name": "f"}]
    )
    for message in (chunk, edited, built):
        assert _codec._message_bytes(message) is not None
        assert _codec.dumps_typed(message) == SERDE.dumps_typed(message)


def test_an_id_less_message_is_named_by_its_content_thread_and_position() -> None:
    message = HumanMessage("no id here")
    data = SERDE.dumps_typed(message)[1]
    assert message_id(message, "t-1", 3) == "h-" + _hash(b"t-1\x003\x00" + data)
    assert message_id(message, None, 0) == "h-" + _hash(b"\x000\x00" + data)


def _hash(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:24]
