"""Finding the agent, the thread, the store and the checkpointer from inside a running graph.

Every part (checkpointer, tool node, hooks, middleware, recall tools) resolves these the same
way, here: ``agent_id`` is ``configurable["agent_id"]``, defaulting to the thread id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import RecallError
from .store._records import check_agent_id

if TYPE_CHECKING:
    from .store import RecallStore

# LangGraph's internal configurable keys (private names, so looked up defensively).
try:  # pragma: no cover - import location differs across langgraph versions
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINTER,
        CONFIG_KEY_DURABILITY,
        CONFIG_KEY_RUNTIME,
    )
except ImportError:  # pragma: no cover
    CONFIG_KEY_CHECKPOINTER = "__pregel_checkpointer"
    CONFIG_KEY_DURABILITY = "__pregel_durability"
    CONFIG_KEY_RUNTIME = "__pregel_runtime"


def configurable(config: Any) -> dict[str, Any]:
    """The config's ``configurable`` dict itself, not a copy: read it, never change it.

    Not copied because every durable call and checkpoint looks it up several times, and the
    dict holds LangGraph's ~20 internal keys (copying was ~8 dict copies per tool call).
    """
    if not config:
        return {}
    return config.get("configurable") or {}  # type: ignore[no-any-return]


def thread_id_of(config: Any) -> str | None:
    tid = configurable(config).get("thread_id")
    return None if tid is None else str(tid)


def agent_id_of(config: Any) -> str:
    """``configurable["agent_id"]``, else the thread id; raises if neither is set."""
    conf = configurable(config)
    agent = conf.get("agent_id") or conf.get("thread_id")
    if not agent:
        raise RecallError(
            'no agent_id or thread_id in config; invoke with {"configurable": {"thread_id": "t-1", '
            '"agent_id": "my-agent"}}',
            code="invalid_value",
        )
    agent = str(agent)
    check_agent_id(agent)  # whitespace alone or a NUL: refused here as by every write
    return agent


def store_of(config: Any = None, runtime: Any = None, store: Any = None) -> RecallStore:
    """The RecallStore of the running graph: explicit, from the runtime, or from the config."""
    from langgraph.config import get_store

    from .store import RecallStore

    candidates = [store, getattr(runtime, "store", None)]
    if config is not None:
        rt = configurable(config).get(CONFIG_KEY_RUNTIME)
        candidates.append(getattr(rt, "store", None))
    for cand in candidates:
        if isinstance(cand, RecallStore):
            return cand
    try:
        found = get_store()
    except RuntimeError:
        found = None
    if isinstance(found, RecallStore):
        return found
    raise RecallError(
        "no RecallStore in this graph: compile it with store=RecallStore.open(...) (or pass "
        "store= explicitly)",
        code="invalid_value",
    )


def checkpointer_of(config: Any) -> Any:
    """The checkpointer the running graph writes with (None when there is none)."""
    return configurable(config).get(CONFIG_KEY_CHECKPOINTER)
