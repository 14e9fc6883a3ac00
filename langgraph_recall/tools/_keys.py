"""The idempotency key, and the three ways it reaches a tool.

The key of a call is its action key: the same on every retry, resume and re-run after a crash
or an ``interrupt()``. A tool gets it

1. as a hidden parameter the model never sees and cannot forge: a parameter annotated
   ``IdempotencyKey`` (``key: IdempotencyKey`` or ``Annotated[str, IdempotencyKey]``), or a
   parameter named ``idempotency_key`` annotated ``Annotated[str, InjectedToolArg]``;
2. from ``current_idempotency_key()`` anywhere below the tool (a context variable);
3. from ``runtime.config["configurable"]["recall_idempotency_key"]`` for tools that take a
   ``ToolRuntime``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, get_args, get_origin, get_type_hints

from langchain_core.tools import BaseTool, InjectedToolArg
from langchain_core.tools.base import _DirectlyInjectedToolArg

from ._bound import current_bound

CONFIG_KEY = "recall_idempotency_key"
CONFIG_ACTION = "recall_action_id"
KEY_PARAM = "idempotency_key"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "recall_idempotency_key", default=None
)


class IdempotencyKey(str, InjectedToolArg, _DirectlyInjectedToolArg):
    """The call's idempotency key, injected by the durable tool node; hidden from the model.

    Annotate a tool parameter with it (``key: IdempotencyKey`` or
    ``Annotated[str, IdempotencyKey]``) and pass the value on to the API that performs the side
    effect (an ``Idempotency-Key`` header, a client token). It is identical on every retry and
    resume of the same call, and a value the model puts in its arguments is discarded.
    """

    __slots__ = ()


def current_idempotency_key() -> str | None:
    """The idempotency key of the durable tool call running now (None outside one)."""
    return _current.get()


@contextmanager
def key_scope(key: str | None) -> Iterator[None]:
    token = _current.set(key)
    try:
        yield
    finally:
        _current.reset(token)


def _is_key_annotation(name: str, hint: Any) -> bool:
    if isinstance(hint, type) and issubclass(hint, IdempotencyKey):
        return True
    if get_origin(hint) is None:
        return False
    for meta in get_args(hint)[1:]:
        if meta is IdempotencyKey or isinstance(meta, IdempotencyKey):
            return True
        if name == KEY_PARAM and (
            meta is InjectedToolArg or type(meta) is InjectedToolArg  # the plain marker only
        ):
            return True
    return False


def key_parameters(tool: BaseTool) -> tuple[str, ...]:
    """Names of the tool's parameters that receive the idempotency key."""
    hints: dict[str, Any] = {}
    func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if func is not None:
        try:
            hints.update(get_type_hints(func, include_extras=True))
        except Exception:  # unresolvable forward references: fall back to the schema
            pass
    schema = tool.args_schema if isinstance(tool.args_schema, type) else None
    if schema is not None:
        for name, field in getattr(schema, "model_fields", {}).items():
            hint = field.annotation
            if field.metadata:
                hint = _annotated(hint, field.metadata)
            hints.setdefault(name, hint)
    return tuple(sorted(n for n, h in hints.items() if n != "return" and _is_key_annotation(n, h)))


class KeyedTool(BaseTool):
    """``tool`` with its idempotency-key parameters filled in at invocation, and checked to run
    as its durable call recorded it.

    For tool nodes we do not build (``create_agent``'s): ToolNode strips every injected
    parameter the model sent, then invokes this, which refuses arguments other than the ones
    the call's intent (and approval) recorded (``_bound``: a middleware listed after
    RecallMiddleware may have changed them), adds the key of the call running now
    (``current_idempotency_key()``, set by the durable wrapper around the call) and calls
    ``tool``. Built once per tool.
    """

    inner: BaseTool
    params: tuple[str, ...]

    @classmethod
    def wrap(cls, tool: BaseTool, params: tuple[str, ...]) -> KeyedTool:
        return cls(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            response_format=tool.response_format,
            metadata=tool.metadata,
            inner=tool,
            params=params,
        )

    def _filled(self, tool_input: Any) -> Any:
        bound = current_bound()
        if bound is not None and isinstance(tool_input, dict):
            args = tool_input.get("args") if tool_input.get("type") == "tool_call" else tool_input
            bound.check(self.name, args)
        if not self.params:
            return tool_input
        key = current_idempotency_key()
        if key is None:
            return tool_input  # outside a durable call: the tool's own validation complains
        value = IdempotencyKey(key)
        if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call":
            return {
                **tool_input,
                "args": {**tool_input["args"], **dict.fromkeys(self.params, value)},
            }
        if isinstance(tool_input, dict):
            return {**tool_input, **dict.fromkeys(self.params, value)}
        return tool_input

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.inner.invoke(self._filled(input), config, **kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return await self.inner.ainvoke(self._filled(input), config, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke delegates
        raise NotImplementedError("KeyedTool delegates invoke/ainvoke to the wrapped tool")


def _annotated(hint: Any, metadata: list[Any]) -> Any:
    from typing import Annotated

    return Annotated[(hint, *metadata)]  # type: ignore[valid-type]
