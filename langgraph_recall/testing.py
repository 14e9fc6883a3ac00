"""Helpers for trying langgraph-recall offline: a scripted chat model.

``ScriptedChatModel`` answers the n-th model call with the n-th scripted reply, where n is the
number of AI messages already in the request. That makes it deterministic across processes,
crashes and resumes (it keeps no position of its own), which is what the demo, the notebooks and
the crash tests need: a killed worker and its replacement get the same replies.

Its message ids are deterministic too, and unique per thread, as a provider's ids are unique:
inside a graph run the id names the run's thread (``ai-<thread>-<n>``), outside one it is
``ai-<n>``. An id that repeated across threads would make a new thread's AI message look like
one the agent already has: langgraph-recall records each message id once per agent, and derives
a tool call's action key from its AI message's id, so the new thread's calls would be answered
with the first thread's recorded results instead of running.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables.config import var_child_runnable_config

__all__ = ["ScriptedChatModel", "call", "reply"]


def call(tool: str, /, **args: Any) -> dict[str, Any]:
    """One scripted tool call (its id is derived from its position, so it is stable). The tool
    is positional only, so any argument name is free (``call("set_pointer", name="doc", ...)``)."""
    return {"name": tool, "args": args}


def reply(content: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    """One scripted model reply: some text and/or tool calls."""
    return {"content": content, "tool_calls": list(calls)}


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script; ``seen`` keeps what each call was given (in-process)."""

    script: list[dict[str, Any]]
    name_prefix: str = "ai"
    delay: float = 0.0  # seconds each call takes, as a real model's do
    seen: list[list[BaseMessage]] = []

    def __init__(self, script: Sequence[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(script=list(script), **kwargs)  # type: ignore[call-arg]
        self.seen = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        if self.delay:
            time.sleep(self.delay)
        n = sum(1 for m in messages if isinstance(m, AIMessage))
        spec = self.script[min(n, len(self.script) - 1)]
        calls = [
            {
                "name": c["name"],
                "args": dict(c.get("args") or {}),
                "id": f"call-{n}-{i}",
                "type": "tool_call",
            }
            for i, c in enumerate(spec.get("tool_calls") or [])
        ]
        msg = AIMessage(content=spec.get("content", ""), tool_calls=calls, id=self._id(n))
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _id(self, n: int) -> str:
        """The n-th reply's message id: the same in every process, different on every thread."""
        # The config of the graph node calling the model (LangGraph sets it for the node's
        # code); None when the model is called outside a graph.
        config = var_child_runnable_config.get() or {}
        thread = (config.get("configurable") or {}).get("thread_id")
        if thread is None:
            return f"{self.name_prefix}-{n}"
        return f"{self.name_prefix}-{thread}-{n}"
