"""The 12-process payment crash scenario: a misbehaving payment API, an order queue, workers.

Used by ``tests/test_payments_crash.py`` (small) and ``benchmarks/crash_payments.py`` (300
orders). Builds on ``fix_tools`` (``Zygote``, ``build_graph``, ``run_to_end``).

- ``PaymentAPI``: a payment API played by a separate local process (``python fix_payments.py
  serve``, standard library only): HTTP on 127.0.0.1, a free port. Every charge is committed to
  its own SQLite ledger (synchronous=FULL) before any answer. A repeated ``Idempotency-Key``
  returns the first charge and charges nothing. It misbehaves on purpose: it drops some answers
  (charges, then closes the connection without a reply), delays some (charges, then waits before
  replying), and kills some callers (charges, then SIGKILLs the worker that asked, named by its
  ``X-Worker-Pid`` header, before replying): the exact window where a crash makes an agent
  charge twice. The process exits when its parent closes its stdin or dies.
- ``charge`` tools: a client as payment SDKs write it: a lost answer is retried (with the same
  ``Idempotency-Key`` when the call has one). ``keyed=False`` is the plain baseline: no key.
- ``OrderQueue``: orders in a SQLite table, taken by claim-by-update; a dead worker's orders go
  back to the queue when the supervisor reaps it.
- ``payment_worker``: takes orders until none is left; each order is a scripted agent run
  (``agent_id`` = order id) whose one tool call is ``charge(order_id, amount)``.
- ``run_scenario``: one run of one mode (``plain``: ToolNode, no key; ``external`` or
  ``idempotent``: DurableToolNode) with 12 workers, random SIGKILLs and restarts; returns the
  counts (``Outcome``): orders charged twice, left in doubt, kills, dropped answers.

This module imports only the standard library at the top, so the API process starts fast. (No
``from __future__ import annotations``: the tools' annotations must be objects, since their
types are imported inside the functions.)
"""

import http.client
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fix_tools import Zygote

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("plain", "external", "idempotent")
# What the supervisor imports before forking workers, so a restarted worker starts at once.
PRELOAD = (
    "fix_tools",
    "langgraph_recall",
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "psycopg_pool",
)


# --- the payment API (its own process) -----------------------------------------------------------


@dataclass(frozen=True)
class Misbehaviour:
    """How the payment API misbehaves. Probabilities are per request, decided after charging.

    ``kill`` applies to new charges only (not to a replayed key), at most ``kill_budget`` times.
    """

    drop: float = 0.2
    delay: float = 0.25
    delay_s: tuple[float, float] = (0.1, 0.6)
    kill: float = 0.1
    kill_budget: int = 5
    seed: int = 4


_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    charge_id INTEGER PRIMARY KEY,
    order_id TEXT NOT NULL,
    amount TEXT NOT NULL,
    idem_key TEXT UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    n INTEGER PRIMARY KEY,
    order_id TEXT NOT NULL,
    idem_key TEXT,
    pid INTEGER,
    try INTEGER,
    charge_id INTEGER NOT NULL,
    replayed INTEGER NOT NULL,
    fate TEXT NOT NULL,
    at REAL NOT NULL
);
"""


class _Ledger:
    """The API's books. One connection, one lock: the key check and the charge are atomic."""

    def __init__(self, path: str, misbehaviour: Misbehaviour) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_LEDGER_SCHEMA)
        self.lock = threading.Lock()
        self.bad = misbehaviour
        self.rng = random.Random(misbehaviour.seed)
        self.kills_left = misbehaviour.kill_budget

    def charge(
        self, order_id: str, amount: str, key: str | None, pid: int | None, attempt: int
    ) -> tuple[dict[str, Any], str, float]:
        """Charge (or replay the charge of ``key``); returns the answer, its fate and a delay."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = None
                if key is not None:
                    row = self.conn.execute(
                        "SELECT charge_id, order_id, amount FROM charges WHERE idem_key = ?",
                        (key,),
                    ).fetchone()
                replayed = row is not None
                if row is None:
                    cur = self.conn.execute(
                        "INSERT INTO charges (order_id, amount, idem_key, created_at) "
                        "VALUES (?, ?, ?, ?)",
                        (order_id, amount, key, time.time()),
                    )
                    row = (cur.lastrowid, order_id, amount)
                fate, pause = self._fate(replayed, pid)
                self.conn.execute(
                    "INSERT INTO requests (order_id, idem_key, pid, try, charge_id, replayed, "
                    "fate, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (order_id, key, pid, attempt, row[0], int(replayed), fate, time.time()),
                )
                # Committed (fsynced) before any answer, drop or kill: the charge is real.
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
        answer = {"charge_id": row[0], "order_id": row[1], "amount": row[2], "replayed": replayed}
        return answer, fate, pause

    def _fate(self, replayed: bool, pid: int | None) -> tuple[str, float]:
        draw = self.rng.random()
        if not replayed and pid and self.kills_left > 0 and self.rng.random() < self.bad.kill:
            self.kills_left -= 1
            return "kill", 0.0
        if draw < self.bad.drop:
            return "drop", 0.0
        if draw < self.bad.drop + self.bad.delay:
            return "delay", self.rng.uniform(*self.bad.delay_s)
        return "ok", 0.0


def _handler(ledger: _Ledger) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.close_connection = True
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            pid = self.headers.get("X-Worker-Pid")
            answer, fate, pause = ledger.charge(
                str(body["order_id"]),
                str(body["amount"]),
                self.headers.get("Idempotency-Key"),
                int(pid) if pid else None,
                int(self.headers.get("X-Try") or 1),
            )
            if fate == "kill":
                # The caller dies after the charge and before it hears of it.
                try:
                    os.kill(int(pid or 0), signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return
            if fate == "drop":
                return  # the connection closes with no reply: the answer is lost
            if pause:
                time.sleep(pause)
            data = json.dumps(answer).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the caller was killed while we delayed: nobody to answer
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 12 workers retrying at once must not overflow the backlog

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a killed caller's socket is no news
            super().handle_error(request, client_address)


def _serve(db: str, misbehaviour: Misbehaviour) -> None:
    server = _Server(("127.0.0.1", 0), _handler(_Ledger(db, misbehaviour)))

    def stop_when_parent_goes() -> None:
        # stdin is a pipe from the parent: EOF means it closed it or died (even by kill -9).
        sys.stdin.buffer.read()
        server.shutdown()

    threading.Thread(target=stop_when_parent_goes, daemon=True).start()
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()


class PaymentAPI:
    """The payment API process, seen from the test: ``port``, ``db`` (read it with
    ``read_ledger``), ``close()``.

    Use it as a context manager: the process is stopped (and reaped) however the block ends.
    """

    def __init__(self, db: str, misbehaviour: Misbehaviour, start_timeout: float = 60.0) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "serve",
                db,
                json.dumps(misbehaviour.__dict__),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            self.port = self._read_port(start_timeout)
        except BaseException:
            self.close()
            raise

    def _read_port(self, timeout: float) -> int:
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            raise RuntimeError(f"the payment API did not start: {line!r}")
        return int(line.split()[1])

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "PaymentAPI":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Ledger:
    """The API's records: every charge (per order, with its key) and every request's fate."""

    charges: dict[str, list[tuple[int, str | None]]]
    fates: Counter[str]
    replays: int
    # Extra charges (an order's second and later) by cause: "retry" (the client re-sent after a
    # lost answer, without a key) or "rerun" (the call ran again after a crash).
    extra_by_cause: Counter[str]
    # Per idempotency key, how many times a tool call sent it afresh (first try, not a client
    # retry): more than once means the call itself ran again after a crash.
    runs_per_key: Counter[str]
    rerun_replays: int  # such re-runs the API answered from the key, charging nothing


def read_ledger(path: str) -> Ledger:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        charges: dict[str, list[tuple[int, str | None]]] = {}
        for charge_id, order_id, key in conn.execute(
            "SELECT charge_id, order_id, idem_key FROM charges ORDER BY charge_id"
        ):
            charges.setdefault(order_id, []).append((charge_id, key))
        fates = Counter(dict(conn.execute("SELECT fate, count(*) FROM requests GROUP BY fate")))
        replays = conn.execute("SELECT count(*) FROM requests WHERE replayed = 1").fetchone()[0]
        causes: Counter[str] = Counter()
        for charge_list in charges.values():
            for charge_id, _ in charge_list[1:]:
                (attempt,) = conn.execute(
                    "SELECT try FROM requests WHERE charge_id = ? AND replayed = 0", (charge_id,)
                ).fetchone()
                causes["retry" if attempt > 1 else "rerun"] += 1
        runs = Counter(
            dict(
                conn.execute(
                    "SELECT idem_key, count(*) FROM requests WHERE try = 1 "
                    "AND idem_key IS NOT NULL GROUP BY idem_key"
                )
            )
        )
        (rerun_replays,) = conn.execute(
            "SELECT count(*) FROM requests WHERE try = 1 AND replayed = 1"
        ).fetchone()
    finally:
        conn.close()
    return Ledger(charges, fates, replays, causes, runs, rerun_replays)


# --- the charge tool (the API's client) ------------------------------------------------------------


def post_charge(
    port: int, order_id: str, amount: str, key: str | None, *, tries: int = 8, timeout: float = 60.0
) -> dict[str, Any]:
    """POST one charge; a lost answer is sent again (same key), as payment SDKs do.

    Raises ``ConnectionError`` after ``tries`` lost answers in a row.
    """
    body = json.dumps({"order_id": order_id, "amount": amount})
    last: BaseException | None = None
    for attempt in range(1, tries + 1):
        headers = {
            "Content-Type": "application/json",
            "X-Worker-Pid": str(os.getpid()),  # test instrumentation: lets the API kill us
            "X-Try": str(attempt),
        }
        if key is not None:
            headers["Idempotency-Key"] = key
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("POST", "/charges", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"payment API answered {resp.status}: {data[:200]!r}")
            return json.loads(data)  # type: ignore[no-any-return]
        except (OSError, http.client.HTTPException) as exc:  # no answer: it may have charged
            last = exc
            time.sleep(0.02 * attempt)
        finally:
            conn.close()
    raise ConnectionError(f"payment API: no answer after {tries} tries ({last!r})")


def charge_tool(port: int, *, keyed: bool) -> Any:
    """``charge(order_id, amount)``. ``keyed``: it takes the call's hidden idempotency key and
    sends it as ``Idempotency-Key``; otherwise (a plain ToolNode has none) it sends no key."""
    from langchain_core.tools import tool

    from langgraph_recall.tools import IdempotencyKey

    def answer(data: dict[str, Any]) -> str:
        return f"charged {data['amount']} for {data['order_id']} (charge {data['charge_id']})"

    if keyed:

        @tool
        def charge(order_id: str, amount: str, key: IdempotencyKey) -> str:
            """Charge an order."""
            return answer(post_charge(port, order_id, amount, key))

        return charge

    @tool  # type: ignore[no-redef]
    def charge(order_id: str, amount: str) -> str:
        """Charge an order."""
        return answer(post_charge(port, order_id, amount, None))

    return charge


# --- the order queue -----------------------------------------------------------------------------


class OrderQueue:
    """Orders in a SQLite table shared by the workers and the supervisor (claim-by-update)."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=60.0, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA busy_timeout=60000")
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS orders (seq INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,"
            " amount TEXT NOT NULL, owner INTEGER, done INTEGER NOT NULL DEFAULT 0,"
            " claims INTEGER NOT NULL DEFAULT 0);"
            "CREATE TABLE IF NOT EXISTS errors (order_id TEXT, pid INTEGER, error TEXT);"
        )

    def fill(self, orders: Sequence[tuple[str, str]]) -> None:
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("INSERT INTO orders (id, amount) VALUES (?, ?)", orders)

    def claim(self, pid: int) -> tuple[str, str] | None:
        """Take the next free order for ``pid``; None when every open order is taken."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(
                "SELECT id, amount FROM orders WHERE done = 0 AND owner IS NULL ORDER BY seq "
                "LIMIT 1"
            ).fetchone()
            if row is not None:
                self.conn.execute(
                    "UPDATE orders SET owner = ?, claims = claims + 1 WHERE id = ?", (pid, row[0])
                )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return (str(row[0]), str(row[1])) if row else None

    def finish(self, order_id: str) -> None:
        self.conn.execute("UPDATE orders SET done = 1, owner = NULL WHERE id = ?", (order_id,))

    def release(self, order_id: str, pid: int, error: str | None = None) -> None:
        """Give an order back (this worker could not finish it now); note why."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "UPDATE orders SET owner = NULL WHERE id = ? AND owner = ?", (order_id, pid)
        )
        if error:
            self.conn.execute("INSERT INTO errors VALUES (?, ?, ?)", (order_id, pid, error))
        self.conn.execute("COMMIT")

    def release_dead(self, pid: int) -> None:
        """The supervisor reaped ``pid``: its unfinished orders go back to the queue."""
        self.conn.execute("UPDATE orders SET owner = NULL WHERE owner = ? AND done = 0", (pid,))

    def note(self, pid: int, error: str) -> None:
        self.conn.execute("INSERT INTO errors VALUES (NULL, ?, ?)", (pid, error))

    def left(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM orders WHERE done = 0").fetchone()[0])

    def errors(self) -> list[tuple[str | None, int, str]]:
        return list(self.conn.execute("SELECT order_id, pid, error FROM errors"))

    def close(self) -> None:
        self.conn.close()


# --- a worker ------------------------------------------------------------------------------------


def _script(order_id: str, amount: str) -> list[dict[str, Any]]:
    from fix_tools import call, reply

    return [
        reply("", call("charge", order_id=order_id, amount=amount)),
        reply(f"order {order_id} is paid"),
    ]


def payment_worker(
    target: str, queue: str, port: int, mode: str, lease_ttl: float = 2.0, deadline: float = 600.0
) -> int:
    """Take orders from ``queue`` and run each to the end; exit 0 when none is left.

    Exit codes: 0 done, 4 past ``deadline`` seconds, 5 the parent (the Zygote) went away. A
    run refused by the lease (``lease_held``/``lease_lost``) or failing otherwise gives its
    order back with a note (``OrderQueue.errors``) and the worker takes the next one.
    """
    from fix_tools import build_graph, run_to_end
    from langchain_core.messages import HumanMessage
    from langgraph.prebuilt import ToolNode

    from langgraph_recall import LeaseHeld, LeaseLost, RecallStore
    from langgraph_recall.tools import DurableToolNode

    pid, parent, started = os.getpid(), os.getppid(), time.monotonic()
    orders = OrderQueue(queue)
    try:
        store = RecallStore.open(target, pool_size=2)
        # A dead holder blocks its agent for lease_ttl: wait that out (and a loaded machine's
        # lag) rather than give the order back.
        saver = store.checkpointer(lease_ttl=lease_ttl, wait=max(30.0, 10 * lease_ttl))
    except BaseException:
        orders.note(pid, traceback.format_exc(limit=4))
        orders.close()
        raise
    if mode == "plain":
        node: Any = ToolNode([charge_tool(port, keyed=False)])
    else:
        node = DurableToolNode([charge_tool(port, keyed=True)], classes={"charge": mode})
    try:
        while True:
            if os.getppid() != parent:
                return 5
            if time.monotonic() - started > deadline:
                return 4
            order = orders.claim(pid)
            if order is None:
                if orders.left() == 0:
                    return 0
                time.sleep(0.05)  # the rest are being run by others (or wait for a release)
                continue
            order_id, amount = order
            graph = build_graph(
                node, _script(order_id, amount), store=store, checkpointer=saver,
                name_prefix=order_id,
            )  # fmt: skip
            config = {"configurable": {"thread_id": order_id}}
            ask = {"messages": [HumanMessage(f"charge order {order_id}: {amount}")]}
            try:
                finished = run_to_end(graph, config, ask)
            except (LeaseHeld, LeaseLost) as exc:
                orders.release(order_id, pid, exc.code)
                continue
            except Exception as exc:
                orders.release(order_id, pid, f"{type(exc).__name__}: {exc}")
                continue
            if finished:
                orders.finish(order_id)
            else:
                orders.release(order_id, pid, "not finished after 20 rounds")
    finally:
        saver.close()
        store.close()
        orders.close()


# --- the scenario --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One run's size: orders, workers, the supervisor's random kills, the API's behaviour."""

    orders: int = 60
    workers: int = 12
    random_kills: int = 5
    kill_every_s: tuple[float, float] = (0.4, 1.5)
    misbehaviour: Misbehaviour = field(default_factory=Misbehaviour)
    lease_ttl: float = 2.0
    timeout: float = 300.0  # the whole run; past it every worker is killed and it fails
    seed: int = 7


def _set_death_signal() -> None:
    """Linux: this process gets SIGKILL when its parent (the supervisor) dies, so a killed or
    timed-out supervisor leaves no worker behind. Elsewhere workers poll their parent's pid."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _fork_worker(job: dict[str, Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _set_death_signal()
        code = payment_worker(**job)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def supervise(
    target: str, queue: str, port: int, mode: str, report: str, scenario: dict[str, Any]
) -> int:
    """The supervisor (a Zygote job): keep ``workers`` worker processes running until the queue
    is empty, SIGKILL one at random ``random_kills`` times, restart every killed worker at once
    and put its order back in the queue. Writes its counts to ``report`` (JSON).

    It forks the workers itself, from this pre-imported process, so a restart costs a fork,
    not an interpreter start. It stays single-threaded (forking from a threaded process could
    copy a held lock into the child). It stops, killing its workers, when the payment API goes
    away (the test process died: nothing would be left to collect the results). Exit code 0
    when every order is done, 3 on timeout, 6 when the API went away.
    """
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    size = Scenario(**{**scenario, "misbehaviour": Misbehaviour()})
    rng = random.Random(size.seed)
    job = {
        "target": target,
        "queue": queue,
        "port": port,
        "mode": mode,
        "lease_ttl": size.lease_ttl,
        "deadline": size.timeout,
    }
    started = time.monotonic()
    live: set[int] = {_fork_worker(job) for _ in range(size.workers)}
    counts = _Counts()
    targets: set[int] = set()  # workers this supervisor sent SIGKILL
    kills_left = size.random_kills
    next_kill = started + rng.uniform(*size.kill_every_s)
    next_check = started + 1.0
    try:
        while live:
            now = time.monotonic()
            if now - started > size.timeout:
                counts.timed_out = True
                break
            if now >= next_check:
                next_check = now + 1.0
                if not _listening(port):
                    counts.api_gone = True
                    break
            if kills_left and now >= next_kill:
                # Our own unreaped child: its pid cannot have been reused.
                victim = rng.choice(sorted(live))
                os.kill(victim, signal.SIGKILL)
                targets.add(victim)
                kills_left -= 1
                next_kill = now + rng.uniform(*size.kill_every_s)
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.02)
                continue
            live.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            if code == -signal.SIGKILL and pid in targets:
                counts.kills_random += 1  # (a target that had just exited by itself is not)
            if code == 0:
                continue  # the queue is empty
            if code != -signal.SIGKILL:
                counts.unexpected_exits.append(code)
                if len(counts.unexpected_exits) > 3 * size.workers:
                    break  # something is broken: stop, the caller reports it
            orders = OrderQueue(queue)  # not kept open across a fork
            try:
                orders.release_dead(pid)  # its order goes back to the queue, now
                if code != -signal.SIGKILL:
                    orders.note(pid, f"worker exited with {code}")
            finally:
                orders.close()
            counts.restarts += 1
            live.add(_fork_worker(job))
    finally:
        for pid in live:
            os.kill(pid, signal.SIGKILL)
        for pid in live:
            os.waitpid(pid, 0)
        with open(report, "w") as f:
            json.dump(counts.__dict__, f)
    return 6 if counts.api_gone else 3 if counts.timed_out else 0


@dataclass
class _Counts:
    """What the supervisor saw (written to its report file as JSON)."""

    kills_random: int = 0
    restarts: int = 0
    unexpected_exits: list[int] = field(default_factory=list)
    timed_out: bool = False
    api_gone: bool = False


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10.0).close()
    except ConnectionRefusedError:
        return False
    except OSError:  # slow, not gone
        pass
    return True


@dataclass
class Outcome:
    """What one run did, counted from the API's ledger and the store's records."""

    mode: str
    backend: str
    orders: int
    finished: int
    seconds: float
    kills_random: int
    kills_by_api: int
    restarts: int
    charges: int
    charged_twice: int  # orders charged two or more times
    extra_charges: Counter[str]  # by cause: "retry" after a lost answer, "rerun" after a crash
    not_charged: list[str]  # orders with no charge
    in_doubt: int  # open actions at the end (durable modes)
    in_doubt_orders: list[str]
    done: int  # actions recorded done (durable modes)
    other_actions: Counter[str]  # actions neither open nor done, by status
    key_mismatches: list[str]  # orders charged under a key that is not their action's
    fates: Counter[str]  # the API's answers: ok / drop / delay / kill
    replays: int  # requests the API answered from a known key, charging nothing
    reruns: int  # tool calls that ran again after a crash (same key sent afresh)
    rerun_replays: int  # of those, answered from the key (nothing charged)
    worker_errors: list[tuple[str | None, int, str]]
    unexpected_exits: list[int]


def run_scenario(
    zygote: "Zygote",
    target: str,
    mode: str,
    workdir: str,
    scenario: Scenario = Scenario(),  # noqa: B008 (frozen)
    *,
    backend: str = "",
) -> Outcome:
    """Run ``scenario.orders`` orders in ``mode`` through ``scenario.workers`` worker processes
    (forked by a supervisor job on ``zygote``) against a fresh payment API; count what happened.

    Every process it starts (API, supervisor, workers) is gone when it returns or raises.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    os.makedirs(workdir, exist_ok=True)
    queue_path = os.path.join(workdir, f"queue-{mode}.db")
    report = os.path.join(workdir, f"supervisor-{mode}.json")
    orders = [
        (f"{mode}-o{i:03d}", f"{(i * 37) % 9000 / 100 + 1:.2f}") for i in range(scenario.orders)
    ]
    queue = OrderQueue(queue_path)
    queue.fill(orders)
    queue.close()
    started = time.monotonic()
    with PaymentAPI(os.path.join(workdir, f"ledger-{mode}.db"), scenario.misbehaviour) as api:
        size = {k: v for k, v in scenario.__dict__.items() if k != "misbehaviour"}
        zygote.start(
            "fix_payments:supervise",
            target=target,
            queue=queue_path,
            port=api.port,
            mode=mode,
            report=report,
            scenario=size,
        )
        code = zygote.wait(scenario.timeout + 60)
        if code is None:  # its workers die with it (PR_SET_PDEATHSIG)
            zygote.kill()
            raise TimeoutError(f"{mode}: the supervisor did not finish in {scenario.timeout}s")
        seconds = time.monotonic() - started
    with open(report) as f:
        counts = json.load(f)
    queue = OrderQueue(queue_path)
    try:
        left, worker_errors = queue.left(), queue.errors()
    finally:
        queue.close()
    if code != 0:
        raise RuntimeError(f"{mode}: supervisor exited {code}: {counts}; {worker_errors[-5:]}")
    return _count(mode, backend, target, orders, read_ledger(api.db), left, counts, seconds,
                  worker_errors)  # fmt: skip


def _count(
    mode: str,
    backend: str,
    target: str,
    orders: list[tuple[str, str]],
    ledger: Ledger,
    left: int,
    counts: dict[str, Any],
    seconds: float,
    worker_errors: list[tuple[str | None, int, str]],
) -> Outcome:
    from langgraph_recall import RecallStore

    done = 0
    in_doubt: list[str] = []
    other: Counter[str] = Counter()
    mismatched: list[str] = []
    if mode != "plain":
        with RecallStore.open(target, pool_size=2) as store:
            for order_id, _ in orders:
                actions = store.actions(order_id)
                for action in actions:
                    if action.status == "open":
                        in_doubt.append(order_id)
                    elif action.status == "done":
                        done += 1
                    else:
                        other[action.status] += 1
                keys = {a.idempotency_key for a in actions}
                if any(key not in keys for _, key in ledger.charges.get(order_id, [])):
                    mismatched.append(order_id)
    charged = [len(ledger.charges.get(o, [])) for o, _ in orders]
    return Outcome(
        mode=mode,
        backend=backend,
        orders=len(orders),
        finished=len(orders) - left,
        seconds=seconds,
        kills_random=counts["kills_random"],
        kills_by_api=ledger.fates.get("kill", 0),
        restarts=counts["restarts"],
        charges=sum(charged),
        charged_twice=sum(1 for n in charged if n >= 2),
        extra_charges=ledger.extra_by_cause,
        not_charged=[o for (o, _), n in zip(orders, charged, strict=True) if n == 0],
        in_doubt=len(in_doubt),
        in_doubt_orders=in_doubt,
        done=done,
        other_actions=other,
        key_mismatches=mismatched,
        fates=ledger.fates,
        replays=ledger.replays,
        reruns=sum(n - 1 for n in ledger.runs_per_key.values()),
        rerun_replays=ledger.rerun_replays,
        worker_errors=worker_errors,
        unexpected_exits=counts["unexpected_exits"],
    )


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        given = json.loads(sys.argv[3])
        _serve(sys.argv[2], Misbehaviour(**{**given, "delay_s": tuple(given["delay_s"])}))
    else:  # pragma: no cover
        raise SystemExit(f"usage: {sys.argv[0]} serve LEDGER MISBEHAVIOUR_JSON")
