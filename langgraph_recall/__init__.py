"""langgraph-recall: make LangGraph agents safe to crash, resume, retry and hand to a human."""

from ._errors import RecallError
from .store import RecallStore

__all__ = ["RecallError", "RecallStore"]
