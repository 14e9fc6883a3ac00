"""What the store refuses before any transaction: operations LangGraph's stores would refuse
(namespaces, labels, keys), writes to the records' own namespaces, and a ``record()`` given
something other than a list of messages. Each refusal says what to pass instead."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from .._errors import InvalidNamespace, RecallError
from . import _records


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
        validate_labels(op.namespace)
        if "\x00" in str(op.key):
            raise RecallError(
                f"item keys cannot contain NUL (\\x00): {op.key!r}", code="invalid_value"
            )
        if isinstance(op, PutOp):
            _records.refuse_record_write(op.namespace, str(op.key), delete=op.value is None)
            if op.value is not None:
                validate_namespace(op.namespace)
    elif isinstance(op, SearchOp):
        validate_labels(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        for cond in op.match_conditions or ():
            validate_labels(cond.path)


def validate_labels(namespace: tuple[str, ...]) -> None:
    if isinstance(namespace, str):
        # Iterated as it is, "docs" was the namespace ("d", "o", "c", "s").
        raise InvalidNamespace(
            f"a namespace is a tuple of labels: write ({namespace!r},), not {namespace!r}"
        )
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespace(
                f"Namespace labels must be non-empty strings without '.' or NUL: {namespace!r}"
            )


def validate_namespace(namespace: tuple[str, ...]) -> None:
    if not namespace:
        raise InvalidNamespace("Namespace cannot be empty.")
    validate_labels(namespace)
    if namespace[0] == "langgraph":
        raise InvalidNamespace(f'Root label for namespace cannot be "langgraph": {namespace!r}')


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
