"""Finding the agent, the thread, the store and the checkpointer from inside a running graph.

Every part (checkpointer, tool node, hooks, middleware, recall tools) resolves these the same
way, here: ``agent_id`` is ``configurable["agent_id"]``, defaulting to the thread id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import RecallError
from .store._ids import as_text, check_id
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
    """``configurable["agent_id"]``, else (when it is absent or None) the thread id; raises if
    neither is set, or if the one used is not an identifier (``store._ids``).

    A given agent id is used as given: ``""`` is refused like ``"   "``, not taken as absent,
    because a template or an unset variable that left it empty would otherwise file the
    agent's records under whatever thread it ran on."""
    conf = configurable(config)
    agent = conf.get("agent_id")
    if agent is None:
        tid = conf.get("thread_id")
        if tid is None or tid == "":
            raise RecallError(
                'no agent_id or thread_id in config; invoke with {"configurable": '
                '{"thread_id": "t-1", "agent_id": "my-agent"}}',
                code="invalid_value",
            )
        # LangGraph takes any thread id and its savers str() it; so does the default agent.
        return check_id("thread_id", tid if type(tid) is str else str(tid))
    # The same rule as every write of the records, checked here before anything runs.
    return check_agent_id(agent if type(agent) is str else as_text(agent))


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
