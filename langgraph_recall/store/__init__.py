"""RecallStore: a LangGraph BaseStore that also holds each agent's records."""

from ._models import Action, AgentInfo, Approval, Claim, Lease, Pointer, Turn, UndoReport
from ._store import RecallStore

__all__ = [
    "Action",
    "AgentInfo",
    "Approval",
    "Claim",
    "Lease",
    "Pointer",
    "RecallStore",
    "Turn",
    "UndoReport",
]
