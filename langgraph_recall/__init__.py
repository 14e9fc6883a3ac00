"""langgraph-recall: make LangGraph agents safe to crash, resume, retry and hand to a human.

    store = RecallStore.open("./recall.db")            # or "postgresql://..."
    graph = builder.compile(store=store, checkpointer=store.checkpointer())

``RecallMiddleware`` needs ``langchain`` (``pip install 'langgraph-recall[agents]'``); it is
imported on first use so the rest works without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._errors import (
    ApprovalDenied,
    ApprovalMismatch,
    ApprovalRequired,
    InDoubt,
    LeaseHeld,
    LeaseLost,
    RecallError,
    RecordsMissing,
    UnclassifiedTool,
)
from .store import RecallStore

if TYPE_CHECKING:
    from ._briefing import Briefing
    from ._diff import diff
    from ._hooks import (
        awith_briefing,
        briefing_node,
        post_model_hook,
        pre_model_hook,
        record_node,
        with_briefing,
    )
    from ._middleware import RecallMiddleware
    from ._recall_tools import recall_tools
    from ._replay import ReplayChatModel
    from .checkpoint import RecallCheckpointer
    from .tools import (
        ActionEnd,
        DurableToolNode,
        IdempotencyKey,
        current_idempotency_key,
        recall_class,
    )

# Imported on first use: the CLI and plain store users should not pay for LangGraph's
# prebuilt agents, langchain's middleware and the tracing stack at import time.
_LAZY = {
    "ActionEnd": ".tools",
    "Briefing": "._briefing",
    "DurableToolNode": ".tools",
    "IdempotencyKey": ".tools",
    "RecallCheckpointer": ".checkpoint",
    "RecallMiddleware": "._middleware",
    "ReplayChatModel": "._replay",
    "awith_briefing": "._hooks",
    "briefing_node": "._hooks",
    "current_idempotency_key": ".tools",
    "diff": "._diff",
    "post_model_hook": "._hooks",
    "pre_model_hook": "._hooks",
    "recall_class": ".tools",
    "recall_tools": "._recall_tools",
    "record_node": "._hooks",
    "with_briefing": "._hooks",
}

__version__ = "0.1.0"

__all__ = [
    "ActionEnd",
    "ApprovalDenied",
    "ApprovalMismatch",
    "ApprovalRequired",
    "Briefing",
    "DurableToolNode",
    "IdempotencyKey",
    "InDoubt",
    "LeaseHeld",
    "LeaseLost",
    "RecallCheckpointer",
    "RecallError",
    "RecallMiddleware",
    "RecallStore",
    "RecordsMissing",
    "ReplayChatModel",
    "UnclassifiedTool",
    "awith_briefing",
    "briefing_node",
    "current_idempotency_key",
    "diff",
    "post_model_hook",
    "pre_model_hook",
    "recall_class",
    "recall_tools",
    "record_node",
    "with_briefing",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'langgraph_recall' has no attribute {name!r}")
    try:
        value = getattr(import_module(module, __name__), name)
    except ImportError as exc:
        if name == "RecallMiddleware":
            raise ImportError(
                "RecallMiddleware needs langchain's create_agent: pip install "
                "'langgraph-recall[agents]'"
            ) from exc
        raise
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
