"""Agents for the briefing tests: a model that acts on what it is given, a multi-step task with
large outputs and a real side effect, and the same agent in the three graph styles.

``TaskModel`` keeps no position of its own: each reply follows from the model input alone (the
briefing in the system message and the conversation), the way a real model resumes. So a
killed process and its replacement, on the same thread or a new one, behave alike, and what
the model was given decides whether it redoes work.

Run as a script, this file is one worker process of the crash tests:
``python tests/fix_agents.py '{"style": "react", "target": ..., "thread": "A", ...}'``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_recall._hooks import (
    post_model_hook,
    pre_model_hook,
    record_node,
    with_briefing,
)
from langgraph_recall._middleware import RecallMiddleware
from langgraph_recall._recall_tools import recall_tools
from langgraph_recall.tools import DurableToolNode

STEPS = 6
GOAL = f"Run the {STEPS} steps of the billing migration, each exactly once"
TASK = f"TASK-0: {GOAL}."
OUTPUT_CHARS = 10_000  # each step's result: over the store's output threshold, stored whole
STYLES = ("react", "custom", "middleware")


# --- the model -------------------------------------------------------------------------------


def _text(m: BaseMessage) -> str:
    return m.content if isinstance(m.content, str) else str(m.content)


def _progress(system: str, messages: Sequence[BaseMessage]) -> int:
    """Steps done, from the briefing's working state and from state updates in the conversation."""
    done = [int(n) for n in re.findall(r"progress: done through step (\d+)", system)]
    for m in messages:
        if isinstance(m, AIMessage):
            for c in m.tool_calls:
                found = re.match(r"done through step (\d+)", str(c["args"].get("progress", "")))
                if c["name"] == "update_working_state" and found:
                    done.append(int(found.group(1)))
    return max(done, default=0)


def _in_doubt(system: str, messages: Sequence[BaseMessage]) -> set[int]:
    """Steps whose work call is unconfirmed: listed in the briefing, or reported unknown."""
    steps = {int(n) for n in re.findall(r"- work\(step=(\d+)\) \[action", system)}
    for m in messages:
        if isinstance(m, ToolMessage) and m.name == "work" and "UNKNOWN" in _text(m):
            steps.update(int(n) for n in re.findall(r"work\(step=(\d+)\)", _text(m)))
    return steps


def _checked(messages: Sequence[BaseMessage]) -> dict[int, bool]:
    out: dict[int, bool] = {}
    for m in messages:
        if isinstance(m, ToolMessage) and m.name == "check":
            found = re.match(r"step (\d+) (happened|did not happen)", _text(m))
            if found:
                out[int(found.group(1))] = found.group(2) == "happened"
    return out


def _call(tool_name: str, **args: Any) -> dict[str, Any]:
    return {
        "name": tool_name,
        "args": args,
        "id": f"call-{uuid.uuid4().hex[:12]}",
        "type": "tool_call",
    }


def decide(messages: Sequence[BaseMessage]) -> AIMessage:
    """The next reply, from the model input alone."""
    system = "\n".join(_text(m) for m in messages if isinstance(m, SystemMessage))
    convo = [m for m in messages if not isinstance(m, SystemMessage)]
    done = _progress(system, convo)
    checked = _checked(convo)
    mid = f"ai-{uuid.uuid4().hex}"  # unique per agent, as a provider's ids are
    has_goal = "goal: " in system or any(
        isinstance(m, AIMessage) and any("goal" in c["args"] for c in m.tool_calls) for m in convo
    )
    if not has_goal:
        return AIMessage(
            "", id=mid, tool_calls=[_call("update_working_state", goal=GOAL, plan="work(step=k)")]
        )
    # A step just finished (its result, or a check that found it happened): write it down.
    last = convo[-1] if convo else None
    if isinstance(last, ToolMessage):
        finished = None
        if last.name == "work" and _text(last).startswith("RESULT-"):
            finished = int(_text(last).split("-")[1])
        elif last.name == "check" and checked.get(done + 1):
            finished = done + 1
        if finished is not None and finished > done:
            return AIMessage(
                "",
                id=mid,
                tool_calls=[
                    _call("update_working_state", progress=f"done through step {finished}"),
                    _call(
                        "set_pointer", name=f"step-{finished}", target=f"/out/step-{finished}.txt"
                    ),
                ],
            )
    for step in sorted(_in_doubt(system, convo)):
        if step > done and step not in checked:
            return AIMessage(
                f"Checking step {step}.", id=mid, tool_calls=[_call("check", step=step)]
            )
    if done < STEPS:
        nxt = done + 1
        return AIMessage(f"Working on step {nxt}.", id=mid, tool_calls=[_call("work", step=nxt)])
    return AIMessage(f"All {STEPS} steps done.", id=mid)


class TaskModel(BaseChatModel):
    """A chat model whose reply follows from its input (see ``decide``); ``seen`` keeps every
    input in this process, and ``seen_path`` (JSON lines) across processes."""

    seen_path: str | None = None
    seen: list[list[BaseMessage]] = []

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen = []

    @property
    def _llm_type(self) -> str:
        return "task"

    def bind_tools(self, tools: Any, **kwargs: Any) -> TaskModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        if self.seen_path:
            with open(self.seen_path, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "input": dump(messages)}) + "\n")
        return ChatResult(generations=[ChatGeneration(message=decide(messages))])


def dump(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [
        {
            "type": m.type,
            "id": m.id,
            "content": _text(m),
            "calls": [
                f"{c['name']}({json.dumps(c['args'], sort_keys=True)})"
                for c in getattr(m, "tool_calls", [])
            ],
        }
        for m in messages
    ]


def read_seen(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# --- the tools: a side effect that survives a kill ---------------------------------------------


def task_tools(effects_path: str, kill_at: int | None = None) -> list[BaseTool]:
    """``work(step)`` appends to ``effects_path`` (fsynced) and returns a large result; with
    ``kill_at`` it SIGKILLs its own process right after that step's effect, before answering.
    ``check(step)`` reads the effects file."""

    @tool
    def work(step: int) -> str:
        """Run one step of the migration."""
        with open(effects_path, "a") as f:
            f.write(f"{step}\n")
            f.flush()
            os.fsync(f.fileno())
        if kill_at == step:
            os.kill(os.getpid(), signal.SIGKILL)
        head = f"RESULT-{step}-rows-migrated "
        return head + "." * (OUTPUT_CHARS - len(head))

    @tool
    def check(step: int) -> str:
        """Check whether a step took effect."""
        return (
            f"step {step} {'happened' if step in read_effects(effects_path) else 'did not happen'}"
        )

    return [work, check]


CLASSES = {"work": "external", "check": "pure"}


def read_effects(path: str) -> list[int]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(line) for line in f if line.strip()]


# --- the three graph styles --------------------------------------------------------------------


def build(
    style: str,
    model: TaskModel,
    tools: list[BaseTool],
    *,
    store: Any,
    checkpointer: Any,
    token_budget: int = 2000,
) -> Any:
    """The task agent as ``create_react_agent`` with hooks, a custom ``StateGraph``, or
    ``create_agent`` with ``RecallMiddleware``; all with durable tools and the recall tools."""
    if style == "react":
        from langgraph.prebuilt import create_react_agent

        node = DurableToolNode([*tools, *recall_tools()], classes=CLASSES)
        return create_react_agent(
            model,
            node,
            pre_model_hook=pre_model_hook.with_options(token_budget=token_budget),
            post_model_hook=post_model_hook,
            version="v2",
            checkpointer=checkpointer,
            store=store,
        )
    if style == "custom":

        def call_model(state: MessagesState) -> dict[str, Any]:
            return {
                "messages": [
                    model.invoke(with_briefing(state["messages"], token_budget=token_budget))
                ]
            }

        async def acall_model(state: MessagesState) -> dict[str, Any]:
            from langgraph_recall._hooks import awith_briefing

            messages = await awith_briefing(state["messages"], token_budget=token_budget)
            return {"messages": [await model.ainvoke(messages)]}

        from langchain_core.runnables import RunnableLambda

        g = StateGraph(MessagesState)
        g.add_node("model", RunnableLambda(call_model, acall_model))
        g.add_node("record", record_node)
        g.add_node("tools", DurableToolNode([*tools, *recall_tools()], classes=CLASSES))
        g.add_edge(START, "model")
        g.add_edge("model", "record")
        g.add_conditional_edges("record", tools_condition, {"tools": "tools", END: END})
        g.add_edge("tools", "model")
        return g.compile(checkpointer=checkpointer, store=store)
    if style == "middleware":
        from langchain.agents import create_agent

        return create_agent(
            model,
            tools,
            system_prompt="You migrate billing data.",
            middleware=[RecallMiddleware(classes=CLASSES, token_budget=token_budget)],
            checkpointer=checkpointer,
            store=store,
        )
    raise ValueError(style)


def config(thread: str, agent: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "agent_id": agent}, "recursion_limit": 200}


# --- one worker process -----------------------------------------------------------------------


def worker(job: dict[str, Any]) -> int:
    """Open the store, run the agent on ``job["thread"]`` (resuming it, or with a new task
    message), and exit. A ``kill_at`` step kills the process mid-task."""
    from langgraph_recall.store import RecallStore

    store = RecallStore.open(job["target"])
    saver = store.checkpointer(lease_ttl=job.get("lease_ttl", 3.0), wait=60.0)
    model = TaskModel(seen_path=job["seen"])
    graph = build(
        job["style"],
        model,
        task_tools(job["effects"], job.get("kill_at")),
        store=store,
        checkpointer=saver,
        token_budget=job.get("token_budget", 2000),
    )
    cfg = config(job["thread"], job["agent"])
    inputs = None if job.get("resume") else {"messages": [HumanMessage(job.get("text", TASK))]}
    if job.get("use_async"):
        out = asyncio.run(graph.ainvoke(inputs, cfg))
    else:
        out = graph.invoke(inputs, cfg)
    with open(job["seen"] + ".final", "a") as f:
        f.write(_text(out["messages"][-1]) + "\n")
    store.close()
    return 0


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message=".*create_react_agent has been moved.*")
    sys.exit(worker(json.loads(sys.argv[1])))


def run_task(graph: Any, thread: str, agent: str, text: str, *, use_async: bool) -> dict[str, Any]:
    """One run of ``graph`` with a new human message, sync or async."""
    cfg = config(thread, agent)
    inputs = {"messages": [HumanMessage(text)]}
    if use_async:
        return asyncio.run(graph.ainvoke(inputs, cfg))
    return graph.invoke(inputs, cfg)  # type: ignore[no-any-return]


def repeated_turns(messages: Sequence[BaseMessage]) -> list[str]:
    """Marks of turns (results, tasks, replies) found more than once in one model input."""
    text = "\n".join(_text(m) for m in messages)
    counts: dict[str, int] = {}
    for mark in UNIQUE_MARKS.findall(text):
        counts[mark] = counts.get(mark, 0) + 1
    return sorted(k for k, n in counts.items() if n > 1)


UNIQUE_MARKS = re.compile(r"RESULT-\d+|TASK-\d+|Working on step \d+\.|Checking step \d+\.")
