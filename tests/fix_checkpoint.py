"""Shared helpers for the checkpointer tests: graphs, history checks, and worker processes.

A ``Worker`` is a real Python process (this file run as a script) holding one ``RecallStore``
and ``store.checkpointer()``. The test sends it JSON commands on stdin and reads JSON events on
stdout, so one process serves many rounds (starting Python with LangGraph costs ~1 s; the
machine has 2 cores). Its graph's node can block at a chosen step until the test opens a gate
(a file), or freeze itself with SIGSTOP, which makes races and freezes happen at exact points
without sleeps. ``LANGGRAPH_RECALL_FAULTS`` in its environment arms the named fault points.

Every node execution is appended (and fsynced) to a log file, so counts survive kills.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

ROOT = Path(__file__).resolve().parent.parent


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int
    target: int
    # who -> {"block_at": k, "stop_at": k, "fail_at": k, "interrupt_at": k}: what step k does
    # in that process. Kept in the state, so a process resuming another's run ignores it.
    plan: dict[str, dict[str, int]]


def step_graph(
    *,
    who: str = "p",
    log: str | None = None,
    gate_dir: str | None = None,
    on_step: Callable[[int, Any], None] | None = None,
) -> StateGraph:
    """START -> step -> step ... until ``n == target``; each step adds an AIMessage with id
    ``m-<thread>-<messages so far>``.

    Per process (``plan[who]``): ``block_at`` waits for the file ``<gate_dir>/open`` (after
    announcing "blocked"); ``stop_at`` sends the process SIGSTOP; ``fail_at`` raises;
    ``interrupt_at`` calls ``interrupt()``. ``on_step(k, config)`` runs inside every step.
    """
    from langgraph.types import interrupt

    def step(state: State, config: RunnableConfig) -> dict[str, Any]:
        k = state.get("n", 0) + 1
        plan = (state.get("plan") or {}).get(who, {})
        thread = config["configurable"]["thread_id"]
        if log:
            append_log(log, {"who": who, "thread": thread, "step": k, "phase": "start"})
        if on_step is not None:
            on_step(k, config)
        if k == plan.get("block_at") and gate_dir:
            emit({"event": "blocked", "step": k})
            wait_for_file(os.path.join(gate_dir, "open"))
        if k == plan.get("stop_at"):
            # Freeze between store transactions: a process frozen inside one would hold its
            # row locks, a different failure (the store's, not the lease's) than tested here.
            # So: flush the recorder, and freeze holding this process's write locks (the
            # store's, shared with the same-database saver on SQLite, and the saver's own),
            # which its background writers (the async checkpoint put, the lease renewer) take
            # before they begin a transaction. A PostgreSQL renewal caught inside a
            # transaction anyway is ended by the server (idle_in_transaction_session_timeout).
            from langgraph_recall._context import checkpointer_of

            saver = checkpointer_of(config)
            saver._shared.recorder.flush(timeout=30)
            with contextlib.ExitStack() as held:
                for lock in (getattr(saver.store._db, "write_lock", None), saver.inner.lock):
                    if lock is not None:
                        held.enter_context(lock)
                # Thread-directed, so this very thread stops here (see _faults.fault_point).
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        if k == plan.get("fail_at"):
            raise RuntimeError(f"step {k} failed on purpose")
        if k == plan.get("interrupt_at"):
            interrupt({"step": k})
        if log:
            append_log(log, {"who": who, "thread": thread, "step": k, "phase": "done"})
        # The id depends only on the state, so whichever process runs the step names it alike.
        mid = f"m-{thread}-{len(state.get('messages', []))}"
        return {"messages": [AIMessage(f"{who}: step {k}", id=mid)], "n": k}

    def more(state: State) -> str:
        return "step" if state.get("n", 0) < state.get("target", 1) else END

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", more, ["step", END])
    return g


def chain(state: Any, *nodes: tuple[str, Any]) -> Any:
    """A StateGraph (not compiled) running ``nodes`` (name, function) one after the other."""
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(state)
    for name, fn in nodes:
        g.add_node(name, fn)
    names = [START, *(name for name, _ in nodes), END]
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    return g


def turn_input(
    text: str, target: int, msg_id: str | None = None, plan: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    return {
        "messages": [HumanMessage(text, id=msg_id or f"h-{text}")],
        "n": 0,
        "target": target,
        "plan": plan or {},
    }


def config(thread: str, agent: str | None = None, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, **extra}
    if agent:
        conf["agent_id"] = agent
    return {"configurable": conf}


# --- the reference for conformance: a bare saver able to answer async calls -------------------

_CAPABILITIES = (
    ("get_tuple", "aget_tuple"),
    ("list", "alist"),
    ("put", "aput"),
    ("put_writes", "aput_writes"),
    ("delete_thread", "adelete_thread"),
    ("delete_for_runs", "adelete_for_runs"),
    ("copy_thread", "acopy_thread"),
    ("prune", "aprune"),
)
SYNC_ONLY = ("SqliteSaver", "StoreSqliteSaver", "PostgresSaver", "StorePostgresSaver")


def threaded(inner: Any) -> Any:
    """``inner`` itself if it serves async calls; for LangGraph's sync-only savers, a thin
    adapter running each method the saver implements in a thread (and nothing else), so the
    async-only conformance kit can measure what the bare saver does."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    if type(inner).__name__ not in SYNC_ONLY:
        return inner
    attrs: dict[str, Any] = {}
    for sync, async_ in _CAPABILITIES:
        if getattr(type(inner), sync) is getattr(BaseCheckpointSaver, sync):
            continue  # not implemented by the saver: not by the reference either
        attrs[sync] = _forward(sync)
        attrs[async_] = _forward_async(sync) if sync != "list" else _forward_alist()
    attrs["get_next_version"] = _forward("get_next_version")
    cls = type(f"Threaded{type(inner).__name__}", (BaseCheckpointSaver,), attrs)
    ref = cls(serde=inner.serde)
    ref.inner = inner
    return ref


def _forward(name: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    return method


def _forward_async(name: str) -> Any:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(getattr(self.inner, name), *args, **kwargs)

    return method


def _forward_alist() -> Any:
    async def alist(self: Any, *args: Any, **kwargs: Any) -> Any:
        import asyncio

        for item in await asyncio.to_thread(lambda: list(self.inner.list(*args, **kwargs))):
            yield item

    return alist


# --- logs, gates, history --------------------------------------------------------------------


def append_log(path: str, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_log(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def count_steps(path: str, phase: str = "done") -> dict[int, int]:
    out: dict[int, int] = {}
    for r in read_log(path):
        if r["phase"] == phase:
            out[r["step"]] = out.get(r["step"], 0) + 1
    return out


def wait_for_file(path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def wait_until(
    predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


def history(saver: Any, thread: str) -> list[Any]:
    """Every root checkpoint of ``thread``, oldest first."""
    return list(
        reversed(list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})))
    )


def assert_linear(saver: Any, thread: str) -> None:
    """No fork and a single root: each checkpoint has at most one child."""
    from langgraph_recall.checkpoint import inspect_thread

    report = inspect_thread(saver, thread)
    assert len(report.roots) <= 1, f"{len(report.roots)} roots: {report}"
    assert not report.forks, f"forked history: {report.forks}"


def recorded_ids(store: Any, agent: str) -> list[str]:
    return [t.msg_id for t in store.turns(agent)]


# --- worker processes --------------------------------------------------------------------------

_emit_lock = threading.Lock()


def emit(event: dict[str, Any]) -> None:
    with _emit_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


class Worker:
    """A process running graphs on demand (see the module docstring).

    Started once (``Worker("A")``), then attached to each test's database with ``attach``;
    a worker killed by a test is replaced by ``WorkerPool``.
    """

    def __init__(self, who: str) -> None:
        self.who = who
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LANGGRAPH_RECALL_FAULTS": ""}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, who],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.expect("ready", timeout=180)
        self.holder = ""
        self.gate_dir = ""
        self.log = ""

    def attach(
        self,
        target: str,
        tmp: Path,
        *,
        ttl: float = 30.0,
        faults: str = "",
        own_saver: str = "",
        holder: str = "",
    ) -> Worker:
        """Open ``target``: a fresh store and ``store.checkpointer(lease_ttl=ttl)``, or, with
        ``own_saver`` (a file path), a RecallCheckpointer over a SqliteSaver on that file: a
        saver outside the store's database, fenced only best-effort. ``holder``: the
        checkpointer's ``holder=`` (default: its own unique id)."""
        self.gate_dir = str(tmp / f"gate-{self.who}")
        os.makedirs(self.gate_dir, exist_ok=True)
        self.log = str(tmp / "nodes.log")
        self.send(
            op="attach",
            target=target,
            ttl=ttl,
            log=self.log,
            gate_dir=self.gate_dir,
            faults=faults,
            own_saver=own_saver,
            holder=holder,
        )
        self.holder = self.expect("attached", timeout=120)["holder"]
        return self

    def detach(self) -> None:
        """Close the store and checkpointer of the last ``attach`` (the test is over)."""
        self.send(op="detach")
        try:
            self.expect("detached", timeout=60)
        except (AssertionError, TimeoutError):
            pass

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.stopped()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                self.events.put(json.loads(line))
        self.events.put({"event": "exited"})

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def next_event(self, timeout: float = 120.0) -> dict[str, Any]:
        """The next event, whatever it is."""
        return self.events.get(timeout=timeout)

    def expect(self, event: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {self.who}: no {event!r} event")
            try:
                got = self.events.get(timeout=left)
            except queue.Empty:
                raise TimeoutError(f"worker {self.who}: no {event!r} event") from None
            if got.get("event") == event:
                return got
            if got.get("event") in ("exited", "result", "error"):
                raise AssertionError(f"worker {self.who}: {got} while waiting for {event!r}")

    def invoke(
        self,
        thread: str,
        agent: str,
        text: str | None,
        plan: dict[str, int] | None = None,
        **options: Any,
    ) -> None:
        """Run a turn (``text``) or resume (``text=None``); ``plan``: this worker's behaviour.

        Options: target (steps), turn_id, msg_id, durability (default "sync"), wait,
        helper (RecallCheckpointer.invoke), use_async (ainvoke), at (start instant).
        """
        self.send(op="invoke", thread=thread, agent=agent, text=text, plan=plan or {}, **options)

    def result(self, timeout: float = 120.0) -> dict[str, Any]:
        return self.expect("result", timeout)

    def open_gate(self) -> None:
        Path(self.gate_dir, "open").touch()

    def close_gate(self) -> None:
        Path(self.gate_dir, "open").unlink(missing_ok=True)

    def stopped(self) -> bool:
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except FileNotFoundError:
            return False

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def exit_code(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.send(op="quit")
                self.proc.wait(30)
            except (ProcessLookupError, BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc.wait(30)


class WorkerPool:
    """Workers shared by a whole test session; dead or frozen ones are replaced on demand."""

    def __init__(self) -> None:
        self._workers: dict[str, Worker] = {}

    def get(self, *names: str) -> list[Worker]:
        todo = [n for n in names if n not in self._workers or not self._workers[n].alive()]
        for name in todo:
            if name in self._workers:
                self._workers.pop(name).close()
        with ThreadPoolExecutor(max(1, len(todo))) as pool:
            for worker in pool.map(Worker, todo):
                self._workers[worker.who] = worker
        return [self._workers[n] for n in names]

    def attach(
        self, target: str, tmp: Path, names: Sequence[str] = ("A", "B"), **options: Any
    ) -> list[Worker]:
        """Workers ``names`` attached to ``target``, events from earlier tests dropped."""
        workers = self.get(*names)
        for w in workers:
            while not w.events.empty():
                w.events.get_nowait()
            w.attach(target, tmp, **options)
        return workers

    def close(self) -> None:
        for w in self._workers.values():
            w.close()
        self._workers.clear()


_POOL: WorkerPool | None = None


def worker_pool() -> WorkerPool:
    """The session's workers (closed when the test process exits; they also exit on EOF)."""
    global _POOL
    if _POOL is None:
        _POOL = WorkerPool()
        atexit.register(_POOL.close)
    return _POOL


@contextmanager
def attaching(store_target: str, tmp_path: Path) -> Iterator[Callable[..., list[Worker]]]:
    """Yields ``attach("A", "B", ttl=..., faults=...)``: pool workers on this test's database,
    detached again at the end (so none is connected when the test's database goes away)."""
    attached: list[Worker] = []

    def attach(*names: str, **options: Any) -> list[Worker]:
        workers = worker_pool().attach(store_target, tmp_path, names or ("A", "B"), **options)
        attached.extend(workers)
        return workers

    yield attach
    for w in attached:
        if w.alive():
            w.detach()


def _serve(who: str) -> None:
    """The worker's main loop: one command per stdin line."""
    import asyncio

    from langgraph_recall import RecallError
    from langgraph_recall.checkpoint import _faults
    from langgraph_recall.store import RecallStore

    store: Any = None
    cp: Any = None
    graph: Any = None
    emit({"event": "ready"})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        if cmd["op"] in ("attach", "detach"):
            if cp is not None:
                cp.close()
                store.close()
                cp = store = graph = None
            if cmd["op"] == "detach":
                emit({"event": "detached"})
                continue
            _faults.arm(cmd["faults"])
            store = RecallStore.open(cmd["target"])
            if cmd.get("own_saver"):
                import sqlite3

                from langgraph.checkpoint.sqlite import SqliteSaver

                from langgraph_recall import checkpoint

                conn = sqlite3.connect(cmd["own_saver"], check_same_thread=False, timeout=30)
                cp = checkpoint.RecallCheckpointer(
                    SqliteSaver(conn), store=store, lease_ttl=cmd["ttl"]
                )
            else:
                cp = store.checkpointer(lease_ttl=cmd["ttl"], holder=cmd.get("holder") or None)
            graph = step_graph(who=who, log=cmd["log"], gate_dir=cmd["gate_dir"]).compile(
                checkpointer=cp, store=store
            )
            emit({"event": "attached", "holder": cp.holder})
            continue
        extra = {"turn_id": cmd["turn_id"]} if cmd.get("turn_id") else {}
        cfg = config(cmd["thread"], cmd["agent"], **extra)
        data = (
            None
            if cmd["text"] is None
            else turn_input(
                cmd["text"], cmd.get("target", 3), cmd.get("msg_id"), {who: cmd["plan"]}
            )
        )
        kwargs: dict[str, Any] = {"durability": cmd.get("durability", "sync")}
        cp.wait = float(cmd.get("wait", 0.0))
        if cmd.get("at"):  # start at an agreed wall-clock instant, to race another process
            while time.time() < cmd["at"]:
                pass
        try:
            if cmd.get("helper"):
                out = cp.invoke(graph, data, cfg, **kwargs)
            elif cmd.get("use_async"):
                out = asyncio.run(graph.ainvoke(data, cfg, **kwargs))
            else:
                out = graph.invoke(data, cfg, **kwargs)
            emit(
                {
                    "event": "result",
                    "ok": True,
                    "n": out.get("n"),
                    "interrupted": "__interrupt__" in out,
                    "messages": [m.content for m in out.get("messages", [])],
                }
            )
        except RecallError as exc:
            details = {
                k: v
                for k, v in exc.details.items()
                if v is None or isinstance(v, (str, int, float))
            }
            emit(
                {
                    "event": "result",
                    "ok": False,
                    "code": exc.code,
                    "error": str(exc),
                    "details": details,
                }
            )
        except Exception as exc:
            emit({"event": "result", "ok": False, "code": type(exc).__name__, "error": str(exc)})
    if cp is not None:
        cp.close()
        store.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
