"""``DurableToolNode``: LangGraph's ``ToolNode`` with side effects at most once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolCall
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import (
    AsyncToolCallWrapper,
    ToolCallRequest,
    ToolCallWrapper,
    ToolRuntime,
)
from langgraph.runtime import Runtime

from .._context import configurable
from .._errors import RecallError
from ..store import RecallStore
from ._bound import current_bound
from ._durable import DEFAULT_DURABLE_TIMEOUT, DurableTools, Resolver
from ._keys import CONFIG_KEY, IdempotencyKey, current_idempotency_key, key_parameters, key_scope
from ._order import Asking, Deferred, open_turns, scratchpad_of, turns_for
from ._outcome import Output, SettleReport
from ._steps import CONFIG_KEY_TASK_ID

_OWN = ("state", "tool_call_id", "config", "tools")
# ToolRuntime's other fields, each taken from the node's Runtime by name when it has one.
_SHARED = tuple(f.name for f in dataclasses.fields(ToolRuntime) if f.init and f.name not in _OWN)


def _loop_running() -> bool:
    """Whether this thread runs an event loop (a Jupyter cell's thread does, while a sync
    ``invoke`` runs in it). A sync tool there may call ``asyncio.run()``, which works on a pool
    thread and fails on a thread with a running loop: such calls keep ToolNode's pool."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LoneCallInline(ToolNode):
    """``ToolNode`` whose lone tool call runs on the node's own thread.

    ToolNode starts a thread pool for every node run and joins it, even for one call: about
    0.25 ms on a small machine, more than a durable call's records cost, and the call then runs
    on a cold new thread. Here a lone call runs inline. Several calls still run in parallel, as
    ToolNode runs them, and so does a lone call on a thread that runs an event loop (a Jupyter
    cell's), where a sync tool calling ``asyncio.run()`` needs a thread of its own. The
    benchmarks use this class alone as the baseline that tells dispatch from records.
    """

    def _func(self, input: Any, config: RunnableConfig, runtime: Runtime) -> Any:  # type: ignore[override]
        calls, input_type = self._parse_input(input)
        if len(calls) != 1 or _loop_running():
            return self._func_many(input, config, runtime, calls)
        (cfg,) = get_config_list(config, 1)
        tool_runtime = self._tool_runtime(input, calls[0], cfg, runtime)
        # No contextvars.copy_context() as a pool thread would give it: LangGraph already runs
        # the node in a context of its own, and nothing of the node reads one after the call.
        output = self._run_one(calls[0], input_type, tool_runtime)
        return self._combine_tool_outputs([output], input_type)

    def _func_many(
        self, input: Any, config: RunnableConfig, runtime: Runtime, calls: list[ToolCall]
    ) -> Any:
        """ToolNode's own dispatch (several calls, or a thread running an event loop)."""
        return super()._func(input, config, runtime)

    def _tool_runtime(
        self, input: Any, call: ToolCall, cfg: RunnableConfig, runtime: Runtime
    ) -> ToolRuntime:
        """The ``ToolRuntime`` ToolNode gives a call: the call's own fields, and every other
        field carried over from the node's ``Runtime`` by name (so a field LangGraph adds to
        both reaches the tool here too; ``test_tool_runtime_matches_toolnode`` checks it)."""
        own: dict[str, Any] = {
            "state": self._extract_state(input, cfg),
            "tool_call_id": call["id"],
            "config": cfg,
            "tools": list(self.tools_by_name.values()),
        }
        shared = {name: getattr(runtime, name) for name in _SHARED if hasattr(runtime, name)}
        return ToolRuntime(**own, **shared)


class DurableToolNode(LoneCallInline):
    """A drop-in ``ToolNode`` whose side-effecting calls run at most once.

    Same constructor as ``ToolNode`` plus:

    Args:
        classes: ``{"tool": "pure" | "idempotent" | "external"}`` (or put the class on the
            tool with ``recall_class``). A tool without a class is refused here.
        approve: tools that need a person's approval of the exact arguments before each call
            (see the approval protocol in the README).
        resolver: ``resolver(action) -> ActionEnd | None``, asked about external calls a crash
            left in doubt.
        undo: ``{"tool": fn}`` for ``store.undo(agent_id)``.
        durable_timeout: seconds a call waits for its AI message's checkpoint to be written
            before it is refused (default 30; ``math.inf`` for no limit).

    Compile the graph with ``store=RecallStore.open(...)`` and a checkpointer
    (``store.checkpointer()``). Your ``wrap_tool_call``/``awrap_tool_call`` keep working; they
    run inside the durable wrapper, so a retrying wrapper retries under the same key. A sync
    ``wrap_tool_call`` alone serves ``ainvoke`` too, run in a worker thread.

    Several calls of one AI message ask their questions (approvals, ``interrupt()`` in a tool)
    in the message's order, so each answer reaches its own question (``_order``).

    Dispatch: several calls of one AI message run in parallel, as in ToolNode; a lone call runs
    on the node's own thread (ToolNode starts and joins a thread pool even for one call, which
    costs more than the durable records do), except on a thread running an event loop (a
    Jupyter cell's), where it keeps the pool so a sync tool may still call ``asyncio.run()``.

    Tools receive the call's idempotency key through a parameter annotated ``IdempotencyKey``
    (or ``idempotency_key: Annotated[str, InjectedToolArg]``), hidden from the model.

    Intents written ahead: with ``store.checkpointer()``, the intents of this node's calls
    commit with the checkpoint of the AI message asking for them, or sending them to this node
    (``checkpoint/_plans.py``: the checkpointer finds the node in the run's graph when the run
    starts), and the node claims nothing itself. A crash after that checkpoint leaves the call
    open, as a crash after any intent does. The end of a call that is its message's only one commits with the
    task's own write of its answer (``store/_due.py``); so a durable call makes no commit of
    its own.

    Raises:
        UnclassifiedTool: naming every tool without a class.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        classes: Mapping[str, str] | None = None,
        approve: Iterable[str] = (),
        resolver: Resolver | None = None,
        undo: Mapping[str, Callable[..., Any]] | None = None,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
        wrap_tool_call: ToolCallWrapper | None = None,
        awrap_tool_call: AsyncToolCallWrapper | None = None,
        messages_key: str = "messages",
        **kwargs: Any,
    ) -> None:
        durable = DurableTools(
            tools,
            classes=classes,
            approve=approve,
            resolver=resolver,
            undo=undo,
            messages_key=messages_key,
            durable_timeout=durable_timeout,
            fill_key_params=False,  # _inject_tool_args below fills them
        )
        sync_wrap, async_wrap = _compose(durable, wrap_tool_call, awrap_tool_call)
        super().__init__(
            tools,
            wrap_tool_call=sync_wrap,
            awrap_tool_call=async_wrap,
            messages_key=messages_key,
            **kwargs,
        )
        self.durable = durable
        # What the checkpointer plans this node's calls with, found in the graph at a run's
        # start (``_plans.Plans.of_graph``).
        self.recall_planner = durable
        durable.expect(self.tools_by_name)  # the objects ToolNode hands each call
        self._key_params: dict[str, tuple[str, ...]] = {
            name: params for name, t in self.tools_by_name.items() if (params := key_parameters(t))
        }

    # --- what ToolNode calls ------------------------------------------------------------

    def _func_many(
        self, input: Any, config: RunnableConfig, runtime: Runtime, calls: list[ToolCall]
    ) -> Any:
        with open_turns(config, _call_ids(calls)):
            return super()._func_many(input, config, runtime, calls)

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Runtime) -> Any:  # type: ignore[override]
        try:
            calls, _ = self._parse_input(input)
        except ValueError:
            calls = []  # ToolNode's own _afunc says what is wrong with the input
        with open_turns(config, _call_ids(calls)):
            return await super()._afunc(input, config, runtime)

    def _run_one(self, call: ToolCall, input_type: Any, tool_runtime: ToolRuntime) -> Any:  # type: ignore[override]
        turns = turns_for(tool_runtime.config)
        if turns is None:
            return super()._run_one(call, input_type, tool_runtime)
        call_id = str(call["id"])
        try:
            while True:
                asking = Asking(turns, call_id, *_task_of(tool_runtime.config))
                try:
                    return super()._run_one(call, input_type, _asking_runtime(tool_runtime, asking))
                except Deferred:
                    turns.wait(call_id)  # then run again, its turn come
                except Exception as exc:  # an interrupt (GraphBubbleUp) or an error
                    return _Raised(exc)
        finally:
            turns.release(call_id)

    async def _arun_one(self, call: ToolCall, input_type: Any, tool_runtime: ToolRuntime) -> Any:  # type: ignore[override]
        turns = turns_for(tool_runtime.config)
        if turns is None:
            return await super()._arun_one(call, input_type, tool_runtime)
        call_id = str(call["id"])
        try:
            while True:
                asking = Asking(turns, call_id, *_task_of(tool_runtime.config))
                try:
                    runtime = _asking_runtime(tool_runtime, asking)
                    return await super()._arun_one(call, input_type, runtime)
                except Deferred:
                    await turns.await_turn(call_id)
                except Exception as exc:  # an interrupt (GraphBubbleUp) or an error
                    return _Raised(exc)
        finally:
            turns.release(call_id)

    def _combine_tool_outputs(self, outputs: list[Any], input_type: Any) -> Any:  # type: ignore[override]
        # Every call ran its course before the task stops (asyncio.gather raised the first
        # interrupt while its siblings still ran, and a sibling's own interrupt then never
        # closed its attempt: it read as in doubt). The question raised is the first call's
        # in the message's order: the one the next answer goes to.
        for out in outputs:
            if isinstance(out, _Raised):
                raise out.exc
        return super()._combine_tool_outputs(outputs, input_type)

    def _inject_tool_args(
        self, tool_call: ToolCall, tool_runtime: ToolRuntime, tool: BaseTool | None = None
    ) -> ToolCall:
        # The last point before the tool runs, after every wrapper: it must run as recorded.
        bound = current_bound()
        if bound is not None:
            bound.check(tool_call["name"], tool_call.get("args"))
        # ToolNode strips every InjectedToolArg the model sent (so a forged key is dropped),
        # then fills the ones it knows; the idempotency key is ours to fill.
        injected = super()._inject_tool_args(tool_call, tool_runtime, tool)
        params = self._key_params.get(tool_call["name"])
        if params is None and tool is not None and tool_call["name"] not in self.tools_by_name:
            params = key_parameters(tool)
        if not params:
            return injected
        key = configurable(tool_runtime.config).get(CONFIG_KEY) or current_idempotency_key()
        if not key:
            raise RecallError(
                f"{tool_call['name']} takes an idempotency key but the call did not go through "
                "the durable wrapper (a wrap_tool_call that replaced the runtime?); nothing ran",
                code="invalid_value",
            )
        return {
            **injected,
            "args": {**injected["args"], **{p: IdempotencyKey(key) for p in params}},
        }

    # --- settling -------------------------------------------------------------------------

    def settle(self, store: RecallStore, agent_id: str) -> SettleReport:
        """See ``DurableTools.settle``: close what the resolver can confirm, report the rest."""
        return self.durable.settle(store, agent_id)

    async def asettle(self, store: RecallStore, agent_id: str) -> SettleReport:
        return await self.durable.asettle(store, agent_id)


async def _in_own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread of its own, in a copy of this context.

    Not the loop's default executor (``asyncio.to_thread``): the user's wrapper waits there for
    the tool, which ToolNode runs on that same executor; with as many calls as it has workers,
    every worker waited for a tool that had none left to run on.
    """
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not done.set_running_or_notify_cancel():  # the caller was cancelled already
            return
        try:
            done.set_result(context.run(fn, *args))
        except BaseException as exc:  # handed to the awaiting coroutine, raised there
            done.set_exception(exc)

    threading.Thread(target=run, name="recall-sync-wrapper", daemon=True).start()
    return await asyncio.wrap_future(done)


def _task_of(config: Any) -> tuple[Any, str | None]:
    """The task's scratchpad and id, from a call's config."""
    task_id = configurable(config).get(CONFIG_KEY_TASK_ID)
    return scratchpad_of(config), task_id if isinstance(task_id, str) else None


def _call_ids(calls: list[ToolCall]) -> list[str]:
    """The ids of a task's calls, in the AI message's order: the order they ask in."""
    return [str(c["id"]) for c in calls if c.get("id")]


class _Raised:
    """A call of an ordered task that stopped at an interrupt or an error (raised once all
    have run: under ainvoke, asyncio.gather raised the first at once, and a sibling still
    running then had its record cut off, left in doubt though it ran)."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def _asking_runtime(tool_runtime: ToolRuntime, asking: Asking) -> ToolRuntime:
    # ToolNode invokes the tool with the runtime's config: the tool's interrupt() then counts
    # through this call's view of the scratchpad.
    return dataclasses.replace(tool_runtime, config=asking.config(tool_runtime.config))


def _compose(
    durable: DurableTools,
    user_sync: ToolCallWrapper | None,
    user_async: AsyncToolCallWrapper | None,
) -> tuple[ToolCallWrapper, AsyncToolCallWrapper | None]:
    """Our wrapper outermost, the user's inside it (as create_agent chains middleware)."""

    def sync_wrap(request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Output:
        if user_sync is None:
            return durable.wrap_tool_call(request, execute)
        return durable.wrap_tool_call(request, lambda req: user_sync(req, execute))

    async def async_wrap(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> Output:
        if user_async is None:
            return await durable.awrap_tool_call(request, execute)

        async def inner(req: ToolCallRequest) -> Any:
            return await user_async(req, execute)

        return await durable.awrap_tool_call(request, inner)

    async def async_over_sync(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> Output:
        # A user who gave only a sync wrapper: ToolNode would run the whole sync chain on the
        # event loop's thread, where the durable call's wait for its AI message's checkpoint
        # blocks the very loop that saves it (30 s, then refused). Here the durable part runs
        # as async, the user's wrapper in a worker thread, and the tool back on the loop.
        assert user_sync is not None
        loop = asyncio.get_running_loop()

        async def inner(req: ToolCallRequest) -> Any:
            # Set, on the loop, when this call is cancelled (ainvoke cancelled or timed out).
            # The user's wrapper goes on in its thread, as asyncio.to_thread's would; what it
            # asks of the tool afterwards must not run: the caller is gone, and the record it
            # left open is settled as in doubt, never by a tool that ran unseen.
            gone = threading.Event()
            running: set[asyncio.Task[Any]] = set()  # touched on the loop's thread only

            def execute_on_loop(req: ToolCallRequest) -> Any:
                key = current_idempotency_key()  # the thread has the call's context; the loop not

                async def keyed() -> Any:
                    # On the loop, as the cancellation below: a tool either starts before it
                    # (and is cancelled with it) or sees ``gone`` and never starts.
                    if gone.is_set():
                        raise asyncio.CancelledError()
                    task = asyncio.current_task()
                    assert task is not None
                    running.add(task)
                    try:
                        with key_scope(key):
                            return await execute(req)
                    finally:
                        running.discard(task)

                return asyncio.run_coroutine_threadsafe(keyed(), loop).result()

            try:
                return await _in_own_thread(user_sync, req, execute_on_loop)
            except asyncio.CancelledError:
                gone.set()
                for task in list(running):
                    task.cancel()
                raise

        return await durable.awrap_tool_call(request, inner)

    if user_sync is not None and user_async is None:
        return sync_wrap, async_over_sync
    return sync_wrap, async_wrap
