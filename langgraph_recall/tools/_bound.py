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

try:  # pragma: no cover - the mark's name differs across langgraph versions
    from langgraph.errors import _INVALID_RESUME
except ImportError:  # pragma: no cover
    _INVALID_RESUME = "_langgraph_invalid_resume"

from .._errors import ApprovalMismatch, RecallError
from ._canonical import args_digest, canonical_args, given_text

_current: contextvars.ContextVar[BoundCall | None] = contextvars.ContextVar(
    "recall_bound_call", default=None
)


class BoundCall:
    """What a durable attempt recorded: the tool, its canonical arguments, and the given
    arguments' text as handed down (so an unchanged call is told apart cheaply).

    Only the arguments the model gives are compared: the tool's model-facing fields (or, for a
    schema that does not say, the keys the call was recorded with). What ToolNode injects
    (state, store, runtime) is not the call's, and a key the tool does not take is dropped
    before it runs anyway.
    """

    __slots__ = ("args", "gated", "injected", "keys", "refused", "schema", "text", "tool")

    def __init__(
        self,
        tool: str,
        args: Mapping[str, Any],
        text: str | None,
        schema: Any,
        injected: frozenset[str],
        gated: bool,
    ) -> None:
        self.tool = tool
        self.args = args
        self.text = text
        self.schema = schema
        self.injected = injected
        self.gated = gated
        self.keys = _model_keys(schema)
        # Set when a check refused the call: the durable wrapper reads it, whatever a wrapper
        # in between (or ToolNode's handle_tool_errors) made of the exception.
        self.refused: RecallError | None = None

    def check(self, name: str, args: Any) -> None:
        """Raise unless ``name(args)`` is the recorded call: ``ApprovalMismatch`` for an
        approved call, else ``RecallError`` with code ``args_changed``."""
        if self.refused is not None:  # a retrying wrapper: refused again, never run
            raise self.refused
        if name == self.tool and isinstance(args, Mapping):
            given = self._model_part(args)
            if self.text is not None and given_text(given) == self.text:
                return
            ran = args_digest(name, canonical_args(self.schema, given, self.injected))
            if ran == args_digest(name, self._model_part(self.args)):
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

    def _model_part(self, args: Mapping[str, Any]) -> Mapping[str, Any]:
        keys = self.keys if self.keys is not None else self.args
        if all(k in keys for k in args):
            return args
        return {k: v for k, v in args.items() if k in keys}


def current_bound() -> BoundCall | None:
    """The recorded call of the durable attempt running now (None outside one, or pure)."""
    return _current.get()


def set_bound(bound: BoundCall | None) -> contextvars.Token[BoundCall | None]:
    return _current.set(bound)


def reset_bound(token: contextvars.Token[BoundCall | None]) -> None:
    _current.reset(token)


def pass_through(error: BaseException) -> None:
    """Mark an ``InDoubt`` raised while a durable call runs so that ToolNode never answers it.

    With ``handle_tool_errors=True`` (or any setting that covers it) ToolNode made an error
    answer of it ("Please fix your mistakes"): the durable wrapper recorded the call failed, a
    charge that may have gone through read as not made, and the resolver was never asked. The
    mark is LangGraph's for an error no ``handle_tool_errors`` setting handles (given to a
    resume that does not fit its interrupt, as ``_approval`` does); the wrapper catches the
    ``InDoubt`` itself, so the mark goes no further.
    """
    if _current.get() is not None:
        setattr(error, _INVALID_RESUME, True)


def _model_keys(schema: Any) -> frozenset[str] | None:
    """The names of the arguments the model gives, from the tool's model-facing schema."""
    fields = getattr(schema, "model_fields", None)
    if fields is None:  # pydantic v1 (v2 warns on every read of __fields__, even when empty)
        fields = getattr(schema, "__fields__", None)
    if isinstance(fields, Mapping):
        return frozenset(fields)
    if isinstance(schema, Mapping) and isinstance(schema.get("properties"), Mapping):
        return frozenset(schema["properties"])
    return None
