"""The small agents the demo crashes: one graph shape, built plain or with langgraph-recall.

Each scenario runs its workers as real child processes (forked from the demo, so they start in
milliseconds) that die with ``os._exit`` exactly where the scenario says, then a new process
resumes. Effects (emails, payments) are lines appended to a file, so the demo counts what
really happened, not what a process believed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from ..testing import ScriptedChatModel, call, reply

__all__ = ["ScriptedChatModel", "call", "reply"]


class MeetingModel(ScriptedChatModel):
    """A scripted model whose call first waits for the other racing worker: until it is inside
    its own model call too, or has given up (at most ``patience`` seconds).

    The race scenario needs the two workers to overlap. A fixed sleep only makes that likely: on
    a loaded machine one worker can finish before the other starts. Meeting makes it certain,
    so what the demo prints about the race does not depend on the scheduler.
    """

    here: str = ""  # touched when this worker is inside its model call
    there: list[str] = []  # any of these: the other worker is inside its call, or gone
    patience: float = 10.0

    def __init__(
        self, script: Sequence[dict[str, Any]], *, here: str, there: list[str], **kw: Any
    ) -> None:
        super().__init__(script, here=here, there=there, **kw)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        if self.here:
            open(self.here, "w").close()
            deadline = time.monotonic() + self.patience
            while not any(os.path.exists(p) for p in self.there):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        return super()._generate(messages, stop, run_manager, **kw)


def effect(path: str, what: dict[str, Any]) -> None:
    """Append one real-world effect to ``path`` and fsync it, so a kill cannot lose it."""
    with open(path, "a") as f:
        f.write(json.dumps(what) + "\n")
        f.flush()
        os.fsync(f.fileno())


def count_effects(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def make_tools(workdir: str) -> list[Any]:
    outbox = os.path.join(workdir, "outbox.jsonl")
    payments = os.path.join(workdir, "payments.jsonl")
    crash_flag = os.path.join(workdir, "crash-inside-tool")

    @tool
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        effect(outbox, {"to": to, "subject": subject, "pid": os.getpid()})
        if os.path.exists(crash_flag):
            os.remove(crash_flag)
            os._exit(9)  # the process dies after the email left, before the tool returned
        return f"email to {to} sent"

    @tool
    def pay(amount: int, to: str) -> str:
        """Pay someone."""
        effect(payments, {"amount": amount, "to": to, "pid": os.getpid()})
        return f"paid {amount} to {to}"

    return [send_email, pay]


class CrashAfterToolSaver(BaseCheckpointSaver):
    """Delegates to a saver, but the process dies as it is about to save a tool's result once.

    That is the moment "the email was sent, LangGraph has not written it down yet". LangGraph
    hands the tool task's writes (``put_writes``) and the step's checkpoint (``put``) to its
    background pool as two jobs, which can run in either order or at once: a crash in
    ``put_writes`` alone let a loaded machine land the checkpoint holding the result first, and
    the resumed plain agent then had nothing to repeat. So whichever save first carries a tool
    message dies, before the inner saver sees it.
    """

    def __init__(self, inner: BaseCheckpointSaver, flag: str) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.flag = flag

    def get_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Any:
        return self.inner.list(config, **kwargs)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._die_before_saving(checkpoint.get("channel_values", {}).values())
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._die_before_saving(v for _, v in writes)
        return self.inner.put_writes(config, writes, task_id, task_path)

    def _die_before_saving(self, values: Any) -> None:
        if os.path.exists(self.flag) and any(
            isinstance(v, list) and any(getattr(m, "type", "") == "tool" for m in v) for v in values
        ):
            os._exit(9)  # the flag stays: the other save, running at once, must die too

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.inner.get_next_version(current, channel)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)


def plain_saver(path: str) -> SqliteSaver:
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False, timeout=30))
    saver.setup()
    return saver


def build_graph(
    model: ScriptedChatModel,
    tool_node: Any,
    *,
    checkpointer: Any,
    store: Any = None,
    brief: Callable[[list[BaseMessage], Any], list[BaseMessage]] | None = None,
    approval_gate: bool = False,
) -> Any:
    """agent -> tools -> agent ..., the shape of most LangGraph tool loops.

    ``approval_gate`` adds the hand-written approval step LangGraph's docs show: interrupt,
    and on "yes" let the tool node run whatever call the saved message holds.
    """

    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        msgs: list[BaseMessage] = list(state["messages"])
        if brief is not None:
            msgs = brief(msgs, config)
        return {"messages": [model.invoke(msgs)]}

    def approval(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        calls = getattr(last, "tool_calls", [])
        answer = interrupt({"calls": [dict(c) for c in calls]})
        if answer.get("type") != "approve":
            raise RuntimeError("rejected")
        return {}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", tool_node)
    g.add_edge(START, "agent")
    if approval_gate:
        g.add_node("approval", approval)
        g.add_conditional_edges(
            "agent", tools_condition, {"tools": "approval", "__end__": "__end__"}
        )
        g.add_edge("approval", "tools")
    else:
        g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer, store=store)


def plain_tool_node(tools: list[Any]) -> ToolNode:
    return ToolNode(tools)


def first_system_text(model: ScriptedChatModel) -> str | None:
    """The system message the model was given on its last call (the briefing), if any."""
    for msgs in reversed(model.seen):
        for m in msgs:
            if isinstance(m, SystemMessage):
                return str(m.content)
    return None
