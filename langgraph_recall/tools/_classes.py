"""Tool classes: what may happen when a tool call is repeated.

``pure``        no side effect: runs every time, nothing is recorded.
``idempotent``  a side effect that is safe to repeat with the same idempotency key: recorded,
                and re-run with that key after a crash.
``external``    a side effect that must never be repeated blindly: recorded, and after a
                crash it is settled by a resolver or a person, never re-run.

A class comes from ``classes={"name": "external"}``, else from the tool itself
(``tool.metadata["recall_class"]``, which ``recall_class`` sets). A tool with no class is
refused when the node is built (by ``RecallMiddleware``, at the first model call that offers
it), with every unclassified tool named at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, cast

from langchain_core.tools import BaseTool

from .._errors import RecallError, UnclassifiedTool

ToolClass = Literal["pure", "idempotent", "external"]
TOOL_CLASSES: tuple[ToolClass, ...] = ("pure", "idempotent", "external")

CLASS_KEY = "recall_class"
APPROVE_KEY = "recall_approve"

T = TypeVar("T")


def recall_class(klass: ToolClass, *, approve: bool = False) -> Callable[[T], T]:
    """Decorator that gives a tool (or a plain function) its class, and optionally gates it.

    Put it above ``@tool``::

        @recall_class("external", approve=True)
        @tool
        def pay(amount: Decimal, to: str) -> str: ...

    Raises:
        RecallError: ``invalid_value`` for a class other than pure, idempotent or external.
    """
    _check_class("recall_class()", klass)

    def mark(obj: T) -> T:
        if isinstance(obj, BaseTool):
            obj.metadata = {**(obj.metadata or {}), CLASS_KEY: klass, APPROVE_KEY: approve}
        else:
            obj.__recall_class__ = klass  # type: ignore[attr-defined]
            obj.__recall_approve__ = approve  # type: ignore[attr-defined]
        return obj

    return mark


def _check_class(where: str, klass: Any) -> None:
    if klass not in TOOL_CLASSES:
        raise RecallError(
            f"{where}: {klass!r} is not a tool class; use 'pure' (no side effects), "
            "'idempotent' (safe to repeat with the same key) or 'external' (never repeated)",
            code="invalid_value",
        )


def declared_class(tool: Any) -> str | None:
    """The class a tool carries itself (metadata, or the attribute ``recall_class`` sets)."""
    meta = getattr(tool, "metadata", None) or {}
    if CLASS_KEY in meta:
        return cast(str, meta[CLASS_KEY])
    for obj in (tool, getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        found = getattr(obj, "__recall_class__", None)
        if found is not None:
            return cast(str, found)
    return None


def declared_approval(tool: Any) -> bool:
    meta = getattr(tool, "metadata", None) or {}
    if meta.get(APPROVE_KEY):
        return True
    return any(
        getattr(obj, "__recall_approve__", False)
        for obj in (tool, getattr(tool, "func", None), getattr(tool, "coroutine", None))
    )


def classify(
    tools: Mapping[str, Any],
    classes: Mapping[str, str] | None,
    approve: Iterable[str],
) -> tuple[dict[str, ToolClass], frozenset[str]]:
    """Each tool's class and the set of tools that need a person's approval.

    ``tools`` maps names to tools (BaseTool or the function they came from).

    Raises:
        UnclassifiedTool: naming every tool that has no class.
        RecallError: ``invalid_value`` for an unknown class, or ``classes``/``approve`` naming a
            tool that is not given.
    """
    classes = dict(classes or {})
    approve = tuple(approve)
    if isinstance(approve, str):  # pragma: no cover - defensive: approve="pay"
        approve = (approve,)
    unknown = sorted(set(classes).union(approve) - set(tools))
    if unknown:
        raise RecallError(
            f"classes/approve name tools that are not given: {', '.join(unknown)}; "
            f"the tools are: {', '.join(sorted(tools)) or '(none)'}",
            code="invalid_value",
        )
    out: dict[str, ToolClass] = {}
    missing: list[str] = []
    for name, tool in tools.items():
        klass = classes.get(name) or declared_class(tool)
        if klass is None:
            missing.append(name)
            continue
        _check_class(f"tool {name!r}", klass)
        out[name] = cast(ToolClass, klass)
    if missing:
        example = ", ".join(f'"{n}": "external"' for n in missing[:3])
        raise UnclassifiedTool(
            f"{len(missing)} tool(s) have no class: {', '.join(missing)}. Give each one a class, "
            f"e.g. classes={{{example}}}: 'pure' (no side effects, runs every time), "
            "'idempotent' (safe to repeat with the same idempotency key) or 'external' "
            "(must never run twice). Nothing was built.",
            tools=missing,
        )
    gated = frozenset(approve).union(n for n, t in tools.items() if declared_approval(t))
    return out, gated
