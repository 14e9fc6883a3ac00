"""What the store refuses before any transaction: operations LangGraph's stores would refuse
(namespaces, labels, keys), writes to the records' own namespaces, and a ``record()`` given
something other than a list of messages. Each refusal says what to pass instead."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from .._errors import InvalidNamespace, RecallError
from . import _records
from ._ids import check_id, check_label, check_namespace_size

_BIGINT = 2**63 - 1  # the largest LIMIT or OFFSET either engine takes


def validated(ops: Iterable[Op]) -> list[Op]:
    ops = list(ops)
    for op in ops:
        validate_op(op)
    return ops


def validate_op(op: Op) -> None:
    """Check an op as LangGraph's stores do, whether it came through ``put()`` or ``batch()``.

    Labels are stored joined by ".", so an unchecked label such as "a.b" in a GetOp, SearchOp
    or delete would address the namespace ("a", "b"). Only writes refuse the "langgraph" root.
    """
    if isinstance(op, (GetOp, PutOp)):
        write = isinstance(op, PutOp) and op.value is not None
        validate_labels(op.namespace)
        if isinstance(op, PutOp):
            validate_minutes("ttl", op.ttl)
        # A key is any text LangGraph takes ("" too), within the identifier rule (``_ids``);
        # only a write checks its length, so an item written before stays readable.
        check_id("key", op.key, write=write, blank_ok=True, hint=KEY_HINT)
        if isinstance(op, PutOp):
            _records.refuse_record_write(op.namespace, str(op.key), delete=op.value is None)
            if op.value is not None:
                validate_namespace(op.namespace)
    elif isinstance(op, SearchOp):
        validate_labels(op.namespace_prefix)
        validate_count("limit", op.limit)
        validate_count("offset", op.offset)
    elif isinstance(op, ListNamespacesOp):
        for cond in op.match_conditions or ():
            validate_labels(cond.path)
        validate_count("limit", op.limit)
        validate_count("offset", op.offset)


KEY_HINT = "use text of at most 512 bytes, e.g. a UUID or a hash of a longer name"


def validate_count(name: str, value: Any) -> None:
    """A search's or listing's ``limit`` or ``offset``. Unchecked, SQLite read -1 as "no limit"
    and ignored a negative offset, PostgreSQL refused them with advice about NUL characters,
    and a string, a float or a bool was taken by one engine and refused by the other raw."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _BIGINT:
        raise RecallError(
            f"{name} must be a whole number from 0 to 2**63-1, got {value!r}",
            code="invalid_value",
        )


def validate_minutes(name: str, value: Any) -> None:
    """A TTL in minutes: None (never expires) or a positive, finite number. Unchecked, a string
    failed as a raw TypeError and a negative, zero, NaN or infinite one was stored (an item
    expired at once, or one that PostgreSQL and SQLite each expired differently)."""
    if value is None:
        return
    try:
        minutes = float(value) if isinstance(value, (int, float)) else math.nan
    except OverflowError:  # an int past any float
        minutes = math.inf
    if isinstance(value, bool) or not math.isfinite(minutes) or minutes <= 0:
        raise RecallError(
            f"{name} must be a positive, finite number of minutes (or None: never expires), "
            f"got {value!r}",
            code="invalid_value",
        )


def validate_labels(namespace: tuple[str, ...]) -> None:
    if isinstance(namespace, str):
        # Iterated as it is, "docs" was the namespace ("d", "o", "c", "s").
        raise InvalidNamespace(
            f"a namespace is a tuple of labels: write ({namespace!r},), not {namespace!r}"
        )
    for label in namespace:
        check_label(namespace, label)


def validate_namespace(namespace: tuple[str, ...]) -> None:
    if not namespace:
        raise InvalidNamespace("Namespace cannot be empty.")
    validate_labels(namespace)
    if namespace[0] == "langgraph":
        raise InvalidNamespace(f'Root label for namespace cannot be "langgraph": {namespace!r}')
    check_namespace_size(namespace)


def message_list(messages: Any) -> list[BaseMessage]:
    """``record``'s messages as a list: a lone message or a dict is refused by name (``list()``
    of one gave a list of its fields, and an error about tuples)."""
    if isinstance(messages, (BaseMessage, dict, str, bytes)) or messages is None:
        raise RecallError(
            f"record() takes a list of LangChain messages, got {type(messages).__name__}; "
            "wrap a single message in a list",
            code="invalid_value",
        )
    try:
        return list(messages)
    except TypeError:
        raise RecallError(
            f"record() takes a list of LangChain messages, got {type(messages).__name__}",
            code="invalid_value",
        ) from None


def validate_ttl_config(ttl: Any) -> None:
    """``RecallStore.open``'s ``ttl=``, checked before the database is opened: a bad default
    failed at the first ``put`` instead, and a bad sweep interval killed the sweeper thread."""
    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise RecallError(
            f"ttl= is a TTLConfig dict (default_ttl, refresh_on_read, sweep_interval_minutes), "
            f"got {type(ttl).__name__}",
            code="invalid_value",
        )
    validate_minutes("ttl['default_ttl']", ttl.get("default_ttl"))
    validate_minutes("ttl['sweep_interval_minutes']", ttl.get("sweep_interval_minutes"))
