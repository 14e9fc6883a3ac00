"""Harness for durable tool tests: scripted agents, side-effect tools, real worker processes.

Reusable by other suites (the 12-process payment test builds on it):

- ``email_tool`` / ``charge_tool``: tools whose side effect is a line appended (and fsynced) to
  an effects file, so a count survives any kill; ``read_effects`` counts them.
- ``build_graph(node, script, ...)``: model -> tools -> model loop around any tool node, with
  ``ScriptedChatModel`` (deterministic across processes) and the ``"node"`` (one task for all
  calls of a message, like ``tools_condition``) or ``"send"`` (one task per call) layout.
- ``run_to_end(graph, config, input)``: what a worker does after a restart: resume until the
  agent has finished.
- ``Zygote``: a pre-imported Python process that forks one worker per job, so a test can start
  and ``kill -9`` dozens of real processes without paying the import time each time. Jobs name
  a function as ``"module:function"`` (modules in ``tests/`` import by name) with JSON kwargs;
  its return value is the exit code.
- ``spawn(fn, **kwargs)``: the same job in a fresh interpreter (``subprocess.Popen``).
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolRuntime, tools_condition
from langgraph.types import Send
from typing_extensions import TypedDict

from langgraph_recall.testing import ScriptedChatModel, call, reply
from langgraph_recall.tools import IdempotencyKey, current_idempotency_key

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

__all__ = [
    "State",
    "Zygote",
    "build_graph",
    "call",
    "charge_tool",
    "email_tool",
    "email_worker",
    "key_worker",
    "pay_graph",
    "pay_tool",
    "pay_worker",
    "read_effects",
    "record_effect",
    "reply",
    "run_to_end",
    "spawn",
    "wait_for_effect",
    "zygotes",
]


# --- side effects that survive kill -9 ----------------------------------------------------------


def record_effect(path: str, **fields: Any) -> None:
    """Append one effect as a JSON line and fsync it before returning."""
    line = json.dumps({**fields, "pid": os.getpid(), "t": time.time()}, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_effects(path: str, what: str | None = None) -> list[dict[str, Any]]:
    """The effects recorded in ``path`` (only those of kind ``what``, if given)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        found = [json.loads(line) for line in f if line.strip()]
    return found if what is None else [e for e in found if e.get("what") == what]


def wait_for_effect(path: str, what: str, pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` recorded an effect of kind ``what`` (False on timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.get("pid") == pid for e in read_effects(path, what)):
            return True
        time.sleep(0.005)
    return False


def email_tool(effects: str, *, sleep: float = 0.0, keyed: bool = True) -> BaseTool:
    """``send_email(to, subject)``: records the email, then sleeps ``sleep`` seconds.

    ``keyed``: the tool takes the hidden idempotency key (a plain ToolNode cannot fill it).
    """
    if keyed:

        @tool
        def send_email(to: str, key: IdempotencyKey, subject: str = "hello") -> str:
            """Send an email."""
            record_effect(effects, what="email", to=to, key=key, ctx=current_idempotency_key())
            time.sleep(sleep)
            return f"sent {subject!r} to {to}"

        return send_email

    @tool
    def send_email(to: str, subject: str = "hello") -> str:  # type: ignore[no-redef]
        """Send an email."""
        record_effect(effects, what="email", to=to, key=None, ctx=current_idempotency_key())
        time.sleep(sleep)
        return f"sent {subject!r} to {to}"

    return send_email


def charge_tool(ledger: str, *, honour_keys: bool = True, sleep: float = 0.0) -> BaseTool:
    """``charge(order, amount)`` against a file ledger that, like a payment API, drops a repeated
    idempotency key when ``honour_keys`` (the check and the append hold a file lock)."""

    @tool
    def charge(order: str, amount: str, key: IdempotencyKey) -> str:
        """Charge an order."""
        fd = os.open(ledger + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if honour_keys and any(e.get("key") == key for e in read_effects(ledger)):
                return f"charge {order} already done (key {key[:8]})"
            record_effect(ledger, what="charge", order=order, amount=amount, key=key)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        time.sleep(sleep)
        return f"charged {amount} for {order}"

    return charge


# --- graphs ---------------------------------------------------------------------------------------


def asking_checkpoint(thread_id: str, runtime: ToolRuntime) -> RunnableConfig:
    """The config of the root checkpoint whose AI message asked for the tool call now running:
    a test reads it to see whether that checkpoint was saved before the tool started."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": runtime.execution_info.checkpoint_id,
        }
    }


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_graph(
    node: Any,
    script: Sequence[dict[str, Any]],
    *,
    store: Any = None,
    checkpointer: Any = None,
    layout: str = "node",
    name_prefix: str = "ai",
) -> Any:
    """agent -> tools -> agent, ending when the model answers without tool calls."""
    model = ScriptedChatModel(script, name_prefix=name_prefix)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: State) -> Any:
        last = state["messages"][-1]
        if layout == "send" and isinstance(last, AIMessage) and last.tool_calls:
            return [Send("tools", [tc]) for tc in last.tool_calls]
        if layout == "send-first" and isinstance(last, AIMessage) and last.tool_calls:
            return [Send("tools", [last.tool_calls[0]])]  # the other calls go nowhere
        return tools_condition(state)

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", node)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", "__end__"])
    g.add_edge("tools", "agent")
    return g.compile(store=store, checkpointer=checkpointer)


def finished(graph: Any, config: dict[str, Any]) -> bool:
    snap = graph.get_state(config)
    msgs = (snap.values or {}).get("messages") or []
    return (
        bool(msgs) and isinstance(msgs[-1], AIMessage) and not msgs[-1].tool_calls and not snap.next
    )


def run_to_end(
    graph: Any,
    config: dict[str, Any],
    first_input: Any,
    *,
    durability: str = "async",
    rounds: int = 20,
) -> bool:
    """Start or resume the thread until the agent has answered without tool calls.

    After a crash ``get_state().next`` may be empty while pending writes wait (research 2d), so
    a started thread is always resumed with ``invoke(None)``, never sent its input again.
    """
    for _ in range(rounds):
        started = bool(graph.get_state(config).values)
        graph.invoke(None if started else first_input, config, durability=durability)
        if finished(graph, config):
            return True
    return False


# --- a worker for the kill -9 suites ---------------------------------------------------------------


def email_worker(
    target: str,
    agent_id: str,
    mode: str,
    effects: str,
    emails: int = 5,
    sleep: float = 0.1,
    durability: str = "async",
) -> int:
    """Send ``emails`` emails, one per model turn; exit 0 when the agent has finished.

    ``mode``: ``"durable"`` (DurableToolNode, send_email external) or ``"plain"`` (ToolNode).
    The lease holder id is the agent's, so a restarted worker takes over at once from the one
    that was killed (its process is gone: the test reaped it).
    """
    from langgraph.prebuilt import ToolNode

    from langgraph_recall import RecallStore
    from langgraph_recall.tools import DurableToolNode

    store = RecallStore.open(target)
    try:
        saver = store.checkpointer(lease_ttl=30.0, wait=60.0, holder=f"worker-{agent_id}")
        send = email_tool(effects, sleep=sleep, keyed=mode == "durable")
        node = (
            DurableToolNode([send], classes={"send_email": "external"})
            if mode == "durable"
            else ToolNode([send])
        )
        script = [reply("", call("send_email", to=f"user{i}@example.com")) for i in range(emails)]
        graph = build_graph(
            node,
            [*script, reply("all sent")],
            store=store,
            checkpointer=saver,
            name_prefix=agent_id,
        )
        config = {"configurable": {"thread_id": agent_id}}
        record_effect(effects, what="ready")  # lets a test time its kill from here
        done = run_to_end(
            graph, config, {"messages": [HumanMessage("send the emails")]}, durability=durability
        )
        return 0 if done else 3
    finally:
        store.close()


def pay_tool(effects: str) -> BaseTool:
    """``pay(amount, to)``: records the payment with its idempotency key."""

    @tool
    def pay(amount: int, to: str, key: IdempotencyKey) -> str:
        """Pay someone."""
        record_effect(effects, what="pay", amount=amount, to=to, key=key)
        return f"paid {amount} to {to}"

    return pay


def pay_graph(
    store: Any, saver: Any, effects: str, *, amount: int = 10, to: str = "alice", prefix: str = "ai"
) -> Any:
    """An agent that asks once for ``pay(amount, to)``, gated by approval (external)."""
    from langgraph_recall.tools import DurableToolNode

    node = DurableToolNode([pay_tool(effects)], classes={"pay": "external"}, approve=("pay",))
    script = [reply("", call("pay", amount=amount, to=to)), reply("done")]
    return build_graph(node, script, store=store, checkpointer=saver, name_prefix=prefix)


def pay_worker(target: str, agent_id: str, effects: str, step: str, resume: Any = None) -> int:
    """One step of the pay agent in its own process: ``start``, ``resume`` (with ``resume``)
    or ``continue`` (``invoke(None)``, what a restarted worker does)."""
    from langgraph.types import Command

    from langgraph_recall import RecallStore

    store = RecallStore.open(target)
    try:
        saver = store.checkpointer(lease_ttl=30.0, wait=60.0, holder=f"worker-{agent_id}")
        graph = pay_graph(store, saver, effects, prefix=agent_id)
        config = {"configurable": {"thread_id": agent_id}}
        if step == "start":
            graph.invoke({"messages": [HumanMessage("pay alice 10")]}, config)
        elif step == "resume":
            graph.invoke(Command(resume=resume), config)
        else:
            graph.invoke(None, config)
        return 0
    finally:
        store.close()


def key_worker(target: str, agent_id: str, effects: str, step: str, crash_flag: str) -> int:
    """``book`` (idempotent) dies inside the tool the first time, after its effect; then
    ``confirm`` (external) asks a person with ``interrupt()``. Each records the key it got
    three ways: the hidden parameter, ``current_idempotency_key()`` and the runtime config."""
    from langgraph.types import Command, interrupt

    from langgraph_recall import RecallStore
    from langgraph_recall.tools import DurableToolNode

    def seen(what: str, key: str, runtime: Any) -> None:
        record_effect(
            effects,
            what=what,
            key=key,
            ctx=current_idempotency_key(),
            cfg=runtime.config["configurable"].get("recall_idempotency_key"),
        )

    @tool
    def book(room: str, key: IdempotencyKey, runtime: ToolRuntime) -> str:
        """Book a room."""
        seen("book", key, runtime)
        if not os.path.exists(crash_flag):
            open(crash_flag, "w").close()
            os._exit(9)  # killed inside the tool, after its effect
        return f"booked {room}"

    @tool
    def confirm(room: str, key: IdempotencyKey, runtime: ToolRuntime) -> str:
        """Ask a person to confirm."""
        seen("confirm-asked", key, runtime)
        answer = interrupt({"confirm": room})
        seen("confirm-done", key, runtime)
        return f"confirmed: {answer}"

    store = RecallStore.open(target)
    try:
        saver = store.checkpointer(lease_ttl=30.0, wait=60.0, holder=f"worker-{agent_id}")
        node = DurableToolNode(
            [book, confirm], classes={"book": "idempotent", "confirm": "external"}
        )
        script = [
            reply("", call("book", room="r1")),
            reply("", call("confirm", room="r1")),
            reply("ok"),
        ]
        graph = build_graph(node, script, store=store, checkpointer=saver, name_prefix=agent_id)
        config = {"configurable": {"thread_id": agent_id}}
        if step == "start":
            graph.invoke({"messages": [HumanMessage("book r1")]}, config)
        elif step == "resume":
            graph.invoke(Command(resume="yes"), config)
        else:
            graph.invoke(None, config)
        return 0
    finally:
        store.close()


@pytest.fixture(scope="session")
def zygotes() -> Iterator[list[Zygote]]:
    """Three fork servers for the whole session (import them into a test module to use)."""
    started: list[Zygote] = []
    threads = [threading.Thread(target=lambda: started.append(Zygote())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield started
    for z in started:
        z.close()


# --- processes ----------------------------------------------------------------------------------


def _resolve(fn: str) -> Callable[..., Any]:
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _run_job(job: dict[str, Any]) -> int:
    faults = job.get("kwargs", {}).pop("faults", None)
    if faults:  # named fault points (checkpoint/_faults.py), armed in this worker only
        from langgraph_recall.checkpoint import _faults

        os.environ[_faults.ENV] = faults
        _faults._FAULTS = _faults._parse(faults)
        _faults._hits.clear()
    code = _resolve(job["fn"])(**job.get("kwargs", {}))
    return int(code or 0)


class Zygote:
    """A forking worker server (see the module docstring). One job at a time."""

    def __init__(
        self, preload: Sequence[str] = ("fix_tools",), ready_timeout: float = 180.0
    ) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "zygote", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        self._buf = b""
        line = self._line(ready_timeout)
        if line != "ready":
            self.close()
            raise RuntimeError(f"zygote did not start: {line!r}")
        self.pid: int | None = None

    def _line(self, timeout: float | None) -> str | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        assert self.proc.stdout is not None
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError("zygote exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def start(self, fn: str, **kwargs: Any) -> int:
        """Fork a worker running ``fn(**kwargs)``; returns its pid.

        ``faults="tool_ran=1:exit"`` arms named fault points in that worker only.
        """
        assert self.pid is None, "one job at a time"
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"fn": fn, "kwargs": kwargs}) + "\n").encode())
        line = self._line(60.0)
        assert line and line.startswith("pid "), line
        self.pid = int(line.split()[1])
        return self.pid

    def wait(self, timeout: float | None) -> int | None:
        """The worker's exit code, or None if it is still running after ``timeout`` seconds."""
        line = self._line(timeout)
        if line is None:
            return None
        _, pid, code = line.split()
        assert int(pid) == self.pid, line
        self.pid = None
        return int(code)

    def kill(self, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` (default kill -9) to the running worker and reap it."""
        assert self.pid is not None
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        code = self.wait(60.0)
        assert code is not None
        return code

    def close(self) -> None:
        if self.pid is not None:
            try:
                self.kill()
            except Exception:
                pass
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _zygote_main(preload: Sequence[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for raw in sys.stdin.buffer:
        job = json.loads(raw)
        pid = os.fork()
        if pid == 0:  # the worker: a real process of its own
            os.dup2(2, 1)  # its prints must not reach the protocol pipe
            code = 1
            try:
                code = _run_job(job)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        out.write(f"pid {pid}\n".encode())
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())
        out.flush()


def run_faulted(monkeypatch: Any, faults: str, fn: str, **kwargs: Any) -> int | None:
    """``fn(**kwargs)`` in a fresh interpreter with ``faults`` armed there; its exit code."""
    monkeypatch.setenv("LANGGRAPH_RECALL_FAULTS", faults)
    return spawn(fn, **kwargs).wait(120)


def spawn(fn: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Run ``fn(**kwargs)`` in a fresh interpreter (exit code = its return value)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "run",
            json.dumps({"fn": fn, "kwargs": kwargs}),
        ],
        env=env,
    )


if __name__ == "__main__":
    sys.path[:0] = [HERE, ROOT]
    if sys.argv[1] == "zygote":
        _zygote_main(sys.argv[2:])
    elif sys.argv[1] == "run":
        sys.exit(_run_job(json.loads(sys.argv[2])))
