"""Where two agents' runs part ways: the first step whose model call, tool call or result differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ._render import call_text

if TYPE_CHECKING:
    from .store import RecallStore


@dataclass(frozen=True)
class Step:
    """One comparable step of a run: a model reply, or a tool result, or an input."""

    kind: str  # "input", "model", "tool_result"
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


def steps_of(messages: list[BaseMessage]) -> list[Step]:
    """The comparable steps of a recorded run (message ids and timestamps ignored)."""
    out: list[Step] = []
    for m in messages:
        if isinstance(m, AIMessage):
            calls = " ; ".join(call_text(c["name"], c.get("args") or {}) for c in m.tool_calls)
            text = m.text if isinstance(m.content, (str, list)) else str(m.content)
            out.append(Step("model", f"{text!r}" + (f" -> {calls}" if calls else "")))
        elif isinstance(m, ToolMessage):
            out.append(Step("tool_result", f"{m.name or ''} -> {m.text!r}"))
        elif m.type == "system":
            continue
        else:
            out.append(Step("input", f"{m.type}: {m.text!r}"))
    return out


@dataclass(frozen=True)
class RunDiff:
    """The outcome of ``diff``: ``step`` is None when the runs are the same."""

    left: str
    right: str
    step: int | None
    left_step: Step | None
    right_step: Step | None
    same_steps: int
    left_steps: int
    right_steps: int

    @property
    def identical(self) -> bool:
        return self.step is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "left": self.left,
            "right": self.right,
            "identical": self.identical,
            "first_difference": self.step,
            "left_step": None if self.left_step is None else str(self.left_step),
            "right_step": None if self.right_step is None else str(self.right_step),
            "same_steps": self.same_steps,
            "left_steps": self.left_steps,
            "right_steps": self.right_steps,
        }

    def __str__(self) -> str:
        if self.identical:
            return f"{self.left} and {self.right}: identical ({self.same_steps} steps)"
        return (
            f"{self.left} and {self.right} agree for {self.same_steps} steps, then differ at "
            f"step {self.step}:\n  {self.left}: {self.left_step or '(run ended)'}\n"
            f"  {self.right}: {self.right_step or '(run ended)'}"
        )


def diff(
    store: RecallStore, agent_a: str, agent_b: str, *, store_b: RecallStore | None = None
) -> RunDiff:
    """Compare the recorded runs of two agents (optionally in two databases) step by step.

    Raises:
        RecallError: ``unknown_agent`` when ``agent_a`` has no records in ``store`` or
            ``agent_b`` none in ``store_b`` (default ``store``): a mistyped id is not an
            empty run that happens to match another.
    """
    store._require_agent(agent_a)
    (store_b or store)._require_agent(agent_b)
    a = steps_of([t.message for t in store.turns(agent_a)])
    b = steps_of([t.message for t in (store_b or store).turns(agent_b)])
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    if same == len(a) == len(b):
        return RunDiff(agent_a, agent_b, None, None, None, same, len(a), len(b))
    return RunDiff(
        agent_a,
        agent_b,
        same + 1,
        a[same] if same < len(a) else None,
        b[same] if same < len(b) else None,
        same,
        len(a),
        len(b),
    )
