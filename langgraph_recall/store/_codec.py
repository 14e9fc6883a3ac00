"""How values become bytes: JSON for BaseStore items, LangGraph's own serializer for records.

Records (messages, tool arguments, results) go through ``JsonPlusSerializer`` so that Decimal,
datetime, bytes, dataclasses, pydantic models and LangChain messages come back with their
types, without pickle. Items stay JSON because BaseStore promises JSON and filters read them.
A plain LangChain message is packed here exactly as that serializer packs it, minus the cost of
its ``model_dump`` (``_message_bytes``).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import orjson
import ormsgpack
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.jsonplus import EXT_PYDANTIC_V2, JsonPlusSerializer
from pydantic import BaseModel

from .._errors import RecallError

_serde = JsonPlusSerializer()


def dumps_typed(value: Any, *, what: str | None = None) -> tuple[str, bytes]:
    """``value`` as LangGraph's serializer packs it; ``invalid_value`` naming ``what`` (and,
    when it can be found, the part of the value at fault) when it cannot be packed."""
    if type(value) in _PLAIN_DUMP:
        data = _message_bytes(value)
        if data is not None:
            return "msgpack", data
    try:
        return _serde.dumps_typed(value)
    except Exception as exc:  # TypeError from msgpack, RecursionError, a model's own dump
        found = unstorable(value)
        where = f" ({found})" if found else f": {exc}"
        raise RecallError(
            f"cannot record {what or f'a value of type {type(value).__name__}'}{where}. Pass "
            "plain data (a number beyond 64 bits as a str or a Decimal), a dataclass, a "
            "pydantic model or a LangChain message.",
            code="invalid_value",
        ) from exc


# LangGraph's serializer (msgpack) packs integers from -2**63 to 2**64-1 and nests containers
# at most 254 deep; beyond either it raises a TypeError that names neither the value nor where
# it is ("Type is not msgpack serializable: AIMessage").
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
MAX_DEPTH = 254


def unstorable(value: Any, *, exact_text: bool = False, root: str = "") -> str | None:
    """Where ``value`` holds what LangGraph's serializer cannot store, and what, as
    ``"<path> is ..."`` (None: nothing found). ``exact_text``: a lone surrogate counts too
    (the serializer stores it as "?", so text that must come back exactly cannot hold one).
    ``root``: the name the path starts with (``args`` gives ``args['amount']``).

    Called when a value was refused, or on a value that must be stored exactly, never per
    write: it walks the whole value (iteratively, so any depth)."""
    todo: list[tuple[Any, str, int]] = [(value, root, 0)]
    while todo:
        v, path, depth = todo.pop()
        if isinstance(v, bool) or v is None or isinstance(v, float):
            continue
        if isinstance(v, int):
            if not _INT_MIN <= v <= _INT_MAX:
                digits = len(str(abs(v))) if abs(v) < 10**4000 else "over 4000"
                return f"{_at(path)} is an int beyond 64 bits ({digits} digits)"
            continue
        if isinstance(v, str):
            if exact_text and not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return (
                        f"{_at(path)} holds a lone surrogate ({v[exc.start]!r} at "
                        f"position {exc.start}), which is not valid Unicode"
                    )
            continue
        if depth >= MAX_DEPTH:
            return f"{_at(path)} is nested more than {MAX_DEPTH} levels deep"
        for key, item in _parts(v):
            if exact_text and isinstance(key, str):
                todo.append((key, f"{path} (a key)", depth + 1))
            todo.append((item, f"{path}{_step(key)}", depth + 1))
    return None


def _parts(v: Any) -> list[tuple[Any, Any]]:
    if isinstance(v, dict):
        return list(v.items())
    if isinstance(v, (list, tuple)):
        return list(enumerate(v))
    if isinstance(v, (set, frozenset)):
        return [(None, x) for x in v]
    if isinstance(v, BaseModel):
        return [(f".{k}", getattr(v, k, None)) for k in type(v).model_fields]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [(f".{f.name}", getattr(v, f.name, None)) for f in dataclasses.fields(v)]
    return []


def _at(path: str) -> str:
    if not path:
        return "the value"
    return path if len(path) <= 120 else f"{path[:60]}...{path[-50:]}"


def _step(key: Any) -> str:
    if isinstance(key, str) and key.startswith("."):
        return key  # a field
    return "[...]" if key is None else f"[{key!r}]"


# --- LangChain messages, the serializer's bytes without its model_dump --------------------------

# The options LangGraph's serializer packs with (``jsonplus._option``): the same flags, so a
# value packs here exactly as it packs there. ``test_store_codec_fast`` compares the bytes.
_PACK_OPTIONS = (
    ormsgpack.OPT_NON_STR_KEYS
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_UUID
    | ormsgpack.OPT_REPLACE_SURROGATES
)


class _NotPlain(Exception):
    """A field holds something the serializer would convert (a model, a datetime...)."""


def _not_plain(value: Any) -> Any:
    raise _NotPlain


def _plain_dump(cls: type) -> bool:
    """Whether ``model_dump()`` of an instance of ``cls`` is just its fields as they are held:
    LangChain's own message classes, none overriding the dump (a briefing kept out of
    checkpoints does), with no computed, excluded or custom-serialised field."""
    decorators = cls.__pydantic_decorators__  # type: ignore[attr-defined]
    return (
        cls.__module__.startswith("langchain_core.messages.")
        and cls.model_dump is BaseModel.model_dump  # type: ignore[attr-defined]
        and not cls.model_computed_fields  # type: ignore[attr-defined]
        and not any(f.exclude for f in cls.model_fields.values())  # type: ignore[attr-defined]
        and not decorators.field_serializers
        and not decorators.model_serializers
    )


def _message_classes() -> frozenset[type]:
    import langchain_core.messages as messages

    found = (getattr(messages, name) for name in dir(messages))
    return frozenset(
        c for c in found if isinstance(c, type) and issubclass(c, BaseMessage) and _plain_dump(c)
    )


# Exact classes only: a subclass (a user's, or the hooks' briefing) goes through the serializer.
_PLAIN_DUMP = _message_classes()


def _message_bytes(message: BaseMessage) -> bytes | None:
    """The bytes LangGraph's serializer makes of ``message``, or None when only it can.

    It packs ``(module, class, message.model_dump(), "model_validate_json")`` as its pydantic
    extension. Recording a turn spent most of its serialisation in that ``model_dump``: 4.5 of
    7 µs for an AI message with a tool call here. For a message whose fields hold only what
    msgpack packs as it is (text, numbers, lists, dicts), the dump is those fields themselves,
    so they are packed straight from the instance. Anything the dump would convert (a model
    in ``additional_kwargs``, a datetime) stops the packing, and the caller asks the
    serializer: the bytes are the same either way, so ids derived from them do not change.
    """
    fields = message.__dict__
    cls = type(message)
    if len(fields) != len(cls.model_fields):  # an attribute set around pydantic
        return None
    extra = message.__pydantic_extra__
    if extra:
        fields = {**fields, **extra}
    try:
        inner = ormsgpack.packb(
            (cls.__module__, cls.__name__, fields, "model_validate_json"),
            default=_not_plain,
            option=_PACK_OPTIONS,
        )
    except (_NotPlain, ormsgpack.MsgpackEncodeError, TypeError):
        return None
    return ormsgpack.packb(ormsgpack.Ext(EXT_PYDANTIC_V2, inner))


def loads_typed(type_: str, data: bytes) -> Any:
    return _serde.loads_typed((type_, bytes(data)))


def loads_fields(type_: str, data: bytes) -> Any:
    """Like ``loads_typed``, but a pydantic model (a LangChain message among them) comes back as
    the dict of its fields as recorded, not rebuilt and re-validated: several times cheaper, for
    readers that only look at many records (the briefing reads dozens of turns per model call)."""
    if type_ != "msgpack":
        return loads_typed(type_, data)
    return ormsgpack.unpackb(bytes(data), ext_hook=_fields_hook, option=ormsgpack.OPT_NON_STR_KEYS)


def _fields_hook(code: int, raw: bytes) -> Any:
    if code == EXT_PYDANTIC_V2:  # (module, class, fields, method)
        return ormsgpack.unpackb(raw, ext_hook=_fields_hook, option=ormsgpack.OPT_NON_STR_KEYS)[2]
    # Anything else (Decimal, datetime, ...) is rebuilt by LangGraph's serializer, as recorded.
    return _serde.loads_typed(("msgpack", ormsgpack.packb(ormsgpack.Ext(code, raw))))


def loads_record(type_: str, data: bytes) -> Any:
    """Like ``loads_typed``, but a LangChain message comes back through ``model_construct``:
    the same message, without pydantic re-validating fields that were validated when it was
    recorded (the repeat lookup rebuilds a ``ToolMessage`` on every replayed call). Any other
    model or type goes through LangGraph's serializer exactly as ``loads_typed`` does."""
    if type_ != "msgpack":
        return loads_typed(type_, data)
    return ormsgpack.unpackb(bytes(data), ext_hook=_record_hook, option=ormsgpack.OPT_NON_STR_KEYS)


_MESSAGE_CLASSES: dict[tuple[str, str], type[BaseMessage] | None] = {}


def _message_class(module: str, name: str) -> type[BaseMessage] | None:
    key = (module, name)
    if key not in _MESSAGE_CLASSES:
        cls = None
        # Only LangChain's own message classes: anything else keeps the serializer's checks.
        if module.startswith("langchain_core.messages"):
            found = getattr(importlib.import_module(module), name, None)
            if isinstance(found, type) and issubclass(found, BaseMessage):
                cls = found
        _MESSAGE_CLASSES[key] = cls
    return _MESSAGE_CLASSES[key]


def _record_hook(code: int, raw: bytes) -> Any:
    if code == EXT_PYDANTIC_V2:  # (module, class, fields, method)
        tup = ormsgpack.unpackb(raw, ext_hook=_record_hook, option=ormsgpack.OPT_NON_STR_KEYS)
        cls = _message_class(tup[0], tup[1])
        if cls is not None and isinstance(tup[2], dict):
            return cls.model_construct(**tup[2])
    return _serde.loads_typed(("msgpack", ormsgpack.packb(ormsgpack.Ext(code, raw))))


def dump_json(value: Any, *, what: str = "value") -> str:
    """JSON text of an item value; refuses what JSON or PostgreSQL's jsonb cannot hold."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError as exc:
        raise RecallError(
            f"{what} must be JSON-serialisable (dict, list, str, int, float, bool, None): {exc}. "
            "Convert it first, e.g. str() a datetime or .model_dump() a model.",
            code="invalid_value",
        ) from exc
    if "\\u0000" in text:
        # jsonb cannot store NUL; refuse on SQLite too so both backends accept the same data.
        raise RecallError(
            f"{what} contains a NUL character (\\x00), which JSON stores cannot hold; strip it "
            "or store the data as a record (store.record / an output).",
            code="invalid_value",
        )
    # orjson writes NaN and infinities as null: the value would come back changed. They only
    # matter where the text has a null, so the common case pays nothing.
    if "null" in text and _has_non_finite(value):
        raise RecallError(
            f"{what} contains NaN or an infinity, which JSON cannot hold (it would come back as "
            "None); store None or a string instead.",
            code="invalid_value",
        )
    return text


def _has_non_finite(value: Any) -> bool:
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
    return False


def load_json(text: Any) -> Any:
    if isinstance(text, (dict, list)):  # psycopg already decoded jsonb
        return text
    return orjson.loads(text)
