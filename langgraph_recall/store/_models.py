"""The typed records the store hands back. Plain frozen dataclasses, shown nicely in Jupyter."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from langchain_core.messages import BaseMessage

ActionStatus = Literal["open", "done", "failed", "abandoned", "not_done"]
ClaimStatus = Literal["claimed", "done", "failed", "in_doubt"]


@dataclass(frozen=True)
class Turn:
    """One recorded message of an agent, in order (``seq``)."""

    agent_id: str
    seq: int
    msg_id: str
    role: str
    message: BaseMessage
    thread_id: str | None
    created_at: float
    output_ref: str | None = None
    size: int = 0


class TurnView(NamedTuple):
    """A recorded turn as a reader that only looks sees it (the briefing): the message's fields
    as recorded (``type``, ``content``, ``tool_calls``, ``name``...), not rebuilt."""

    seq: int
    msg_id: str
    role: str
    fields: dict[str, Any]
    output_ref: str | None
    size: int


@dataclass(frozen=True)
class Pointer:
    """A named reference to where the work lives (a file, branch, URL, ticket)."""

    name: str
    target: str
    note: str | None = None


@dataclass(frozen=True)
class Action:
    """A side-effecting tool call: its latest attempt and how that attempt ended."""

    action_id: str
    agent_id: str
    tool: str
    klass: str
    args: Any
    args_digest: str
    idempotency_key: str
    attempt: int
    status: ActionStatus
    created_at: float
    thread_id: str | None = None
    result: Any = None
    error: str | None = None
    note: str | None = None
    resolved_by: str | None = None
    ended_at: float | None = None
    # False for an attempt written ahead with its AI message's checkpoint whose tool has not
    # begun (no start mark): open, but not in doubt; it runs once when its tool step runs.
    started: bool = True

    @property
    def is_open(self) -> bool:
        return self.status == "open"

    @property
    def in_doubt(self) -> bool:
        """Open and started: its effect may have happened, and nobody knows whether it did."""
        return self.status == "open" and self.started

    def call_text(self, max_arg: int = 200) -> str:
        from .._render import call_text

        return call_text(self.tool, self.args if isinstance(self.args, dict) else {}, max_arg)

    def _repr_html_(self) -> str:
        return (
            f"<code>{html.escape(self.call_text())}</code> <b>{self.status}</b> "
            f"<small>{html.escape(self.action_id)} attempt {self.attempt}</small>"
        )


#: In a done action's recorded ToolMessage: the ref of the output its long text was moved to.
OUTPUT_REF = "recall_output_ref"


@dataclass(frozen=True)
class CallRecord:
    """What the records hold of one durable tool call (``store.call_records``): its action's
    latest attempt (None when no intent was recorded: refused before it, or waiting for an
    approval) and the latest approval decision on it (``requested``, ``approve``, ``reject``)."""

    action: Action | None
    decision: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Claim:
    """What ``claim`` found: a fresh attempt to run, a finished one, or one in doubt."""

    status: ClaimStatus
    action: Action

    @property
    def claimed(self) -> bool:
        return self.status == "claimed"


@dataclass(frozen=True)
class Approval:
    """A person's decision bound to one action and one argument digest, signed."""

    approval_id: str
    agent_id: str
    action_id: str
    decision: Literal["requested", "approve", "reject"]
    args: Any
    args_digest: str | None
    message: str | None
    signature: str
    created_at: float
    # The LangGraph task the decision's question was asked in, and how many answers that
    # asking took (its answers sent back with a problem, then the decision): None for a
    # request, a decision recorded through the store, or one written before schema v7.
    task_id: str | None = None
    asked: int | None = None
    # The decision's place in its action's chain (1, 2, ...), the attempt of the action it
    # authorises, and the id of the key that signed it (None: the store's secret). All None
    # on a row written before schema v9, which is no longer used to decide anything.
    seq: int | None = None
    attempt: int | None = None
    key_id: str | None = None


@dataclass(frozen=True)
class Lease:
    """Who acts for an agent and until when; ``epoch`` grows on every change of holder."""

    agent_id: str
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True)
class AgentInfo:
    """A row of ``store.agents()``."""

    agent_id: str
    created_at: float
    # When turns, working-state revisions or outputs were last recorded (a run records its turns
    # at its end at the latest); a tool call's intent alone does not move it.
    last_activity: float
    turns: int
    open_actions: int
    lease_holder: str | None = None
    lease_expires_at: float | None = None


@dataclass(frozen=True)
class UndoReport:
    """What ``store.undo(agent_id)`` did."""

    undone: list[str] = field(default_factory=list)  # reversed by this call
    failed: list[str] = field(default_factory=list)
    no_undo: list[str] = field(default_factory=list)  # done, but no undo function is known
    stopped_at: str | None = None  # an action in doubt that stopped the walk
    already_undone: list[str] = field(default_factory=list)  # reversed by an earlier call
