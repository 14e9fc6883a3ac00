"""ReplayChatModel: re-run a recorded agent offline, with zero model calls.

The model's n-th reply is the n-th recorded AI message, where n is the number of AI messages
already in the request, so the replay is deterministic across processes and resumes. Before
replying it checks that what the graph sends now (the inputs and tool results since the last
reply) matches what was recorded; a difference raises ``replay_mismatch`` naming the step.
Durable tools return their recorded results, so replay repeats no side effect.

How to replay: compile the same graph with ``store=`` the agent's store and a checkpointer that
records nothing (``InMemorySaver()``), and invoke it under the same ``agent_id`` (the durable
tools find their records by it) on a new thread, with the recorded first input
(``store.turns(agent_id)[0].message``). With ``store.checkpointer()`` instead, the replay's tool
messages would be recorded as new turns of the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from ._diff import steps_of
from ._errors import RecallError

if TYPE_CHECKING:
    from .store import RecallStore


class ReplayChatModel(BaseChatModel):
    """A chat model that answers with an agent's recorded model replies, in order.

    ``strict`` (default): before each reply, check that the inputs and tool results the graph
    sends match the recording. Raises ``RecallError``: ``replay_mismatch`` (with ``step``, the
    model call number) when they differ or the graph asks for more replies than were
    recorded; ``unknown_agent`` when the agent has no recorded turns.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Any
    agent_id: str
    strict: bool = True

    def __init__(
        self, store: RecallStore, agent_id: str, *, strict: bool = True, **kw: Any
    ) -> None:
        super().__init__(store=store, agent_id=agent_id, strict=strict, **kw)  # type: ignore[call-arg]
        self._recording: list[BaseMessage] | None = None

    @property
    def _llm_type(self) -> str:
        return "langgraph-recall-replay"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ReplayChatModel:  # type: ignore[override]
        return self

    def _recorded(self) -> list[BaseMessage]:
        if self._recording is None:
            self._recording = [t.message for t in self.store.turns(self.agent_id)]
            if not self._recording:
                raise RecallError(
                    f"agent {self.agent_id!r} has no recorded turns to replay",
                    code="unknown_agent",
                )
        return self._recording

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        recorded = self._recorded()
        step = sum(1 for m in messages if isinstance(m, AIMessage))
        ai_positions = [i for i, m in enumerate(recorded) if isinstance(m, AIMessage)]
        if step >= len(ai_positions):
            raise RecallError(
                f"replay of {self.agent_id!r}: the graph asked for model reply #{step + 1}, but "
                f"only {len(ai_positions)} were recorded",
                code="replay_mismatch",
                step=step + 1,
            )
        pos = ai_positions[step]
        if self.strict:
            prev = ai_positions[step - 1] + 1 if step else 0
            expected = steps_of(recorded[prev:pos])
            last_ai = max(
                (i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1
            )
            got = steps_of(messages[last_ai + 1 :])
            if expected and got[-len(expected) :] != expected:
                raise RecallError(
                    f"replay of {self.agent_id!r} differs at model call #{step + 1}: recorded "
                    f"inputs {[str(s) for s in expected]}, got {[str(s) for s in got]}",
                    code="replay_mismatch",
                    step=step + 1,
                )
        reply = recorded[pos]
        return ChatResult(generations=[ChatGeneration(message=reply)])
