"""Which tools a durable node runs: their classes, which need a person's approval, and their
undo functions, checked when the node is built (``DurableToolNode``) or when a model request
first offers them (``RecallMiddleware``, whose tools ``create_agent`` hands over only then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool

from .._errors import RecallError, UnclassifiedTool
from ._classes import ToolClass, classify, declared_approval, declared_class

if TYPE_CHECKING:
    from ..store import RecallStore


class ToolSet:
    """The tools, their classes and approvals, and the undo functions of one durable node."""

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]] = (),
        *,
        classes: Mapping[str, str] | None = None,
        approve: Iterable[str] = (),
        undo: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self._given_classes, self._given_approve, given_undo = normalize_options(
            classes, approve, undo
        )
        self._classes: dict[str, ToolClass] = {}
        self._gated: frozenset[str] = frozenset()
        self._tools: dict[str, Any] = {}
        self._offered: set[str] = set()  # every tool a model request offered (check_offered)
        # Names whose tool objects were read for a class and an approval of their own.
        self._declared: set[str] = set()
        self.undo: dict[str, Callable[..., Any]] = given_undo
        if tools:
            self.check_tools(tools)
        else:
            # Tools not known yet (a middleware before create_agent builds its node): check the
            # given classes now, and refuse unclassified tools when they are called.
            from ._classes import _check_class

            for name, klass in self._given_classes.items():
                _check_class(f"tool {name!r}", klass)
            self._classes = dict(self._given_classes)  # type: ignore[arg-type]
            self._gated = frozenset(self._given_approve)
            self._refuse_undo_of_pure()

    def check_tools(self, tools: Sequence[BaseTool | Callable[..., Any]]) -> None:
        """Classify ``tools`` (raising ``UnclassifiedTool`` naming every one without a class)."""
        named: dict[str, Any] = dict(self._tools)
        for t in tools:
            named[_tool_name(t)] = t
        self._classes, self._gated = classify(named, self._given_classes, self._given_approve)
        unknown = sorted(set(self.undo) - set(named))
        if unknown:
            raise RecallError(
                f"undo= names tools that are not given: {', '.join(unknown)}", code="invalid_value"
            )
        self._refuse_undo_of_pure()
        self._tools = named

    def _refuse_undo_of_pure(self) -> None:
        # A pure tool's calls leave no action behind, so store.undo() would never find one to
        # reverse: the undo function given for it would silently never run.
        pure = sorted(n for n in self.undo if self._classes.get(n) == "pure")
        if pure:
            raise RecallError(
                f"undo= names pure tools: {', '.join(pure)}. A pure tool's calls are not recorded, "
                "so there is nothing to undo; if the tool changes something, class it "
                "'external' or 'idempotent' so its calls are recorded and can be undone",
                code="invalid_value",
                tools=pure,
            )

    def check_offered(self, tools: Iterable[Any]) -> None:
        """Refuse, before the model is asked, tools offered to it that have no class
        (``create_agent`` hands the middleware its tools only in its requests): otherwise the
        refusal came at the tool call, after the model had asked for it."""
        missing = []
        offered: set[str] = set()
        for tool in tools:
            if not isinstance(tool, BaseTool):
                continue  # a provider's built-in tool (a dict): it runs at the provider
            offered.add(tool.name)
            try:
                self._class_of(tool.name, tool)
            except UnclassifiedTool:
                missing.append(tool.name)
        self._offered |= offered
        # A name the model was never offered is a slip (approve=("pya",)): left alone it gated
        # nothing, and pay ran without asking. Refused before the model runs, like a tool with no
        # class. The union of every request's tools, so one that chose a few still passes.
        stray = sorted(
            set(self._given_classes).union(self._given_approve, self.undo) - self._offered
        )
        if stray and offered:
            raise RecallError(
                f"classes/approve/undo name tools the model is not offered: {', '.join(stray)} "
                f"(offered: {', '.join(sorted(self._offered))}), so the model was not called. "
                "Check the spelling; if another middleware picks the tools for each call, list "
                "RecallMiddleware before it in middleware=[...] so it sees them all.",
                code="invalid_value",
                tools=stray,
            )
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            raise UnclassifiedTool(
                f"tools {listed} have no class, so the model was not called; give each one "
                f'(classes={{"{missing[0]}": "external"}}, or "pure"/"idempotent")',
                tools=missing,
            )

    def tool_class(self, name: str) -> ToolClass | None:
        """The class of a tool by name (None when unknown)."""
        return self._classes.get(name)

    def needs_approval(self, name: str) -> bool:
        return name in self._gated

    @property
    def any_gated(self) -> bool:
        """Whether any tool needs approval (the set only grows, as classes are found)."""
        return bool(self._gated)

    def register_undo(self, store: RecallStore) -> None:
        """Make this node's undo functions known to ``store.undo`` (done on every call too).

        The node that ran last wins: a node built again with a fixed undo function (a
        notebook cell run again) replaces the one an earlier node registered."""
        store._undo_registry.update(self.undo)

    def _class_of(self, name: str, tool: Any) -> ToolClass:
        if tool is not None and name not in self._declared:
            # What the tool says of itself, read once per name: its class when classes= gave
            # none, and its approval whatever gave the class (with classes={"pay": ...} a
            # middleware once ignored @recall_class(..., approve=True), and pay ran unasked).
            found = declared_class(tool)
            if name not in self._classes and found in ("pure", "idempotent", "external"):
                self._classes[name] = found  # type: ignore[assignment]
            if name in self._classes and declared_approval(tool):
                self._gated = self._gated | {name}
            self._declared.add(name)
        klass = self._classes.get(name)
        if klass is None:
            raise UnclassifiedTool(
                f"tool {name!r} has no class, so it was not run; give it one "
                f'(classes={{"{name}": "external"}}, or "pure"/"idempotent")',
                tools=[name],
            )
        return klass


def normalize_options(
    classes: Any, approve: Any, undo: Any
) -> tuple[dict[str, str], tuple[str, ...], dict[str, Callable[..., Any]]]:
    """``classes``, ``approve`` and ``undo`` checked and as a dict, a tuple and a dict: each is
    read later, where a wrong kind failed far from the call that gave it (or, for ``approve``,
    gated nothing without a word)."""
    if classes is not None and not isinstance(classes, Mapping):
        raise RecallError(
            'classes= maps tool names to "pure", "idempotent" or "external", e.g. '
            f'{{"send_email": "external"}}; got {type(classes).__name__}',
            code="invalid_value",
        )
    if approve is None:
        approve = ()
    elif isinstance(approve, str):  # one tool's name: tuple() of it gave ("p", "a", "y")
        approve = (approve,)
    elif isinstance(approve, Iterable):
        approve = tuple(approve)
    else:
        raise RecallError(
            f'approve= names the tools that need a person\'s approval, e.g. ("pay",); got '
            f"{type(approve).__name__}",
            code="invalid_value",
        )
    if undo is not None and not isinstance(undo, Mapping):
        raise RecallError(
            f"undo= maps tool names to undo functions; got {type(undo).__name__}",
            code="invalid_value",
        )
    for option, names in (("classes", classes or {}), ("approve", approve), ("undo", undo or {})):
        for name in names:
            if not isinstance(name, str):
                raise RecallError(
                    f"{option}= names tools by their names (str); got {name!r}",
                    code="invalid_value",
                )
    for name, fn in (undo or {}).items():
        if not callable(fn):
            raise RecallError(
                f"undo={{{name!r}: ...}} must be a function, got {type(fn).__name__}",
                code="invalid_value",
            )
    return dict(classes or {}), approve, dict(undo or {})


def check_resolver(resolver: Any) -> None:
    if resolver is not None and not callable(resolver):
        raise RecallError(
            "resolver= is a function of an open Action returning ActionEnd(...) or None; got "
            f"{type(resolver).__name__}",
            code="invalid_value",
        )


def _tool_name(tool: Any) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", repr(tool)))
