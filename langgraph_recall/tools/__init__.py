"""Durable tool calls: side effects at most once, stable idempotency keys, approvals bound to
exact arguments, undo.

``DurableToolNode`` for graphs that build their own tool node; ``DurableTools`` is the same
logic for ``RecallMiddleware`` (``create_agent``).
"""

from ._classes import TOOL_CLASSES, ToolClass, recall_class
from ._durable import DurableTools
from ._keys import IdempotencyKey, current_idempotency_key
from ._node import DurableToolNode
from ._outcome import ActionEnd, SettleReport

__all__ = [
    "TOOL_CLASSES",
    "ActionEnd",
    "DurableToolNode",
    "DurableTools",
    "IdempotencyKey",
    "SettleReport",
    "ToolClass",
    "current_idempotency_key",
    "recall_class",
]
