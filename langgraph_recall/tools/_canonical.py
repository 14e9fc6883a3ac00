"""Canonical arguments, their digest, and the action key of a tool call.

The digest is what an approval binds to and what tells a resumed call from a different one, so
it must change whenever the effect could: types are kept apart (``Decimal("10")``, ``10``,
``10.0`` and ``"10"`` all differ; so do a set and a list), defaults from the tool's schema are
filled in (``pay(10)`` and ``pay(10, currency="EUR")`` are the same call when EUR is the
default), and values the model does not control (injected state, store, runtime, config, tool
call id, the idempotency key) are left out. Equal values give equal digests whatever their
order in a dict or a set.

The action key names one tool call for good: the agent, the AI message that asked for it, the
tool call id and the tool name. Tool call ids alone repeat across providers and runs ("0",
"call_1"), so they are never used alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, ValidationError

from .._errors import RecallError
from ..store._actions import action_key as action_key  # re-exported: the tools' call ids

_VERSION = b"recall-args-v1"


def _qual(obj: type) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _tree(value: Any) -> Any:
    """A JSON tree that keeps each value's type; equal values give equal trees."""
    if value is None:
        return ["n"]
    if isinstance(value, bool):  # before int: True is an int
        return ["b", int(value)]
    if isinstance(value, enum.Enum):  # before int/str: IntEnum and StrEnum are both
        return ["e", _qual(type(value)), _tree(value.value)]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, Decimal):
        # Decimal("10") and Decimal("10.00") are the same amount: compare values, not spellings.
        return ["D", str(value if not value.is_finite() else value.normalize())]
    if isinstance(value, str):
        return ["s", str(value)]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ["y", bytes(value).hex()]
    if isinstance(value, Mapping):
        if all(type(k) is str for k in value):
            # The common case, plain str keys: the same order as sorting by ``_text(["s", k])``
            # (a fixed prefix, then the key's JSON string, which no other key's string can
            # begin), with the C string encoder instead of a json.dumps per item. Same tree,
            # same digest.
            keyed = sorted(value.items(), key=lambda kv: _json_str(kv[0]))
            return ["d", [[["s", k], _tree(v)] for k, v in keyed]]
        items = [[_tree(k), _tree(v)] for k, v in value.items()]
        items.sort(key=lambda kv: _text(kv[0]))
        return ["d", items]
    if isinstance(value, (set, frozenset)):
        return [
            "S" if isinstance(value, set) else "Z",
            sorted((_tree(v) for v in value), key=_text),
        ]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return ["t", [_tree(v) for v in value]]
    if isinstance(value, list):
        return ["l", [_tree(v) for v in value]]
    if isinstance(value, dt.datetime):
        return ["dt", value.isoformat()]
    if isinstance(value, dt.date):
        return ["da", value.isoformat()]
    if isinstance(value, dt.time):
        return ["ti", value.isoformat()]
    if isinstance(value, dt.timedelta):
        return ["td", [value.days, value.seconds, value.microseconds]]
    if isinstance(value, uuid.UUID):
        return ["u", str(value)]
    if isinstance(value, PurePath):
        return ["p", _qual(type(value)), str(value)]
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return ["m", _qual(type(value)), [[k, _tree(getattr(value, k))] for k in sorted(fields)]]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = sorted(f.name for f in dataclasses.fields(value))
        return ["c", _qual(type(value)), [[k, _tree(getattr(value, k))] for k in names]]
    if isinstance(value, tuple):  # a namedtuple
        names = value._fields  # type: ignore[attr-defined]
        return ["c", _qual(type(value)), [[k, _tree(getattr(value, k))] for k in names]]
    raise RecallError(
        f"cannot compute a stable digest of an argument of type {_qual(type(value))}; tool "
        "arguments must be plain data (str, numbers, Decimal, dates, lists, dicts, sets, enums, "
        "dataclasses or pydantic models)",
        code="invalid_value",
    )


_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


# ensure_ascii: lone surrogates and any other code point encode the same everywhere. One
# encoder, built once: json.dumps with these options builds a new one on every call.
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _text(tree: Any) -> str:
    return _ENCODER.encode(tree)


# Strict JSON for ``given_text``: NaN refused (it is unequal to itself, as a check must not be).
_GIVEN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def given_text(args: Any) -> str | None:
    """The arguments exactly as the model gave them, as text (None when they are not plain
    JSON data). Two calls of it on one args object agree unless the object was changed in
    between; ``DurableTools`` uses it to reuse a canonical form computed moments earlier."""
    try:
        return _GIVEN.encode(args)
    except (TypeError, ValueError, RecursionError):
        return None


def canonical_bytes(value: Any) -> bytes:
    """The canonical encoding of any argument value (type-tagged, order-independent)."""
    return _text(_tree(value)).encode("ascii")


def args_digest(tool: str, args: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the tool name and its canonical arguments."""
    name = tool.encode("utf-8", "surrogatepass")
    h = hashlib.sha256(_VERSION)
    h.update(len(name).to_bytes(8, "big") + name)
    h.update(canonical_bytes(dict(args)))
    return h.hexdigest()


def canonical_args(
    schema: Any, args: Mapping[str, Any], injected: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The arguments as the tool will see them: validated by ``schema`` (the tool's
    model-facing ``tool_call_schema``), defaults filled in, injected values left out.

    When the arguments do not validate (the tool will refuse them anyway) or the schema is not
    a pydantic model, the model's arguments are used as given, minus injected keys.
    """
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            model = schema.model_validate(dict(args))
        except ValidationError:
            pass
        else:
            return {k: getattr(model, k) for k in schema.model_fields if k not in injected}
    return {k: v for k, v in args.items() if k not in injected}


def edit_problem(schema: Any, args: Any, injected: frozenset[str] = frozenset()) -> str | None:
    """What is wrong with a person's edited arguments for a tool (None: nothing), checked
    against its model-facing schema: a key the tool does not take (``canonical_args`` would
    drop it silently), or values it would refuse (the call would then fail, its approval
    spent, with no chance to correct the edit)."""
    if not isinstance(args, Mapping):
        return f"the arguments must be a dict of the tool's parameters, got {type(args).__name__}"
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None  # nothing to check against
    unknown = sorted(set(args) - set(schema.model_fields) - injected)
    if unknown:
        takes = ", ".join(k for k in schema.model_fields if k not in injected)
        return f"the tool takes no {', '.join(map(repr, unknown))} (it takes: {takes})"
    try:
        schema.model_validate(dict(args))
    except ValidationError as exc:
        parts = [
            f"{'.'.join(str(x) for x in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors()[:5]
        ]
        return "; ".join(parts)
    return None


def messages_of(state: Any, messages_key: str = "messages") -> list[BaseMessage]:
    if isinstance(state, list):
        return state
    if isinstance(state, Mapping):
        return list(state.get(messages_key) or [])
    return list(getattr(state, messages_key, None) or [])


def ai_message_id(state: Any, tool_call_id: str, messages_key: str = "messages") -> str:
    """Id of the AI message that asked for ``tool_call_id`` (newest first).

    ``add_messages`` gives every message an id when it is checkpointed, so this is stable. A
    message without an id (a ToolNode run outside a graph) is named by a hash of its tool
    calls, which is stable for the same message.
    """
    return asking_id(asking_message(state, tool_call_id, messages_key))


def asking_id(m: AIMessage | None) -> str:
    """``ai_message_id`` of the message ``asking_message`` found."""
    if m is None:
        # No message in the state (a bare list of tool calls): the call id is all there is.
        return "call-only"
    if m.id:
        return str(m.id)
    calls = [[tc.get("id"), tc.get("name"), _tree(tc.get("args") or {})] for tc in m.tool_calls]
    return "h-" + hashlib.sha256(_text(calls).encode()).hexdigest()[:24]


def asking_message(
    state: Any, tool_call_id: str, messages_key: str = "messages"
) -> AIMessage | None:
    """The AI message that asked for ``tool_call_id`` (newest first), if the state has it."""
    for m in reversed(messages_of(state, messages_key)):
        if isinstance(m, AIMessage) and any(tc.get("id") == tool_call_id for tc in m.tool_calls):
            return m
    return None
