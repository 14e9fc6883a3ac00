"""langgraph-recall: make LangGraph agents safe to crash, resume, retry and hand to a human.

    store = RecallStore.open("./recall.db")            # or "postgresql://..."
    graph = builder.compile(store=store, checkpointer=store.checkpointer())

``RecallMiddleware`` needs ``langchain`` (``pip install 'langgraph-recall[agents]'``); it is
imported on first use so the rest works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._briefing import Briefing
from ._diff import diff
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
from ._hooks import briefing_node, post_model_hook, pre_model_hook, record_node, with_briefing
from ._recall_tools import recall_tools
from ._replay import ReplayChatModel
from .checkpoint import RecallCheckpointer
from .store import RecallStore
from .tools import ActionEnd, DurableToolNode, IdempotencyKey, current_idempotency_key

if TYPE_CHECKING:
    from ._middleware import RecallMiddleware

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
    "briefing_node",
    "current_idempotency_key",
    "diff",
    "post_model_hook",
    "pre_model_hook",
    "recall_tools",
    "record_node",
    "with_briefing",
]


def __getattr__(name: str) -> Any:
    if name == "RecallMiddleware":
        try:
            from ._middleware import RecallMiddleware
        except ImportError as exc:
            raise ImportError(
                "RecallMiddleware needs langchain's create_agent: pip install "
                "'langgraph-recall[agents]'"
            ) from exc
        return RecallMiddleware
    raise AttributeError(f"module 'langgraph_recall' has no attribute {name!r}")
