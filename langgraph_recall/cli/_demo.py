"""``langgraph-recall demo``: four failures of a plain LangGraph agent, and the same agent with
langgraph-recall, side by side. Offline (a scripted model), real processes, numbers counted
from what actually happened in this run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from .._errors import RecallError
from ..store._db import _redact, is_postgres_target
from ..store._store import default_target
from . import _demo_graphs as kit

LEASE_TTL = 1.5  # short, so a resume after a crash waits a moment, not a minute


@dataclass
class Row:
    scenario: str
    plain: str
    recall: str


def _in_child(target: Callable[..., None], *args: Any, timeout: float = 60.0) -> int:
    """Run ``target`` in a forked child process; its exit code (9 = it crashed on purpose)."""
    proc = mp.get_context("fork").Process(target=target, args=args)
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return int(proc.exitcode or 0)


def _child_main(fn: Callable[..., None], *args: Any) -> None:
    # A worker's own noise (tracebacks, warnings) goes to a log, not over the demo's table.
    log = os.environ.get("RECALL_DEMO_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
    try:
        fn(*args)
    except RecallError as exc:
        os._exit({"lease_held": 3, "lease_lost": 4}.get(exc.code, 5))
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(6)
    os._exit(0)


FAILED_WORKERS: list[int] = []


def _spawn(fn: Callable[..., None], *args: Any) -> int:
    code = _in_child(_child_main, fn, *args)
    if code == 6:
        FAILED_WORKERS.append(code)
    return code


# --- the two ways of building the same agent ------------------------------------------------


def _open_recall(db: str) -> Any:
    from ..store import RecallStore

    return RecallStore.open(db)


def _recall_graph(
    db: str,
    script: list[dict[str, Any]],
    workdir: str,
    *,
    crash_after_tool: bool = False,
    wait: float = 10.0,
    model: Any = None,
) -> tuple[Any, Any, Any]:
    from .._hooks import with_briefing
    from ..checkpoint import RecallCheckpointer
    from ..checkpoint._same_db import same_database_saver
    from ..tools import DurableToolNode

    store = _open_recall(db)
    model = model or kit.ScriptedChatModel(script)
    if crash_after_tool:
        inner = kit.CrashAfterToolSaver(
            same_database_saver(store), os.path.join(workdir, "crash-after-tool")
        )
        saver = RecallCheckpointer(inner, store=store, lease_ttl=LEASE_TTL, wait=wait)
    else:
        saver = store.checkpointer(lease_ttl=LEASE_TTL, wait=wait)
    node = DurableToolNode(
        kit.make_tools(workdir),
        classes={"send_email": "external", "pay": "external"},
        approve=("pay",),
    )
    graph = kit.build_graph(
        model,
        node,
        checkpointer=saver,
        store=store,
        brief=lambda msgs, config: with_briefing(msgs, config=config, store=store),
    )
    return graph, model, store


def _plain_graph(
    workdir: str,
    script: list[dict[str, Any]],
    *,
    crash_after_tool: bool = False,
    approval_gate: bool = False,
    model: Any = None,
) -> tuple[Any, Any]:
    model = model or kit.ScriptedChatModel(script)
    saver: Any = kit.plain_saver(os.path.join(workdir, "plain.db"))
    if crash_after_tool:
        saver = kit.CrashAfterToolSaver(saver, os.path.join(workdir, "crash-after-tool"))
    graph = kit.build_graph(
        model,
        kit.plain_tool_node(kit.make_tools(workdir)),
        checkpointer=saver,
        approval_gate=approval_gate,
    )
    return graph, model


def _cfg(agent: str, thread: str | None = None) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread or agent, "agent_id": agent}}


EMAIL_SCRIPT = [
    kit.reply("", kit.call("send_email", to="ops@example.com", subject="Deploy finished")),
    kit.reply("The email is sent."),
]
PAY_SCRIPT = [kit.reply("", kit.call("pay", amount=10, to="alice")), kit.reply("Paid.")]


def _start(graph: Any, agent: str, text: str) -> None:
    from langchain_core.messages import HumanMessage

    graph.invoke(
        {"messages": [HumanMessage(text, id=f"{agent}-h0")]}, _cfg(agent), durability="sync"
    )


def _resume(graph: Any, agent: str) -> None:
    graph.invoke(None, _cfg(agent), durability="sync")


# --- scenario 1 and 2: a crash around an email -----------------------------------------------


def _email_crash(db: str, workdir: str, agent: str, where: str) -> Row:
    flag = "crash-after-tool" if where == "after" else "crash-inside-tool"
    outbox = os.path.join(workdir, "outbox.jsonl")
    results = {}
    for side in ("plain", "recall"):
        if os.path.exists(outbox):
            os.remove(outbox)
        open(os.path.join(workdir, flag), "w").close()
        name = f"{agent}-{side}"

        def first(side: str = side, name: str = name) -> None:
            if side == "plain":
                g, _ = _plain_graph(workdir, EMAIL_SCRIPT, crash_after_tool=where == "after")
            else:
                g, _, _ = _recall_graph(
                    db, EMAIL_SCRIPT, workdir, crash_after_tool=where == "after"
                )
            _start(g, name, "Tell ops the deploy finished.")

        def second(side: str = side, name: str = name) -> None:
            if side == "plain":
                g, _ = _plain_graph(workdir, EMAIL_SCRIPT)
            else:
                g, model, _ = _recall_graph(db, EMAIL_SCRIPT, workdir)
            _resume(g, name)
            if side == "recall":
                text = kit.first_system_text(model)
                if text:
                    with open(os.path.join(workdir, f"briefing-{name}.txt"), "w") as f:
                        f.write(text)

        crashed = _spawn(first)
        # The crash leaves its flag behind (see CrashAfterToolSaver): the resume must not crash.
        if os.path.exists(os.path.join(workdir, flag)):
            os.remove(os.path.join(workdir, flag))
        _spawn(second)
        sent = len(kit.count_effects(outbox))
        results[side] = (crashed, sent)
    for side, (crashed, _) in results.items():
        if crashed != 9:  # the first worker must die where the scenario says; say so if not
            print(f"  note: the {side} side's first worker exited with {crashed}, not its crash")
    plain_sent = results["plain"][1]
    recall_sent = results["recall"][1]
    if where == "after":
        return Row(
            "crash right after an email is sent, resume",
            _emails(plain_sent, "sent"),
            _emails(recall_sent, "sent"),
        )
    with _open_recall(db) as store:
        in_doubt = len(store.actions(f"{agent}-recall", open_only=True))
    return Row(
        "crash inside the email tool, resume",
        _emails(plain_sent, "sent"),
        f"{recall_sent} sent, {in_doubt} in doubt, not repeated",
    )


def _emails(n: int, what: str) -> str:
    return f"{n} email{'' if n == 1 else 's'} {what}"


# --- scenario 3: an approval, then the saved call is edited ------------------------------------


def _tamper(db: str, workdir: str, agent: str) -> Row:
    from langchain_core.messages import AIMessage
    from langgraph.types import Command

    payments = os.path.join(workdir, "payments.jsonl")
    out = {}
    for side in ("plain", "recall"):
        if os.path.exists(payments):
            os.remove(payments)
        name = f"{agent}-{side}"
        seen = os.path.join(workdir, f"approval-{side}.txt")

        def graph(side: str = side) -> Any:
            if side == "plain":
                return _plain_graph(workdir, PAY_SCRIPT, approval_gate=True)[0]
            return _recall_graph(db, PAY_SCRIPT, workdir)[0]

        def ask(name: str = name, seen: str = seen, graph: Callable[[], Any] = graph) -> None:
            from langchain_core.messages import HumanMessage

            res = graph().invoke(
                {"messages": [HumanMessage("Pay alice 10.", id=f"{name}-h0")]}, _cfg(name)
            )
            value = res["__interrupt__"][0].value
            with open(seen, "w") as f:
                f.write(str(value.get("digest", "")))

        def edit(name: str = name, graph: Callable[[], Any] = graph) -> None:
            g = graph()
            state = g.get_state(_cfg(name))
            last = state.values["messages"][-1]
            forged = AIMessage(
                content="",
                id=last.id,
                tool_calls=[{**last.tool_calls[0], "args": {"amount": 9999, "to": "mallory"}}],
            )
            g.update_state(_cfg(name), {"messages": [forged]}, as_node="agent")

        def approve(name: str = name, seen: str = seen, graph: Callable[[], Any] = graph) -> None:
            with open(seen) as f:
                digest = f.read().strip()
            decision = {"type": "approve", **({"digest": digest} if digest else {})}
            try:
                graph().invoke(Command(resume=decision), _cfg(name))
            except RecallError:
                pass

        _spawn(ask)
        _spawn(edit)
        _spawn(approve)
        out[side] = kit.count_effects(payments)
    plain = ", ".join(f"pay({p['amount']}, {p['to']})" for p in out["plain"]) or "nothing"
    recall = ", ".join(f"pay({p['amount']}, {p['to']})" for p in out["recall"])
    return Row(
        '"yes" to pay(10, alice), saved call edited',
        f"executed {plain}",
        f"executed {recall}" if recall else "refused (approval_mismatch)",
    )


# --- scenario 4: two workers on one agent --------------------------------------------------------


def _race(db: str, workdir: str, agent: str) -> Row:
    script = [kit.reply("Working on it.")]
    out = {}
    for side in ("plain", "recall"):
        name = f"{agent}-{side}"
        go = os.path.join(workdir, f"go-{side}")

        def worker(who: str, side: str = side, name: str = name, go: str = go) -> None:
            from langchain_core.messages import HumanMessage

            other = "B" if who == "A" else "A"
            model = kit.MeetingModel(
                script,
                here=os.path.join(workdir, f"in-model-{side}-{who}"),
                there=[
                    os.path.join(workdir, f"in-model-{side}-{other}"),
                    os.path.join(workdir, f"gone-{side}-{other}"),
                ],
            )
            try:
                if side == "plain":
                    g, _ = _plain_graph(workdir, script, model=model)
                else:
                    g, _, _ = _recall_graph(db, script, workdir, wait=0.0, model=model)
                while not os.path.exists(go):
                    time.sleep(0.005)
                g.invoke(
                    {"messages": [HumanMessage(f"hello from {who}", id=f"{name}-{who}")]},
                    _cfg(name),
                )
            finally:
                # A worker refused at the door (lease_held) never reaches its model call: say so,
                # so the one inside stops waiting for it.
                open(os.path.join(workdir, f"gone-{side}-{who}"), "w").close()

        procs = [
            mp.get_context("fork").Process(target=_child_main, args=(worker, w)) for w in ("A", "B")
        ]
        for p in procs:
            p.start()
        time.sleep(0.3)
        open(go, "w").close()
        for p in procs:
            p.join(60)
        codes = sorted(int(p.exitcode or 0) for p in procs)
        if side == "plain":
            saver = kit.plain_saver(os.path.join(workdir, "plain.db"))
            forks = _fork_count(saver, name)
        else:
            with _open_recall(db) as store:
                saver = store.checkpointer()
                forks = _fork_count(saver, name)
        out[side] = (codes, forks)
    (pcodes, pforks), (rcodes, rforks) = out["plain"], out["recall"]
    plain = f"{pcodes.count(0)} of 2 ran; history forked ({pforks} fork)"
    if not pforks:
        plain = f"{pcodes.count(0)} of 2 ran; no fork this time"
    recall = f"{rcodes.count(0)} ran, {rcodes.count(3)} told lease_held; {rforks} forks"
    return Row("two workers start one agent at once", plain, recall)


def _fork_count(saver: Any, thread: str) -> int:
    children: dict[str | None, int] = {}
    for t in saver.list({"configurable": {"thread_id": thread}}):
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        children[parent] = children.get(parent, 0) + 1
    return sum(1 for n in children.values() if n > 1)


# --- the whole demo --------------------------------------------------------------------------


def look_around(db: str, run_no: int) -> str:
    """The demo's closing hint: commands that work pasted as they are, so they name the
    database unless it is the one they open anyway (./recall.db, or LANGGRAPH_RECALL_DB). A
    DSN's password is not printed (a terminal's scrollback and CI logs keep it): pasted, such a
    command finds it in PGPASSWORD or ~/.pgpass instead."""
    shown = _redact(db) if is_postgres_target(db) else db
    where = "" if db == default_target() else f" --db {shlex.quote(shown)}"
    return (
        f"langgraph-recall{where} agents; "
        f"langgraph-recall{where} actions demo-email-inside-{run_no}-recall --open"
    )


def run_demo(db: str) -> list[Row]:
    """Run every scenario, print the side-by-side table and the briefing; return the rows."""
    started = time.perf_counter()
    with _open_recall(db) as store:
        run_no = 1 + sum(
            1
            for a in store.agents()
            if a.agent_id.startswith("demo-email-after-") and a.agent_id.endswith("-recall")
        )
        target = store.target
    workdir = tempfile.mkdtemp(prefix="recall-demo-")
    log = os.path.join(workdir, "workers.log")
    os.environ["RECALL_DEMO_LOG"] = log
    FAILED_WORKERS.clear()
    try:
        click.secho(f"langgraph-recall demo (run {run_no}), records in {target}\n", bold=True)
        rows = []
        steps = [
            ("email-after", lambda a: _email_crash(db, workdir, a, "after")),
            ("email-inside", lambda a: _email_crash(db, workdir, a, "inside")),
            ("pay", lambda a: _tamper(db, workdir, a)),
            ("race", lambda a: _race(db, workdir, a)),
        ]
        for key, step in steps:
            click.echo(f"  running: {key} ...")
            rows.append(step(f"demo-{key}-{run_no}"))
        _print_table(rows)
        if FAILED_WORKERS:
            kept = os.path.abspath("recall-demo-workers.log")
            shutil.copy(log, kept)
            click.secho(
                f"\n{len(FAILED_WORKERS)} worker(s) failed unexpectedly; their output is in {kept}",
                fg="red",
            )
        brief = os.path.join(workdir, f"briefing-demo-email-inside-{run_no}-recall.txt")
        if os.path.exists(brief):
            click.secho(
                "\nThe briefing the resumed agent was given (crash inside the email tool):",
                bold=True,
            )
            with open(brief) as f:
                click.echo(_indent(f.read()))
        click.echo(
            f"\nDone in {time.perf_counter() - started:.1f}s. Look around: {look_around(db, run_no)}"
        )
        return rows
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _print_table(rows: list[Row]) -> None:
    from ._format import table

    click.echo("")
    click.echo(
        table(
            ["scenario", "plain LangGraph", "with langgraph-recall"],
            [(r.scenario, r.plain, r.recall) for r in rows],
        )
    )
