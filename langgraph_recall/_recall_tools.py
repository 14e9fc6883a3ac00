"""The model's own tools for keeping its records: working state, milestones, pointers, outputs.

Their schemas are sent with every model call, so names and descriptions are short (measured in
``tests/test_briefing_tools.py``). Each tool finds the store and the agent from the running
graph (the ``ToolRuntime`` that ToolNode, DurableToolNode and ``create_agent`` inject; it is not
part of the schema the model sees), and answers bad arguments with a message the model can act
on instead of an exception. They are ``pure`` (no side effect outside the agent's own records),
so the durable tool node runs them without an action record: ``tool.metadata["recall_class"]``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.prebuilt import ToolRuntime

from ._briefing import RECALL_TOOL_NAMES
from ._briefing_lines import TURN_REF
from ._briefing_outcomes import call_outcomes
from ._context import agent_id_of, store_of
from ._errors import RecallError
from ._render import call_text
from .store._ids import check_id
from .store._records import agent_ns, starts_fresh
from .store._transcript import content_text
from .tools._classes import CLASS_KEY  # where the durable tool node reads a tool's class

__all__ = ["recall_tools"]

_CHUNK = 4000  # characters fetch_output returns per call: about 1,000 tokens


def _where(runtime: ToolRuntime | None) -> tuple[Any, str]:
    """The store and agent of the running graph (the injected runtime, else the context)."""
    config = getattr(runtime, "config", None)
    if config is None:
        from langgraph.config import get_config

        try:
            config = get_config()
        except RuntimeError:
            config = None
    return store_of(config, runtime, None), agent_id_of(config)


def _fail(err: RecallError) -> ToolException:
    return ToolException(f"Error: {err}")


def update_working_state(
    runtime: ToolRuntime,
    goal: str = "",
    plan: str = "",
    progress: str = "",
    decisions: str = "",
    notes: str = "",
) -> str:
    fields = {
        k: v
        for k, v in (
            ("goal", goal),
            ("plan", plan),
            ("progress", progress),
            ("decisions", decisions),
            ("notes", notes),
        )
        if v.strip()
    }
    if not fields:
        raise ToolException(
            "Error: nothing to save. Pass at least one of goal, plan, progress, decisions, notes."
        )
    store, agent = _where(runtime)
    try:
        # Read first only to tell the model what its update did: the store decides the same
        # way (``starts_fresh``) inside its own transaction.
        fresh = "goal" in fields and starts_fresh(store.working_state(agent), fields, None)
        store.update_working_state(agent, **fields)
    except RecallError as err:
        raise _fail(err) from err
    saved = "saved: " + ", ".join(fields)
    if fresh:
        saved += " (a new goal: the previous task's fields were cleared)"
    return saved


def milestone(runtime: ToolRuntime, text: str) -> str:
    if not text.strip():
        raise ToolException("Error: text is empty. Say in one line what was finished.")
    store, agent = _where(runtime)
    try:
        store.milestone(agent, text.strip())
    except RecallError as err:
        raise _fail(err) from err
    return "milestone saved"


def set_pointer(runtime: ToolRuntime, name: str, target: str, note: str = "") -> str:
    if not name.strip() or not target.strip():
        raise ToolException(
            "Error: give a short name and a target (a path, URL, branch or ticket id)."
        )
    store, agent = _where(runtime)
    try:
        store.set_pointer(agent, name.strip(), target.strip(), note.strip() or None)
    except RecallError as err:
        raise _fail(err) from err
    return f"pointer {name.strip()!r} saved"


def _turn_text(store: Any, agent: str, ref: str) -> str | None:
    """The whole text of the agent's turn ``turn-<seq>`` (a ref the briefing gives a turn it
    cut), or None when there is no such turn."""
    seq = ref.removeprefix(TURN_REF)
    # ASCII digits only (int() refuses some that isdigit() takes), within a turn number's range
    # (a database integer): anything else is no turn, said as a tool error, never raised.
    if not (seq.isascii() and seq.isdigit()) or not 0 < int(seq) < 2**62:
        return None
    page, _ = store.turn_page(agent, 1, before=int(seq) + 1)
    if not page or page[0].seq != int(seq):
        return None
    view = page[0]
    fields = view.fields if isinstance(view.fields, dict) else {}
    if view.output_ref:
        text = str(store.fetch_output(view.output_ref))
    else:
        text = content_text(fields.get("content", ""))
    # An assistant turn's calls are part of it (a turn of many calls is the one the briefing
    # cuts to fit): each on a line of its own, written as the briefing writes it, its
    # arguments whole, and followed by its outcome as the briefing's line would be.
    calls = [c for c in fields.get("tool_calls") or () if isinstance(c, dict)]
    said = call_outcomes(store, agent, [view]).get(view.seq, {})
    lines = [
        "called "
        + call_text(str(c.get("name")), c.get("args") or {}, max_arg=sys.maxsize)
        + said.get(str(c.get("id")), "")
        for c in calls
    ]
    return "\n".join([text, *lines] if text else lines)


def fetch_output(runtime: ToolRuntime, ref: str, offset: int = 0) -> str:
    ref = ref.strip().strip("\"'")
    if offset < 0:
        raise ToolException("Error: offset must be 0 or more.")
    store, agent = _where(runtime)
    try:  # the identifier rule (``store._ids``), as a message the model can act on
        check_id("ref", ref, write=False, hint="use a ref exactly as the briefing shows it")
    except RecallError as err:
        raise _fail(err) from err
    if ref.startswith(TURN_REF):
        whole = _turn_text(store, agent, ref)
        if whole is None:
            raise ToolException(
                f"Error: no turn {ref!r} is recorded for this agent. Use a ref exactly as the "
                "briefing shows it."
            )
        if whole and offset >= len(whole):
            raise ToolException(
                f"Error: offset {offset} is past the end; the turn has {len(whole)} chars."
            )
        return _chunk(ref, whole[offset : offset + _CHUNK], offset, len(whole))
    # Outputs are addressed by content hash; only the agent's own are readable from here.
    item = store.get(agent_ns(agent, "outputs"), ref)
    if item is None:
        raise ToolException(
            f"Error: no stored output {ref!r} for this agent. Use a ref exactly as the briefing "
            'shows it, e.g. fetch_output(ref="out-…").'
        )
    size = int(item.value.get("size", 0))
    if size and offset >= size:
        raise ToolException(f"Error: offset {offset} is past the end; the output has {size} chars.")
    try:
        text = store.fetch_output(ref, offset, _CHUNK)
    except RecallError as err:
        raise _fail(err) from err
    return _chunk(ref, text, offset, size)


def _chunk(ref: str, text: str, offset: int, size: int) -> str:
    end = offset + len(text)
    more = f'; more: fetch_output(ref="{ref}", offset={end})' if end < size else ""
    return f"[{ref} chars {offset}-{end} of {size}{more}]\n{text}"


_DESCRIPTIONS: dict[str, str] = {
    "update_working_state": (
        "Save your working state; pass only what changed. A new goal clears the old fields."
    ),
    "milestone": "Record a finished milestone in one line.",
    "set_pointer": "Remember where work lives (file, branch, URL, ticket) under a short name.",
    "fetch_output": "Read a stored output by its ref (from the briefing), 4000 chars from offset.",
}
_FUNCTIONS: dict[str, Callable[..., str]] = {
    "update_working_state": update_working_state,
    "milestone": milestone,
    "set_pointer": set_pointer,
    "fetch_output": fetch_output,
}
assert set(_FUNCTIONS) == RECALL_TOOL_NAMES


def _make(name: str) -> BaseTool:
    fn = _FUNCTIONS[name]

    async def run_async(**kwargs: Any) -> str:
        # The store's sync calls in a worker thread (copying the context, so the graph's
        # config stays reachable): the same logic as the sync tool, off the event loop.
        return await asyncio.to_thread(fn, **kwargs)

    run_async.__signature__ = _signature(fn)  # type: ignore[attr-defined]
    run_async.__annotations__ = fn.__annotations__
    tool = StructuredTool.from_function(
        func=fn,
        coroutine=run_async,
        name=name,
        description=_DESCRIPTIONS[name],
        handle_tool_error=True,
    )
    tool.metadata = {CLASS_KEY: "pure"}
    return tool


def _signature(fn: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(fn)


def recall_tools() -> list[BaseTool]:
    """The tools a model uses to keep its own records, in the order the briefing mentions them.

    ``update_working_state(goal, plan, progress, decisions, notes)`` (a goal replacing a
    different one starts a fresh working state: the fields not given with it are cleared),
    ``milestone(text)``, ``set_pointer(name, target, note)`` and ``fetch_output(ref, offset)``.
    Each finds the store and agent from the running graph (compile the graph with a
    ``RecallStore``).
    They are ``pure`` tools: ``tool.metadata["recall_class"] == "pure"``.
    """
    return [_make(name) for name in _FUNCTIONS]
