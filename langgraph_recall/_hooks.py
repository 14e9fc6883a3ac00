"""Putting the briefing in front of the model, and recording turns, in every graph style.

- ``create_react_agent``: ``pre_model_hook`` (briefing into ``llm_input_messages``, never into
  ``messages``) and ``post_model_hook`` (records the new turns).
- Custom ``StateGraph``: ``with_briefing(messages)`` around a model call, ``record_node`` after
  nodes that add messages, ``briefing_node`` to keep one briefing in state per thread.

Each finds the store and the agent from the running graph (``compile(store=RecallStore...)``,
``configurable["agent_id"]`` defaulting to the thread id). When the graph's checkpointer is a
``RecallCheckpointer`` it records turns itself and the hooks record nothing. Every call builds a
fresh briefing, so it reflects tool results and working-state updates made since the last one,
and leaves out the turns the model already sees in its input.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ._briefing import BRIEFING_ID, Briefing, build_briefing, is_briefing_message
from ._context import agent_id_of, checkpointer_of, store_of, thread_id_of
from ._dangling import answer_dangling
from .store import RecallStore
from .store._transcript import own_ids, with_stable_ids

__all__ = [
    "awith_briefing",
    "briefing_node",
    "post_model_hook",
    "pre_model_hook",
    "record_messages",
    "record_node",
    "with_briefing",
]

#: What a checkpoint keeps of a briefing handed to the model through ``llm_input_messages``.
UNSTORED_MARKER = "[langgraph-recall briefing: rebuilt from the records before each model call]"


# --- recording -------------------------------------------------------------------------------


def _checkpointer_records(config: Any) -> bool:
    """True when the graph's checkpointer is a RecallCheckpointer (it records turns itself)."""
    saver = checkpointer_of(config)
    if saver is None:
        return False
    from .checkpoint import RecallCheckpointer  # imported late: the checkpointer imports the store

    return isinstance(saver, RecallCheckpointer)


class _Tails:
    """Per store, agent and thread: the ids of the thread's messages known recorded, in order.
    Lets a hook send only the new messages instead of the whole conversation (and skip the
    write transaction entirely when nothing is new).

    The whole list of ids is compared, not the count or the last id alone: a node that put a
    new message in the middle (an edit, a summary) keeps both, and the new message was never
    sent. The comparison runs in C (ids fetched by ``attrgetter``, lists compared item by
    item, the same string objects compared by identity), so a call over 10k messages costs
    well under a millisecond instead of the Python pass per message it replaced. Only ever set
    after ``record`` committed, so a stale entry can at worst cause a full re-send, which
    ``record`` dedupes by message id.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[RecallStore, dict[tuple[str, str], list[str]]]
        self._by_store = weakref.WeakKeyDictionary()
        self._kept: weakref.WeakKeyDictionary[RecallStore, int] = weakref.WeakKeyDictionary()

    def start(self, store: RecallStore, key: tuple[str, str], ids: list[Any] | None) -> int:
        """How many of the channel's messages, from the start, are known recorded."""
        if ids is None:
            return 0
        with self._lock:
            known = self._by_store.get(store, {}).get(key)
        if known is None or len(known) > len(ids):
            return 0
        if ids[: len(known)] == known:
            return len(known)
        return 0  # messages were removed or rewritten: send everything, record dedupes

    def done(self, store: RecallStore, key: tuple[str, str], ids: list[Any] | None) -> None:
        # Ids only: an id-less message's name is given by the caller (``_record_new``).
        if not ids or not all(ids):
            return
        with self._lock:
            tails = self._by_store.setdefault(store, {})
            old = tails.get(key)
            kept = self._kept.get(store, 0) + len(ids) - (len(old) if old is not None else 0)
            # A long-lived process with many threads, or many long ones: start over. (The ids
            # kept hold their strings alive after the thread's messages are gone.)
            if len(tails) >= MAX_THREADS or kept > MAX_IDS:
                tails.clear()
                kept = len(ids)
            tails[key] = ids
            self._kept[store] = kept


MAX_THREADS = 4096
"""Threads whose recorded messages a process keeps, per store, for the hooks."""
MAX_IDS = 500_000
"""Message ids a process keeps, per store, for the hooks (about 50 MB at most)."""

_TAILS = _Tails()


def record_messages(
    store: RecallStore, agent_id: str, messages: Sequence[BaseMessage], *, thread_id: str | None
) -> int:
    """Record the messages not yet recorded for the agent (briefings excluded); returns how many."""
    return _record_new(store, agent_id, messages, own_ids(messages), thread_id)


def _record_new(
    store: RecallStore,
    agent_id: str,
    messages: Sequence[BaseMessage],
    ids: list[Any] | None,
    thread_id: str | None,
) -> int:
    key = (agent_id, thread_id or "")
    # Named at their place in the channel, briefings included, so an id-less message's key (its
    # channel position) is the one the checkpointer's recording gives it.
    if ids is not None and not all(ids):
        # Id-less messages (a channel without add_messages): only their names can tell what
        # was recorded, so all are named, every call, and those names are what is kept.
        named = with_stable_ids(messages, thread_id)
        ids = own_ids(named)
        start = _TAILS.start(store, key, ids)
        named = named[start:]
    else:
        start = _TAILS.start(store, key, ids)
        named = with_stable_ids(messages[start:], thread_id, start)
    msgs = [m for m in named if isinstance(m, BaseMessage) and not is_briefing_message(m)]
    added = store.record(agent_id, msgs, thread_id=thread_id) if msgs else 0
    _TAILS.done(store, key, ids)
    return added


def seen_ids(messages: Sequence[Any], ids: list[Any] | None = None) -> list[str]:
    """The ids of the messages the model sees (for ``exclude_msg_ids``), as the recording keeps
    them (their text), in C: a Python pass over a long conversation cost milliseconds per
    model call. ``ids``: their ``own_ids``, if known."""
    if ids is None:
        ids = own_ids(messages)
    if ids is None:
        ids = [getattr(m, "id", None) for m in messages]
    seen = list(filter(None, ids))
    if not _all_text(seen):
        # LangChain makes a number given to the constructor text, but an id assigned later is
        # not validated (``message.id = 7``, a UUID): recorded as its text, excluded as it.
        seen = [i if isinstance(i, str) else str(i) for i in seen]
    return seen


def _all_text(ids: list[Any]) -> bool:
    """Whether every id is a str (the usual), checked in C by joining them."""
    try:
        "".join(ids)
    except TypeError:
        return False
    return True


# --- options shared by the hooks -------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    token_budget: int = 2000
    store: RecallStore | None = None
    messages_key: str = "messages"
    briefing: dict[str, Any] = field(default_factory=dict)  # more build_briefing options


def _messages(state: Any, key: str) -> list[BaseMessage]:
    value = state.get(key) if isinstance(state, dict) else getattr(state, key, None)
    return list(value or [])


def _latest_human_text(messages: Sequence[BaseMessage]) -> str | None:
    for m in reversed(messages):
        if isinstance(m, HumanMessage):
            return m.text if isinstance(m.content, list) else str(m.content)
    return None


def _brief(
    store: RecallStore,
    agent_id: str,
    messages: Sequence[BaseMessage],
    opts: _Options,
    ids: list[Any] | None = None,
) -> Briefing:
    # Inside a running agent: too many calls in doubt for the budget are counted, not refused
    # (a briefing that raised would fail the run).
    options: dict[str, Any] = {
        "query": _latest_human_text(messages),
        "doubts_over_budget": "count",
        **opts.briefing,
    }
    return build_briefing(
        store,
        agent_id,
        token_budget=opts.token_budget,
        exclude_msg_ids=seen_ids(messages, ids),
        **options,
    )


_BRIEFING_MARK = "\0" + BRIEFING_ID


def _may_hold_briefing(ids: list[Any]) -> bool:
    """Whether one of ``ids`` may be a briefing's (its id starts with BRIEFING_ID): looked for
    in all the ids joined, one C pass (a call per id cost over a millisecond at 10k messages).
    An id that is not a str (assigned unvalidated) cannot be joined: the messages are then
    looked at one by one."""
    try:
        return _BRIEFING_MARK in "\0" + "\0".join(filter(None, ids))
    except TypeError:
        return True


def _in_front(
    messages: Sequence[BaseMessage], briefing: BaseMessage, ids: list[Any] | None = None
) -> list[BaseMessage]:
    """The briefing after any leading system messages (a static prompt stays first for
    prompt caching; providers accept consecutive system messages at the start), and no other
    briefing. ``ids``: the messages' ``own_ids``, if known."""
    if ids is None:
        ids = own_ids(messages)
    if ids is not None and not _may_hold_briefing(ids):
        rest = list(messages)  # the usual case, found in C: no briefing to take out
    else:
        rest = [m for m in messages if not is_briefing_message(m)]
    i = 0
    while i < len(rest) and isinstance(rest[i], SystemMessage):
        i += 1
    return [*rest[:i], briefing, *rest[i:]]


def _config(config: RunnableConfig | None) -> RunnableConfig | None:
    if config is not None:
        return config
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:
        return None


# --- create_react_agent ----------------------------------------------------------------------


class _UnstoredBriefing(SystemMessage):
    """The briefing for one model call, as ``llm_input_messages`` carries it.

    LangGraph keeps ``llm_input_messages`` in every checkpoint. Serialized (``model_dump``,
    which LangGraph's serializer uses), this message is a plain ``SystemMessage`` holding only
    a short marker, so checkpoints do not grow with briefings. The model gets the full text.
    """

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        data = super().model_dump(**kwargs)
        data["content"] = UNSTORED_MARKER
        return data


# The serializer names the class it stores; stored, this is an ordinary SystemMessage, so
# reading a checkpoint never needs this module (nor an allowlist entry for it).
_UnstoredBriefing.__module__ = SystemMessage.__module__
_UnstoredBriefing.__name__ = _UnstoredBriefing.__qualname__ = "SystemMessage"


def _where(config: RunnableConfig, opts: _Options) -> tuple[RecallStore, str, str | None]:
    return store_of(config, None, opts.store), agent_id_of(config), thread_id_of(config)


def _record(
    state: Any, config: RunnableConfig, opts: _Options
) -> tuple[list[BaseMessage], list[Any] | None]:
    """The state's messages, recorded unless the checkpointer records them, and their ids
    (fetched once: a model call makes three passes over a conversation that may be long)."""
    store, agent, thread = _where(config, opts)
    messages = _messages(state, opts.messages_key)
    ids = own_ids(messages)
    if not _checkpointer_records(config):
        _record_new(store, agent, messages, ids, thread)
    return messages, ids


def _pre_model(state: Any, config: RunnableConfig, opts: _Options) -> dict[str, Any]:
    # Record first: the briefing then leaves out exactly what the model sees in its input,
    # and a crash during the model call loses none of the turns before it.
    messages, ids = _record(state, config, opts)
    store, agent, _ = _where(config, opts)
    briefing = _brief(store, agent, messages, opts, ids)
    unstored = _UnstoredBriefing(content=briefing.text, id=BRIEFING_ID)
    # The answers added have no id, so ``ids`` still tells whether a briefing is among them.
    answered = answer_dangling(store, agent, messages)
    return {"llm_input_messages": _in_front(answered, unstored, ids)}


def _record_only(state: Any, config: RunnableConfig, opts: _Options) -> dict[str, Any]:
    _record(state, config, opts)
    return {}


def _briefing_once(state: Any, config: RunnableConfig, opts: _Options) -> dict[str, Any]:
    messages, ids = _record(state, config, opts)
    if any(is_briefing_message(m) for m in messages):
        return {}  # once per thread: this thread has its briefing already
    store, agent, _ = _where(config, opts)
    briefing = _brief(store, agent, messages, opts, ids)
    # add_messages appends; to put the briefing in front, replace the list (same ids, so
    # nothing is recorded twice). It happens once per thread, at its start.
    return {
        opts.messages_key: [
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            *_in_front(messages, briefing.message),
        ]
    }


# Each hook's own docstring (``help(pre_model_hook)``, an IDE's hover): set on the instance,
# so the four hooks, and those ``with_options`` makes, never share one, and ``_Hook``'s stays.
_DOCS = {
    "pre_model_hook": """``create_react_agent(..., pre_model_hook=pre_model_hook)``: records the
conversation (unless a RecallCheckpointer does), then hands the model a fresh briefing in front
of the messages via ``llm_input_messages``. The briefing never enters ``messages`` and
checkpoints keep only a short marker in its place.
``pre_model_hook.with_options(token_budget=4000)`` for other options.""",
    "post_model_hook": """``create_react_agent(..., post_model_hook=post_model_hook,
version="v2")``: records the model's reply and the turns before it (unless a
RecallCheckpointer does). Changes no state. ``with_options(...)`` for other options.""",
    "record_node": """A node for a custom ``StateGraph``: records the messages not yet recorded
(unless a RecallCheckpointer does). Put it after nodes that add messages. Changes no state.
``with_options(...)`` for other options.""",
    "briefing_node": """A node for a custom ``StateGraph`` that puts the briefing into
``messages`` once per thread (at the front, after any system prompt), for graphs that want it
in state. It is not refreshed afterwards; use ``with_briefing`` for a briefing refreshed on
every model call. ``with_options(...)`` for other options.""",
}

_BODIES: dict[str, Callable[[Any, RunnableConfig, _Options], dict[str, Any]]] = {
    "pre_model_hook": _pre_model,
    "post_model_hook": _record_only,
    "record_node": _record_only,
    "briefing_node": _briefing_once,
}


class _Hook(RunnableLambda):
    """A hook or node, with sync and async bodies sharing one implementation."""

    def __init__(self, kind: str, opts: _Options) -> None:
        self.kind = kind
        self.opts = opts
        body = _BODIES[kind]
        # The closures hold only the body function and the options, never this Runnable:
        # LangGraph walks a lambda's closure looking for subgraphs, and a cycle hangs it.

        def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
            return body(state, config, opts)

        async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
            # The store is synchronous; run the same body in a worker thread, off the loop.
            return await asyncio.to_thread(body, state, config, opts)

        super().__init__(run, arun, name=f"recall_{kind}")
        self.__doc__ = _DOCS[kind]

    def with_options(
        self,
        *,
        token_budget: int | None = None,
        store: RecallStore | None = None,
        messages_key: str | None = None,
        **briefing_options: Any,
    ) -> _Hook:
        """The same hook with other options: ``token_budget``, ``store`` (default: the graph's),
        ``messages_key``, and any ``build_briefing`` option (``token_counter``, ...)."""
        opts = replace(
            self.opts,
            token_budget=token_budget if token_budget is not None else self.opts.token_budget,
            store=store if store is not None else self.opts.store,
            messages_key=messages_key or self.opts.messages_key,
            briefing={**self.opts.briefing, **briefing_options},
        )
        return _Hook(self.kind, opts)


pre_model_hook = _Hook("pre_model_hook", _Options())
post_model_hook = _Hook("post_model_hook", _Options())
record_node = _Hook("record_node", _Options())
briefing_node = _Hook("briefing_node", _Options())


# --- custom StateGraph: around a model call ------------------------------------------------


def with_briefing(
    messages: Sequence[BaseMessage],
    *,
    config: RunnableConfig | None = None,
    store: RecallStore | None = None,
    token_budget: int = 2000,
    **options: Any,
) -> list[BaseMessage]:
    """``messages`` with a fresh briefing in front, for one model call; nothing is stored.

    Call it inside a node: ``model.invoke(with_briefing(state["messages"]))``. The store and
    agent come from the running graph (or ``store=``/``config=``). Turns already in
    ``messages`` are left out of the briefing. A tool call in ``messages`` that no ToolMessage
    answers (its tool step was lost to a crash) is answered with its outcome from the records.
    Options are those of ``build_briefing``.

    Raises:
        RecallError: ``invalid_value`` when no RecallStore or agent can be found.
    """
    cfg = _config(config)
    found = store_of(cfg, None, store)
    agent = agent_id_of(cfg)
    opts = _Options(token_budget=token_budget, store=found, briefing=options)
    given = list(messages)
    briefing = _brief(found, agent, given, opts)
    return _in_front(answer_dangling(found, agent, given), briefing.message)


async def awith_briefing(
    messages: Sequence[BaseMessage],
    *,
    config: RunnableConfig | None = None,
    store: RecallStore | None = None,
    token_budget: int = 2000,
    **options: Any,
) -> list[BaseMessage]:
    """Async twin of ``with_briefing`` (the store's reads run in a worker thread)."""
    cfg = _config(config)
    return await asyncio.to_thread(
        with_briefing, messages, config=cfg, store=store, token_budget=token_budget, **options
    )
