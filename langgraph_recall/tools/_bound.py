"""The call an attempt recorded, checked again where the tool is invoked.

The durable wrapper records a call's intent (and spends its approval) for exact canonical
arguments, then hands the call down the rest of the wrapper chain: a user's
``wrap_tool_call`` inside ``DurableToolNode``, or the middleware listed after
``RecallMiddleware``. A wrapper there that changes the arguments (one that takes a reviewer's
edit from the state, as HumanInTheLoopMiddleware does) would run another call than the one
recorded and approved: a "yes" to ``pay(10, alice)`` ran ``pay(9999, mallory)`` while the
records said alice. So the innermost point before the tool (``DurableToolNode``'s argument
injection; ``KeyedTool`` for ``create_agent``) compares what is about to run with what was
recorded, and refuses anything else: nothing runs, and the durable wrapper closes the attempt
as not started and tells the model.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from .._errors import ApprovalMismatch, RecallError
from ._canonical import args_digest, canonical_args, given_text

_current: contextvars.ContextVar[BoundCall | None] = contextvars.ContextVar(
    "recall_bound_call", default=None
)


class BoundCall:
    """What a durable attempt recorded: the tool, the digest of its canonical arguments, and
    the arguments' text as handed down (so an unchanged call is told apart cheaply)."""

    __slots__ = ("digest", "gated", "injected", "refused", "schema", "text", "tool")

    def __init__(
        self,
        tool: str,
        digest: str,
        text: str | None,
        schema: Any,
        injected: frozenset[str],
        gated: bool,
    ) -> None:
        self.tool = tool
        self.digest = digest
        self.text = text
        self.schema = schema
        self.injected = injected
        self.gated = gated
        # Set when a check refused the call: the durable wrapper reads it, whatever a wrapper
        # in between (or ToolNode's handle_tool_errors) made of the exception.
        self.refused: RecallError | None = None

    def check(self, name: str, args: Any, *, model_fields_only: bool = False) -> None:
        """Raise unless ``name(args)`` is the recorded call: ``ApprovalMismatch`` for an
        approved call, else ``RecallError`` with code ``args_changed``.

        ``model_fields_only``: ``args`` carry injected values too (a tool's invocation input):
        only the fields the model sees are compared.
        """
        if self.refused is not None:  # a retrying wrapper: refused again, never run
            raise self.refused
        if name == self.tool and isinstance(args, Mapping):
            given = _model_facing(self.schema, args) if model_fields_only else args
            if self.text is not None and given_text(given) == self.text:
                return
            if args_digest(name, canonical_args(self.schema, given, self.injected)) == self.digest:
                return
        what = "approved and recorded" if self.gated else "recorded"
        error = ApprovalMismatch if self.gated else RecallError
        self.refused = error(
            f"{self.tool}'s call was changed after its intent was {what}: a wrapper inside the "
            f"durable one (a wrap_tool_call of DurableToolNode, or a middleware listed after "
            f"RecallMiddleware) handed the tool {name} with other arguments. Nothing ran. A "
            "wrapper that changes a call's arguments must run before the durable wrapper "
            "(list that middleware before RecallMiddleware), so the intent and any approval "
            "bind to the call that runs",
            code="approval_mismatch" if self.gated else "args_changed",
            tool=self.tool,
        )
        raise self.refused


def current_bound() -> BoundCall | None:
    """The recorded call of the durable attempt running now (None outside one, or pure)."""
    return _current.get()


def set_bound(bound: BoundCall | None) -> contextvars.Token[BoundCall | None]:
    return _current.set(bound)


def reset_bound(token: contextvars.Token[BoundCall | None]) -> None:
    _current.reset(token)


def _model_facing(schema: Any, args: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = getattr(schema, "model_fields", None)
    if not isinstance(fields, Mapping):
        return args
    return {k: v for k, v in args.items() if k in fields}
