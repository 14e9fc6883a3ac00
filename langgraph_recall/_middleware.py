"""``RecallMiddleware``: the briefing, the recording, the recall tools and durable tool calls for
``langchain.agents.create_agent``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from itertools import repeat
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langgraph.runtime import Runtime

from ._briefing import RECALL_TOOL_NAMES, build_briefing, is_briefing_message
from ._context import agent_id_of, checkpointer_of, store_of, thread_id_of
from ._dangling import answer_dangling
from ._errors import RecallError
from ._hooks import (
    _checkpointer_records,
    _latest_human_text,
    _record_new,
    record_messages,
    seen_ids,
)
from ._recall_tools import recall_tools
from .store import RecallStore
from .store._transcript import own_ids
from .tools import DurableTools
from .tools._toolset import check_resolver, normalize_options

__all__ = ["RecallMiddleware"]


def _config() -> Any:
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:
        return None


def _response_messages(response: Any) -> list[BaseMessage]:
    """The messages a model call produced, whatever shape the handler returned."""
    if isinstance(response, BaseMessage):
        return [response]
    inner = getattr(response, "model_response", response)  # ExtendedModelResponse
    return [m for m in getattr(inner, "result", []) or [] if isinstance(m, BaseMessage)]


def _with_briefing(system: SystemMessage | None, text: str) -> SystemMessage:
    """The agent's system message with the briefing after it (the static prompt stays first,
    so a provider's prompt cache still covers it)."""
    if system is None:
        return SystemMessage(text)
    if isinstance(system.content, str):
        return SystemMessage(f"{system.content}\n\n{text}" if system.content else text)
    return SystemMessage([*system.content, {"type": "text", "text": text}])


class RecallMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Gives a ``create_agent`` agent its records: a fresh briefing in the system message on
    every model call (never stored in the conversation), the turns recorded when the
    checkpointer is not a ``RecallCheckpointer``, the recall tools, and durable tool calls.

    Args:
        classes: tool name -> ``"pure"``, ``"idempotent"`` or ``"external"`` (as DurableToolNode).
        approve: names of tools that need a person's approval before each call.
        resolver: settles calls left in doubt by a crash (returns ``ActionEnd`` or None).
        undo: tool name -> function that reverses a done call.
        token_budget: the most tokens the briefing takes (default 2000).
        store: the RecallStore (default: the one the agent was compiled with).
        messages_key: the state key holding the conversation.
        tools: register the recall tools (default True).
        briefing_options: more ``build_briefing`` options (``token_counter``, ...).

    Guarantees: the briefing is rebuilt for each model call from the records (so it reflects
    tool results and working-state updates made since) and leaves out the turns already in the
    model's input; ``settle()`` runs once per run, before the model sees anything. Durable
    calls behave as ``DurableToolNode``'s, including, with ``store.checkpointer()``, intents
    that commit with the checkpoint sending the calls to the tool node.
    """

    def __init__(
        self,
        *,
        classes: Mapping[str, str] | None = None,
        approve: Iterable[str] = (),
        resolver: Callable[..., Any] | None = None,
        undo: Mapping[str, Callable[..., Any]] | None = None,
        token_budget: int = 2000,
        store: RecallStore | None = None,
        messages_key: str = "messages",
        tools: bool = True,
        briefing_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if store is not None and not isinstance(store, RecallStore):
            raise RecallError(
                f"store= takes a RecallStore (RecallStore.open(...)), got {type(store).__name__}",
                code="invalid_value",
            )
        self.classes, self.approve, self.undo = normalize_options(classes, approve, undo)
        check_resolver(resolver)
        self.token_budget = token_budget
        self.store = store
        self.messages_key = messages_key
        self.tools = recall_tools() if tools else []
        self.briefing_options = dict(briefing_options or {})
        self.resolver = resolver
        self._durable = _durable_tools(
            self.classes, self.approve, resolver, self.undo, messages_key
        )
        self._durable.store = store
        # What ``store.checkpointer()`` finds in the agent's graph at a run's start (through
        # this middleware's hook nodes): it plans the calls of create_agent's tool node with
        # it, and settles the agent's open calls with it before the run's first node.
        self.recall_planner = self._durable

    # --- where the records are ------------------------------------------------------------

    def _where(self, runtime: Any) -> tuple[RecallStore, str, str | None, Any]:
        config = _config()
        return (
            store_of(config, runtime, self.store),
            agent_id_of(config),
            thread_id_of(config),
            config,
        )

    # --- once per run -----------------------------------------------------------------------

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Settle calls left open by an earlier crash, before the model sees anything (unless
        the checkpointer settled them at this run's start, as ``store.checkpointer()`` does)."""
        store, agent, _, config = self._where(runtime)
        if not self._settled_at_start(agent, config):
            self._durable.settle(store, agent)
        return None

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        store, agent, _, config = self._where(runtime)
        if not self._settled_at_start(agent, config):
            await self._durable.asettle(store, agent)
        return None

    def _settled_at_start(self, agent: str, config: Any) -> bool:
        settled = getattr(checkpointer_of(config or {}), "settled_at_start", None)
        return settled is not None and settled(agent, self._durable) is True

    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record what the run added after its last model call (results of a last tool step)."""
        store, agent, thread, config = self._where(runtime)
        if not _checkpointer_records(config):
            record_messages(
                store, agent, _state_messages(state, self.messages_key), thread_id=thread
            )
        return None

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_agent, state, runtime)

    # --- every model call -------------------------------------------------------------------

    def _prepare(self, request: ModelRequest) -> ModelRequest:
        """Record what is new, then put a fresh briefing into the system message, and answer
        each tool call no ToolMessage answers with its outcome from the records."""
        store, agent, thread, config = self._where(request.runtime)
        state_messages = _state_messages(request.state, self.messages_key)
        ids = own_ids(state_messages)  # once: both the recording and the exclusions use them
        if not _checkpointer_records(config):
            _record_new(store, agent, state_messages, ids, thread)
        briefing = build_briefing(
            store,
            agent,
            token_budget=self.token_budget,
            exclude_msg_ids=[*seen_ids(state_messages, ids), *seen_ids(request.messages)],
            query=_latest_human_text(request.messages),
            tool_hint=bool(self.tools),
            # Inside the running agent: calls in doubt over budget are counted, never refused.
            **{"doubts_over_budget": "count", **self.briefing_options},
        )
        system = _with_briefing(request.system_message, briefing.text)
        answered = answer_dangling(store, agent, request.messages)
        if answered is request.messages:  # the usual: no call left unanswered
            return request.override(system_message=system)
        return request.override(system_message=system, messages=answered)

    def _check_offered(self, request: ModelRequest) -> None:
        if self._durable is not None:
            self._durable.check_offered(request.tools or ())

    def _after(self, request: ModelRequest, response: Any) -> None:
        """Record the model's reply at once (its id is what the state will hold)."""
        store, agent, thread, config = self._where(request.runtime)
        if _checkpointer_records(config):
            return
        replies = [m for m in _response_messages(response) if m.id and not is_briefing_message(m)]
        if replies and all(isinstance(m, AIMessage) for m in replies):
            state_messages = _state_messages(request.state, self.messages_key)
            record_messages(store, agent, [*state_messages, *replies], thread_id=thread)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        """Hand the model a fresh briefing; record the turns (sync)."""
        self._check_offered(request)
        response = handler(self._prepare(request))
        self._after(request, response)
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        """Hand the model a fresh briefing; record the turns (async: store I/O off the loop)."""
        self._check_offered(request)
        prepared = await asyncio.to_thread(self._prepare, request)
        response = await handler(prepared)
        await asyncio.to_thread(self._after, request, response)
        return response

    # --- every tool call --------------------------------------------------------------------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Run the call through the durable-tools engine (once-only, approvals, in-doubt)."""
        request = self._with_store(request)
        if self._durable is None:
            return handler(request)
        return self._durable.wrap_tool_call(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        request = self._with_store(request)
        if self._durable is None:
            return await handler(request)
        return await self._durable.awrap_tool_call(request, handler)

    def _with_store(self, request: Any) -> Any:
        """With ``store=``, the recall tools' runtime carries that store (they find it there,
        in an agent compiled with another store or none). Only theirs: another tool's runtime
        keeps the agent's own store, which it may use for its own data. The durable engine is
        given the store itself (``DurableTools.store``)."""
        runtime = getattr(request, "runtime", None)
        if (
            self.store is None
            or runtime is None
            or not dataclasses.is_dataclass(runtime)
            or getattr(runtime, "store", None) is self.store
            or (request.tool_call or {}).get("name") not in RECALL_TOOL_NAMES
        ):
            return request
        return request.override(runtime=dataclasses.replace(runtime, store=self.store))  # type: ignore[type-var]


def _state_messages(state: Any, key: str) -> list[BaseMessage]:
    value = state.get(key) if isinstance(state, dict) else getattr(state, key, None)
    value = list(value or [])
    if all(map(isinstance, value, repeat(BaseMessage))):  # in C: the usual, all messages
        return value
    return [m for m in value if isinstance(m, BaseMessage)]


def _durable_tools(
    classes: dict[str, str],
    approve: tuple[str, ...],
    resolver: Any,
    undo: dict[str, Any],
    messages_key: str,
) -> DurableTools:
    """The durable-tools engine shared with DurableToolNode.

    It is built without the tools: ``create_agent`` hands them over only in its requests, so a
    tool without a class is refused at the first model call that offers it, before the model
    runs (the recall tools carry ``pure``).
    """
    return DurableTools(
        (),
        classes=classes,
        approve=approve,
        resolver=resolver,
        undo=undo,
        messages_key=messages_key,
    )
