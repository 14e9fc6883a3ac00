"""Harness of the resume kill matrix (``tests/test_resume_matrix.py``, issue 32).

An 8-step refund task: ``lookup_order`` (pure), ``update_working_state`` (recall tool),
``check_policy`` (pure), ``issue_refund`` (external), ``set_pointer`` (recall tool),
``send_email`` (external), ``update_crm`` (idempotent), then the final answer. Every tool body
appends a ``run`` line to the case's effect log, and every real effect an ``effect`` line with
its idempotency key, each written before the tool goes on, so a count survives any kill. ``update_crm`` dedupes by its key
as a real API does: the same key again changes nothing, a new key updates again.

``RefundModel`` decides from its input only (the briefing system message and the messages),
never from a counter or a file, so a killed process and its replacement, on the same thread or
a new one, act alike: it walks the steps in order and asks ``outcome`` what it can see of each
(``briefing_outcome`` is the one function that reads the briefing's format).
``naive=True`` calls a step again whenever it cannot see its outcome; the careful model stops.

A case runs two forked children of the test process (which has imported everything, so a
child starts in milliseconds): the first runs the task and is SIGKILLed at its kill point (the
k-th checkpoint written, or inside a tool before or after its effect); the second, a fresh
process, resumes on the same thread (``invoke(None)`` or a new "continue" message) or on a new
thread of the same ``agent_id``. The parent then reads the effect log and the records.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import random
import re
import signal
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_recall import (
    ActionEnd,
    DurableToolNode,
    RecallMiddleware,
    RecallStore,
    recall_tools,
    with_briefing,
)
from langgraph_recall.checkpoint import _faults
from langgraph_recall.store._models import Action
from langgraph_recall.tools import IdempotencyKey

# --- the task ----------------------------------------------------------------------------------

ORDER = "O-4471"
REQUEST = f"Refund order {ORDER} (42.50 EUR): the parcel never arrived."
CONTINUE = "continue"
FINAL = f"Refund of {ORDER} finished: 42.50 EUR refunded, customer emailed, CRM updated."


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any]
    kind: str  # "pure", "recall" (a recall tool), "external" or "idempotent"

    @property
    def safe_to_repeat(self) -> bool:
        """A read or a rewrite of the agent's own notes: calling it again harms nothing."""
        return self.kind in ("pure", "recall")


STEPS = (
    Step("lookup_order", {"order_id": ORDER}, "pure"),
    Step(
        "update_working_state", {"goal": f"refund {ORDER}", "plan": "refund, email, crm"}, "recall"
    ),
    Step("check_policy", {"order_id": ORDER, "amount": 42.5}, "pure"),
    Step("issue_refund", {"order_id": ORDER, "amount": 42.5}, "external"),
    Step("set_pointer", {"name": "refund", "target": f"refunds/{ORDER}"}, "recall"),
    Step(
        "send_email", {"to": "ana@example.com", "subject": f"Your refund for {ORDER}"}, "external"
    ),
    Step("update_crm", {"order_id": ORDER, "status": "refunded"}, "idempotent"),
)
# What the briefing shows once a recall tool's step is done: its working state or pointer.
NOTES = {"update_working_state": f"goal: refund {ORDER}", "set_pointer": f"refunds/{ORDER}"}
CLASSES = {s.tool: s.kind for s in STEPS if s.kind != "recall"}
DURABLE = tuple(s.tool for s in STEPS if s.kind in ("external", "idempotent"))
OWN_TOOLS = tuple(s.tool for s in STEPS if s.kind != "recall")

# --- what the model can see ----------------------------------------------------------------------

# The phrases a durable call line of the briefing ends with (notes/OUTCOMES.md), in the order
# they are tested: "not done" before "done", since the first contains the second.
_PHRASES = (
    "not done",
    "done",
    "failed",
    "in doubt",
    "not started yet",
    "refused",
    "waiting for approval",
)
WAIT = ("in doubt", "not started yet", "waiting for approval")


def _text(m: BaseMessage) -> str:
    return m.content if isinstance(m.content, str) else str(m.content)


def briefing_outcome(tool_name: str, briefing: str) -> str | None:
    """What the briefing says of ``tool_name``'s latest call: one of ``_PHRASES``, or "done"
    for a recorded tool turn ("tool <name>: ..."), "in doubt" for a call listed under a
    heading that says "in doubt", or None when it shows no outcome.

    The one place that reads the briefing's format: adapt it here if the format changes."""
    found: str | None = None
    if tool_name in NOTES and NOTES[tool_name] in briefing:
        found = "done"  # a recall tool's call shows as what it wrote down
    doubtful = False  # under a heading of calls in doubt
    for line in briefing.splitlines():
        if line.startswith("#"):
            doubtful = "in doubt" in line.lower()
        elif doubtful and re.match(rf"- {tool_name}\(", line) and " -> " not in line:
            found = "in doubt"
            continue
        turn = re.search(rf"\btool {tool_name}: (.*)", line)
        if turn:
            found = "in doubt" if "is UNKNOWN" in turn.group(1) else "done"
            continue
        call = re.search(rf"\b{tool_name}\(.*?\) -> (.*)", line)
        if call:
            found = next((p for p in _PHRASES if call.group(1).startswith(p)), found)
    return found


def message_outcome(tool_name: str, convo: Sequence[BaseMessage]) -> str | None:
    """What the conversation's latest ToolMessage of ``tool_name`` says (None: there is none)."""
    for m in reversed(convo):
        if isinstance(m, ToolMessage) and m.name == tool_name:
            text = _text(m)
            if text.startswith("[langgraph-recall] "):
                # An answer the hooks put in for a call its thread never answered: its
                # outcome from the records, worded as the briefing's (" -> <phrase>").
                told = text.split(" -> ", 1)[1] if " -> " in text else ""
                if told.startswith("no answer"):
                    return "not done"
                return next((p for p in _PHRASES if told.startswith(p)), None)
            recall = (m.artifact or {}).get("recall", {}) if isinstance(m.artifact, dict) else {}
            if recall.get("code") == "in_doubt" or "is UNKNOWN" in _text(m):
                return "in doubt"
            if recall.get("code"):
                return "refused"
            return "failed" if m.status == "error" else "done"
    return None


def outcome(tool_name: str, briefing: str, convo: Sequence[BaseMessage]) -> str | None:
    """What the model can see of ``tool_name``'s step. "done" from either source wins (an old
    thread's call settled "not done" in the briefing, then called again here and answered);
    otherwise the briefing, which tells the records' state now, before an earlier answer."""
    told, answered = briefing_outcome(tool_name, briefing), message_outcome(tool_name, convo)
    if "done" in (told, answered):
        return "done"
    return told or answered


def _asked(tool_name: str, briefing: str, convo: Sequence[BaseMessage]) -> bool:
    """Whether a call of ``tool_name`` was made before (visible as a call, outcome or not)."""
    if re.search(rf"\b{tool_name}\(", briefing):
        return True
    return any(
        isinstance(m, AIMessage) and any(c["name"] == tool_name for c in m.tool_calls)
        for m in convo
    )


def decide(messages: Sequence[BaseMessage], *, naive: bool) -> tuple[str, list[Step]]:
    """The next reply, from the model input alone: (text, the step to call, if any)."""
    briefing = "\n".join(_text(m) for m in messages if isinstance(m, SystemMessage))
    convo = [m for m in messages if not isinstance(m, SystemMessage)]
    asked_for = any(REQUEST in _text(m) for m in convo if isinstance(m, HumanMessage))
    if not asked_for and f"user: {REQUEST}" not in briefing:
        return "I cannot see what you asked me to do; please tell me the task.", []
    for step in STEPS:
        seen = outcome(step.tool, briefing, convo)
        if seen == "done":
            continue
        if seen in WAIT:
            return f"Waiting: {step.tool} is {seen}; a person or a resolver must settle it.", []
        if seen in ("failed", "refused"):
            return f"Stopped: {step.tool} {seen}.", []
        if seen is None and _asked(step.tool, briefing, convo):
            if not (naive or step.safe_to_repeat):
                return f"I cannot see the outcome of {step.tool}; I stop here.", []
        return f"Next: {step.tool}.", [step]  # never asked, "not done", or (naive) unseen
    return FINAL, []


class RefundModel(BaseChatModel):
    """A chat model whose every reply follows from its input (``decide``).

    Message and call ids are fresh on every reply, as a provider's are: unique per thread and
    per run, so nothing of one run's replies is mistaken for another's."""

    naive: bool = False

    @property
    def _llm_type(self) -> str:
        return "refund-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> RefundModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text, steps = decide(messages, naive=self.naive)
        config = var_child_runnable_config.get() or {}
        thread = (config.get("configurable") or {}).get("thread_id", "none")
        calls = [
            {
                "name": s.tool,
                "args": dict(s.args),
                "id": f"call-{uuid.uuid4().hex[:12]}",
                "type": "tool_call",
            }
            for s in steps
        ]
        msg = AIMessage(text, tool_calls=calls, id=f"ai-{thread}-{uuid.uuid4().hex[:12]}")
        return ChatResult(generations=[ChatGeneration(message=msg)])


# --- the tools and their effect log --------------------------------------------------------------

# Set in a child only: the case's effect log, and (tool, "before" | "after") where a tool
# SIGKILLs its process. The tools read them when called, so they are built once, in the parent.
LOG = ""
KILL_IN_TOOL: tuple[str, str] | None = None


def log_line(path: str, **fields: Any) -> None:
    """Append one JSON line. The write is in the kernel when it returns, so it survives the
    SIGKILL that may follow (the matrix kills processes, not the machine: no fsync needed)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({**fields, "pid": os.getpid()}) + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _point(tool_name: str, where: str) -> None:
    if KILL_IN_TOOL == (tool_name, where):
        os.kill(os.getpid(), signal.SIGKILL)


def _effect(tool_name: str, key: str | None, result: str) -> str:
    """A tool body: its run line, the kill point before, the effect, the kill point after."""
    log_line(LOG, kind="run", tool=tool_name, key=key)
    _point(tool_name, "before")
    dedupe = CLASSES[tool_name] == "idempotent"
    if CLASSES[tool_name] != "pure" and not (
        dedupe and any(e["kind"] == "effect" and e["key"] == key for e in read_log(LOG))
    ):
        log_line(LOG, kind="effect", tool=tool_name, key=key, result=result)
    _point(tool_name, "after")
    return result


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return _effect("lookup_order", None, f"{order_id}: 42.50 EUR, ana@example.com")


@tool
def check_policy(order_id: str, amount: float) -> str:
    """Check the refund policy for an order."""
    return _effect("check_policy", None, f"{order_id}: a refund of {amount} is allowed")


@tool
def issue_refund(order_id: str, amount: float, key: IdempotencyKey) -> str:
    """Refund an order (money moves: never twice)."""
    return _effect("issue_refund", key, f"refund R-{key[-6:]} of {amount} for {order_id}")


@tool
def send_email(to: str, subject: str, key: IdempotencyKey) -> str:
    """Email a customer."""
    return _effect("send_email", key, f"email to {to} sent: {subject}")


@tool
def update_crm(order_id: str, status: str, key: IdempotencyKey) -> str:
    """Set an order's status in the CRM (the CRM dedupes by key)."""
    return _effect("update_crm", key, f"crm: {order_id} is {status}")


REFUND_TOOLS = [lookup_order, check_policy, issue_refund, send_email, update_crm]


def resolve_from_log(action: Action) -> ActionEnd:
    """A resolver that asks the real system (the effect log) whether a call's key took effect."""
    for e in read_log(LOG):
        if e["kind"] == "effect" and e["key"] == action.idempotency_key:
            return ActionEnd("done", result=e["result"], resolution="found in the effect log")
    return ActionEnd("not_done", resolution="no effect with this key in the effect log")


# --- the two graph styles ---------------------------------------------------------------------

STYLES = ("custom", "middleware")


@functools.cache
def durable_part(style: str, resolver: bool) -> Any:
    """The style's durable part: a ``DurableToolNode``, or a ``RecallMiddleware``. Built in the
    parent before it forks (building the tools' schemas is most of a child's CPU otherwise);
    each child gets its own copy, untouched by any run."""
    settle = resolve_from_log if resolver else None
    if style == "custom":
        return DurableToolNode([*REFUND_TOOLS, *recall_tools()], classes=CLASSES, resolver=settle)
    if style == "middleware":
        return RecallMiddleware(classes=CLASSES, resolver=settle)
    raise ValueError(style)


def build(style: str, store: RecallStore, *, naive: bool, resolver: bool) -> Any:
    """The refund agent: ``DurableToolNode`` in a custom graph with ``with_briefing`` (the
    README's example), or ``create_agent`` with ``RecallMiddleware``."""
    model = RefundModel(naive=naive)
    checkpointer = store.checkpointer()
    if style == "custom":

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke(with_briefing(state["messages"]))]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", durable_part(style, resolver))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile(store=store, checkpointer=checkpointer)
    return create_agent(
        model,
        REFUND_TOOLS,
        system_prompt="You handle refunds.",
        middleware=[durable_part(style, resolver)],
        checkpointer=checkpointer,
        store=store,
    )


# --- one case: a killed run and a resume, each a forked child ------------------------------------

RESUMES = ("same_none", "same_continue", "new_thread")


@dataclass(frozen=True)
class Case:
    style: str  # STYLES
    db: str  # "sqlite" or "postgres"
    kill: str  # "put=K" (after the K-th checkpoint) or "<tool>:before" / "<tool>:after"
    resume: str  # RESUMES
    resolver: bool
    naive: bool

    @property
    def id(self) -> str:
        return "-".join(
            [
                self.style,
                self.db,
                self.kill.replace(":", "-").replace("=", ""),
                self.resume,
                "resolver" if self.resolver else "noresolver",
                "naive" if self.naive else "careful",
            ]
        )


def _run(job: dict[str, Any]) -> int:
    """One child: open the store, arm the kill point, run or resume the task, write the answer."""
    global LOG, KILL_IN_TOOL
    LOG = job["log"]
    # "process": every commit survives the process being killed, which is what is tested.
    store = RecallStore.open(job["target"], durability="process")
    kill = job.get("kill") or ""
    if kill.startswith("put="):
        _faults.arm(f"after_put={kill[4:]}:kill")
    elif kill:
        name, _, where = kill.partition(":")
        KILL_IN_TOOL = (name, where)
    graph = build(job["style"], store, naive=job["naive"], resolver=job["resolver"])
    config = {"configurable": {"thread_id": job["thread"], "agent_id": job["agent"]}}
    text = job.get("text")
    inputs = None if text is None else {"messages": [HumanMessage(text)]}
    out = graph.invoke(inputs, config, durability="sync")
    with open(job["answer"], "w") as f:
        f.write(_text(out["messages"][-1]) if out and out.get("messages") else "")
    if job.get("count_to"):
        with open(job["count_to"], "w") as f:
            f.write(str(_faults._hits.get("after_put", 0)))
    store.close()
    return 0


def run_forked(job: dict[str, Any], timeout: float = 120.0) -> int:
    """``_run(job)`` in a forked child; its exit status (negative: the signal that ended it)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _run(job)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -999
        time.sleep(0.005)


@dataclass
class Result:
    case: Case
    killed: bool  # the first run died at its kill point
    resumed: int  # the resume's exit status
    answer: str  # the resume's last message
    effects: Counter[str]  # real effects per tool
    runs: Counter[str]  # tool bodies started per tool (own tools) or calls made (recall tools)
    open_calls: list[str] = field(default_factory=list)  # calls left open: "tool(status)"

    @property
    def doubled(self) -> list[str]:
        return sorted(t for t, n in self.effects.items() if n > 1)

    @property
    def redone(self) -> int:
        return sum(n - 1 for n in self.runs.values() if n > 1)

    @property
    def completed(self) -> bool:
        return self.answer == FINAL and all(self.effects[t] == 1 for t in DURABLE)

    def describe(self) -> str:
        return (
            f"{self.case.id}: killed={self.killed} resume_exit={self.resumed} "
            f"answer={self.answer[:70]!r} effects={dict(self.effects)} "
            f"redone={self.redone} open={self.open_calls}"
        )


def _files(folder: str, agent: str) -> dict[str, str]:
    return {
        "log": os.path.join(folder, f"{agent}.log"),
        "answer": os.path.join(folder, f"{agent}.answer"),
    }


def run_case(case: Case, target: str, folder: str) -> Result:
    """Run ``case`` on the database ``target``, with its files in ``folder``."""
    durable_part(case.style, case.resolver)  # built here, once, before the children fork
    agent = f"refund-{uuid.uuid4().hex[:10]}"
    job = {
        "target": target,
        "style": case.style,
        "agent": agent,
        "naive": case.naive,
        "resolver": case.resolver,
        **_files(folder, agent),
    }
    first = run_forked({**job, "thread": f"{agent}-A", "text": REQUEST, "kill": case.kill})
    _release_dead_lease(target, agent)
    thread, text = {
        "same_none": (f"{agent}-A", None),
        "same_continue": (f"{agent}-A", CONTINUE),
        "new_thread": (f"{agent}-B", CONTINUE),
    }[case.resume]
    resumed = run_forked({**job, "thread": thread, "text": text})
    return _result(case, target, folder, agent, killed=first == -signal.SIGKILL, resumed=resumed)


def count_puts(style: str, target: str, folder: str) -> tuple[int, Result]:
    """How many checkpoints a clean run of the task writes (the kill points ``put=1..N``), and
    what that run did."""
    agent = f"clean-{uuid.uuid4().hex[:10]}"
    case = Case(style, "?", "put=100000", "same_none", resolver=False, naive=False)
    count_to = os.path.join(folder, f"{agent}.puts")
    # A kill point past any run's end: the fault counter counts every put on the way.
    job = {
        "target": target,
        "style": style,
        "agent": agent,
        "naive": False,
        "resolver": False,
        "thread": agent,
        "text": REQUEST,
        "kill": case.kill,
        **_files(folder, agent),
        "count_to": count_to,
    }
    durable_part(style, False)
    code = run_forked(job)
    puts = int(_read(count_to) or -1)
    return puts, _result(case, target, folder, agent, killed=False, resumed=code)


def _result(
    case: Case, target: str, folder: str, agent: str, *, killed: bool, resumed: int
) -> Result:
    """What the runs of ``agent`` did: its effect log, its last answer, its records."""
    files = _files(folder, agent)
    entries = read_log(files["log"])
    with RecallStore.open(target) as store:
        open_calls = [f"{a.tool}({a.status})" for a in store.actions(agent, open_only=True)]
        # The recall tools write no effect line: count the calls the model made of them.
        asked = Counter(
            c["name"]
            for t in store.turns(agent)
            if isinstance(t.message, AIMessage)
            for c in t.message.tool_calls
            if c["name"] not in OWN_TOOLS
        )
    return Result(
        case=case,
        killed=killed,
        resumed=resumed,
        answer=_read(files["answer"]),
        effects=Counter(e["tool"] for e in entries if e["kind"] == "effect"),
        runs=Counter(e["tool"] for e in entries if e["kind"] == "run") + asked,
        open_calls=open_calls,
    )


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def _release_dead_lease(target: str, agent: str) -> None:
    """What a supervisor does after reaping a worker it killed: give its lease up at once, so
    the resume need not wait out the lease's expiry. The holder (``host:pid:uuid``) is dead."""
    with RecallStore.open(target) as store:
        lease = store.lease(agent)
        if lease is not None and lease.expires_at > 0:
            store.release_lease(agent, lease.holder, lease.epoch)


# --- what must be true (issue 32) -----------------------------------------------------------------


def may_have_started(case: Case) -> bool:
    """Whether the kill can leave a call in doubt: inside an external tool, whose effect may
    have begun. Killed at a checkpoint no tool was running; a pure tool repeats harmlessly and
    an idempotent one re-runs under its own key."""
    tool_name = case.kill.partition(":")[0]
    return ":" in case.kill and CLASSES.get(tool_name) == "external"


def problems(r: Result) -> list[str]:
    """What ``r`` breaks of issue 32's "What must be true" (empty: nothing)."""
    out = []
    if not r.killed:
        out.append("the first run was not killed at its kill point")
    if r.resumed != 0:
        out.append(f"the resume exited with {r.resumed}")
    if r.doubled:
        out.append(f"effects doubled: {r.doubled}")
    if r.redone > 1:
        out.append(f"{r.redone} steps redone after one crash")
    killed_tool = r.case.kill.partition(":")[0]
    again = {t: n for t, n in r.runs.items() if t in DURABLE and t != killed_tool and n > 1}
    if again:
        out.append(f"calls that never started before the crash ran more than once: {again}")
    if r.case.resolver or not may_have_started(r.case):
        # With a resolver every run completes; without one, so does every run whose crash
        # left nothing that may have started: such a call runs exactly once.
        if not r.completed:
            out.append("the task did not complete")
        if r.open_calls:
            out.append(f"calls left open: {r.open_calls}")
        return out
    # No resolver, killed inside an external tool: that call, and only it, stays in doubt;
    # the model sees it and waits, and nothing after it runs.
    tool_name = killed_tool
    if r.open_calls != [f"{tool_name}(open)"]:
        out.append(f"open calls {r.open_calls}, expected only {tool_name} in doubt")
    if not r.answer.startswith(f"Waiting: {tool_name} is in doubt"):
        out.append(f"the model was not told {tool_name} is in doubt")
    later = [s.tool for s in STEPS[[s.tool for s in STEPS].index(tool_name) + 1 :]]
    if any(r.effects[t] for t in later):
        out.append(f"steps after the call in doubt ran: {dict(r.effects)}")
    return out


# --- which cases run --------------------------------------------------------------------------

PUTS = {"custom": 17, "middleware": 19}  # checkpoints a clean run writes (test_clean_run_...)
TOOL_KILLS = tuple(f"{t}:{w}" for t in OWN_TOOLS for w in ("before", "after"))


def kill_points(style: str) -> list[str]:
    return [f"put={k}" for k in range(1, PUTS[style] + 1)] + list(TOOL_KILLS)


# The configuration the issue measured worst: DurableToolNode, a new thread, a resolver.
FULL = Case("custom", "sqlite", "", "new_thread", resolver=True, naive=False)


def full_cases() -> list[Case]:
    """Every kill point, with both models, for ``FULL``."""
    return [
        dataclasses.replace(FULL, kill=k, naive=naive)
        for k in kill_points(FULL.style)
        for naive in (False, True)
    ]


def sampled_cases(seed: int) -> list[Case]:
    """For every other configuration, one kill point of each stratum (a checkpoint, a tool
    before its effect, a tool after it), drawn from a seeded shuffle of the stratum and cycled
    through it, so every kill point of each style is drawn for some configuration."""
    rng = random.Random(seed)
    out = []
    for style in STYLES:
        strata = [
            [f"put={k}" for k in range(1, PUTS[style] + 1)],
            [k for k in TOOL_KILLS if k.endswith(":before")],
            [k for k in TOOL_KILLS if k.endswith(":after")],
        ]
        for stratum in strata:
            rng.shuffle(stratum)
        draws = [itertools.cycle(s) for s in strata]
        for db, resume, resolver, naive in itertools.product(
            ("sqlite", "postgres"), RESUMES, (True, False), (False, True)
        ):
            if (style, db, resume, resolver) == (FULL.style, FULL.db, FULL.resume, FULL.resolver):
                continue
            out += [Case(style, db, next(d), resume, resolver, naive) for d in draws]
    return out
