"""The ``langgraph-recall`` command, as an operator and a script use it.

- The demo runs once, in an empty folder, as a real process; its printed table says what the
  issue promises (plain 2 emails vs recall 1, ...), and the records it leaves agree with it.
- Every subcommand runs against a store filled through the records API, on SQLite and on
  PostgreSQL: tables for people, JSON that parses and is the same from one run to the next.
- ``verify`` notices a dropped append-only trigger and a forged approval row; ``doctor`` finds
  a fork made by two plain LangGraph processes on one thread, and a run that died between
  writing a node's results and writing the next checkpoint.
- Error paths (unknown agent, missing file, unreachable PostgreSQL, bad flags) run the CLI as
  a real subprocess: one line on stderr, a non-zero exit, never a traceback.

This file is also the worker those tests start: ``python tests/test_cli.py fork-worker ...``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fix_store import write_planned
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_recall import RecallError
from langgraph_recall.cli import main
from langgraph_recall.store import RecallStore
from langgraph_recall.tools._canonical import args_digest

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = [sys.executable, "-m", "langgraph_recall.cli"]
PROC_TIMEOUT = 300  # generous: the machine is shared and may be loaded


def run_cli(
    *args: str, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a real process (what a person or a script runs)."""
    base = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_RECALL_DB"}
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=PROC_TIMEOUT,
    )


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out, err = cli(capsys, "--json", *args)
    assert not err, err
    return code, json.loads(out)


# --- the demo ---------------------------------------------------------------------------------


def parse_table(text: str, first_header: str) -> list[list[str]]:
    """Rows of a table printed by ``_format.table``: columns are found from the dash line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    spans = [m.span() for m in re.finditer(r"-+", lines[start + 1])]
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        cells = [
            line[a : (spans[i + 1][0] if i + 1 < len(spans) else None)]
            for i, (a, _) in enumerate(spans)
        ]
        rows.append([c.strip() for c in cells])
    return rows


class Demo:
    def __init__(self, folder: str, result: subprocess.CompletedProcess[str]) -> None:
        self.folder = folder
        self.out = result.stdout
        self.err = result.stderr
        self.code = result.returncode
        self.rows = {r[0]: (r[1], r[2]) for r in parse_table(self.out, "scenario")}
        m = re.search(r"demo \(run (\d+)\)", self.out)
        assert m, self.out
        self.run_no = int(m.group(1))

    @property
    def db(self) -> str:
        return os.path.join(self.folder, "recall.db")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    folder = str(tmp_path_factory.mktemp("demo"))
    env = {"LANGGRAPH_RECALL_SECRET": ""}  # the demo's SQLite store keeps its own secret file
    result = run_cli("demo", cwd=folder, env=env)
    return Demo(folder, result)


@pytest.mark.slow
def test_demo_prints_plain_versus_recall_as_measured(demo: Demo) -> None:
    assert demo.code == 0, demo.out + demo.err
    assert "Traceback" not in demo.out + demo.err
    assert "failed unexpectedly" not in demo.out
    rows = demo.rows
    assert rows["crash right after an email is sent, resume"] == ("2 emails sent", "1 email sent")
    assert rows["crash inside the email tool, resume"] == (
        "2 emails sent",
        "1 sent, 1 in doubt, not repeated",
    )
    assert rows['"yes" to pay(10, alice), saved call edited'] == (
        "executed pay(9999, mallory)",
        "refused (approval_mismatch)",
    )
    # The racing workers meet inside their model calls, so they overlap however loaded the
    # machine: plain LangGraph forks every time, the lease turns the second one away.
    assert rows["two workers start one agent at once"] == (
        "2 of 2 ran; history forked (1 fork)",
        "1 ran, 1 told lease_held; 0 forks",
    )
    # The briefing the resumed agent got names the email it must not send again.
    briefing = demo.out.split("The briefing the resumed agent was given", 1)[1]
    assert "in doubt" in briefing
    assert "send_email(to='ops@example.com'" in briefing
    # It leaves its records in ./recall.db for the other commands.
    assert os.path.exists(demo.db)


@pytest.mark.slow
def test_demo_records_agree_with_its_table(demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    n = demo.run_no
    with RecallStore.open(demo.db) as store:
        after = store.actions(f"demo-email-after-{n}-recall")
        assert [(a.tool, a.status) for a in after] == [("send_email", "done")]
        inside = store.actions(f"demo-email-inside-{n}-recall", open_only=True)
        assert [(a.tool, a.args["to"]) for a in inside] == [("send_email", "ops@example.com")]
        pay = store.actions(f"demo-pay-{n}-recall")
        assert not [a for a in pay if a.status == "done"], pay
    # The race left no fork in recall.db; the one finding is the email the demo left in doubt.
    code, report = cli_json(capsys, "--db", demo.db, "doctor")
    assert code == 1 and report["findings"] == [
        f"agent 'demo-email-inside-{n}-recall': 1 call(s) in doubt; see `langgraph-recall "
        f"actions demo-email-inside-{n}-recall --open`, then `resolve` them"
    ]
    # Its closing hint works as printed.
    hint = f"actions demo-email-inside-{n}-recall --open"
    assert hint in demo.out
    listed = run_cli("--db", demo.db, *hint.split())
    assert listed.returncode == 0, listed.stderr
    assert "send_email(to='ops@example.com'" in listed.stdout


def test_an_empty_or_foreign_db_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # An empty --db fell back to ./recall.db; mysql:// was taken for a file path.
    for args, needle in [
        (["--db", "", "agents"], "--db is empty"),
        (["agents", "--db", ""], "--db is empty"),
        # An empty --db-b diffed both agents in the first database.
        (["diff", "a", "b", "--db-b", ""], "--db-b is empty"),
        (["diff", "a", "b", "--db-b", "  "], "--db-b is empty"),
        (["--db", "mysql://u@h/db", "agents"], "mysql:// databases are not supported"),
    ]:
        code, out, err = cli(capsys, *args)
        assert_one_line_error(code, out, err, needle)
        assert code == 2, args
    assert os.listdir(tmp_path) == []


def test_a_deleted_database_whose_secret_remains_is_records_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    db = str(tmp_path / "gone.db")
    with RecallStore.open(db) as s:
        s.record("a", [HumanMessage("kept", id="m1")])
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    # It said "no database at gone.db (run `langgraph-recall demo` ...)".
    code, out, err = cli(capsys, "--db", db, "agents")
    assert_one_line_error(code, out, err, "was deleted, emptied or replaced", "backup")
    assert code == 1 and not os.path.exists(db)


def test_an_empty_secret_file_is_one_line_saying_what_to_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    db = str(tmp_path / "recall.db")
    with RecallStore.open(db) as s:
        s.record("a", [HumanMessage("kept", id="m1")])
    open(db + ".secret", "w").close()
    # It said the database "belongs to another store" (records_missing).
    code, out, err = cli(capsys, "--db", db, "agents")
    assert_one_line_error(code, out, err, "is not a usable secret file: it is empty", "backup")
    assert code == 1


def test_the_demos_closing_hint_names_a_database_given_with_db(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph_recall.cli._demo import look_around

    monkeypatch.delenv("LANGGRAPH_RECALL_DB", raising=False)
    assert look_around("./recall.db", 3).startswith("langgraph-recall agents; ")
    # It left --db out, so the commands, pasted, looked in ./recall.db: "no database".
    hint = look_around("/tmp/my demo.db", 3)
    assert hint == (
        "langgraph-recall --db '/tmp/my demo.db' agents; "
        "langgraph-recall --db '/tmp/my demo.db' actions demo-email-inside-3-recall --open"
    )
    monkeypatch.setenv("LANGGRAPH_RECALL_DB", "/tmp/my demo.db")
    assert "--db" not in look_around("/tmp/my demo.db", 3)


@pytest.mark.parametrize("first", ["put", "put_writes"])
def test_demo_crash_dies_at_whichever_save_carries_the_tool_result(
    tmp_path: Any, first: str
) -> None:
    """The demo's "crash right after an email is sent" must leave the result unsaved.

    LangGraph hands a tool task's writes and the step's checkpoint to its background pool as
    two jobs that can run in either order; when the checkpoint ran first (a loaded CI machine)
    the plain agent's result landed and its resume sent 1 email, not 2. Each save, whichever
    comes first, now kills the process before the saver underneath sees it.
    """
    import multiprocessing as mp

    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_recall.cli import _demo_graphs as kit

    flag = str(tmp_path / "crash-after-tool")
    open(flag, "w").close()
    path = str(tmp_path / "plain.db")
    result = [AIMessage("", id="ai-0"), ToolMessage("sent", tool_call_id="c0", id="tm-0")]

    def save() -> None:
        saver = kit.CrashAfterToolSaver(kit.plain_saver(path), flag)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        if first == "put":
            checkpoint["channel_values"] = {"messages": result}
            saver.put(config, checkpoint, {"step": 2}, {})
        else:
            config["configurable"]["checkpoint_id"] = checkpoint["id"]
            saver.put_writes(config, [("messages", result)], "task-1")
        os._exit(0)

    child = mp.get_context("fork").Process(target=save)
    child.start()
    child.join(PROC_TIMEOUT)
    assert child.exitcode == 9
    con = sqlite3.connect(path)
    saved = con.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    saved += con.execute("SELECT count(*) FROM writes").fetchone()[0]
    assert saved == 0


# --- a store with records, on both backends ------------------------------------------------------


def _claim(store: RecallStore, agent: str, action_id: str, tool: str, **args: Any) -> Any:
    return store.claim(
        agent,
        action_id,
        tool=tool,
        args=args,
        args_digest=args_digest(tool, args),
        idempotency_key=f"key-{action_id}",
        thread_id=agent,
    )


def run_messages(agent: str, to: str) -> list[Any]:
    """A small recorded run: ask, call send_email, its result, a final answer."""
    call = {"name": "send_email", "args": {"to": to}, "id": "c1", "type": "tool_call"}
    return [
        HumanMessage("Tell the customer", id=f"{agent}-h"),
        AIMessage("", tool_calls=[call], id=f"{agent}-a1"),
        ToolMessage(f"sent to {to}", tool_call_id="c1", name="send_email", id=f"{agent}-t1"),
        AIMessage("Done.", id=f"{agent}-a2"),
    ]


def fill(store: RecallStore) -> dict[str, str]:
    """billing: one email done, one charge in doubt, a pay waiting for approval, notes."""
    agent = "billing"
    store.record(agent, run_messages(agent, "ann@example.com"), thread_id=agent)
    store.update_working_state(agent, goal="Refund order 7", progress="customer emailed")
    store.set_pointer(agent, "ticket", "https://tickets.example.com/7", note="the refund")
    email = _claim(store, agent, "a1-email", "send_email", to="ann@example.com")
    store.end("a1-email", email.action.attempt, "done", result="sent to ann@example.com")
    _claim(store, agent, "a2-charge", "charge", order="7", amount="-20")
    pay_args = {"amount": 10, "to": "alice"}
    store.record_decision(
        agent,
        "a3-pay",
        "requested",
        args=pay_args,
        args_digest=args_digest("pay", pay_args),
    )
    return {"agent": agent, "email": "a1-email", "charge": "a2-charge"}


@pytest.fixture
def filled(store: RecallStore, store_target: str) -> Iterator[dict[str, str]]:
    ids = fill(store)
    yield {**ids, "db": store_target}


def test_agents_lists_each_agent_with_its_open_actions(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    code, out, _ = cli(capsys, "--db", filled["db"], "agents")
    assert code == 0
    (row,) = parse_table(out, "agent")
    assert row[:4] == ["billing", "-", "1", "4"]
    assert row[4].endswith("ago")


def test_show_has_state_pointers_open_actions_approvals_and_briefing(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    code, out, _ = cli(capsys, "--db", filled["db"], "show", "billing")
    assert code == 0
    assert "goal: Refund order 7" in out
    assert "ticket: https://tickets.example.com/7  (the refund)" in out
    open_part = out.split("open actions", 1)[1].split("pending approvals", 1)[0]
    assert "charge(order='7', amount='-20')" in open_part
    assert "send_email" not in open_part  # done, so not open
    approvals = out.split("pending approvals", 1)[1].split("briefing (", 1)[0]
    assert "a3-pay" in approvals
    tokens = int(re.search(r"briefing \((\d+) tokens\)", out).group(1))  # type: ignore[union-attr]
    assert 0 < tokens <= 2000
    assert "# Briefing: agent billing" in out


def test_show_leaves_the_ttl_of_the_memories_it_shows_alone(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str], store: RecallStore
) -> None:
    """An operator's look kept the agent's memories alive: the briefing's search refreshed
    their TTL, as a read by the agent does."""
    from fix_store import db_now, wait_db_clock_past

    from langgraph_recall.store._records import agent_ns

    ns = agent_ns("billing", "memories")
    store.put(ns, "m", {"text": "the customer Ann prefers email"}, ttl=5.0)

    def expires_at() -> float:
        with store._db.tx() as tx:
            row = tx.one("SELECT expires_at FROM recall_items WHERE key = 'm'")
        assert row is not None
        return float(row[0])

    before = expires_at()
    wait_db_clock_past(store, db_now(store) + 0.05)
    code, out, _ = cli(capsys, "--db", filled["db"], "show", "billing")
    assert code == 0 and "customer Ann prefers email" in out
    assert expires_at() == before
    store.search(ns, query="email")  # what a read by the agent does
    assert expires_at() > before


def test_actions_open_lists_only_what_is_in_doubt(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    code, out, _ = cli(capsys, "--db", filled["db"], "actions", "billing")
    assert code == 0
    assert [(r[0], r[1]) for r in parse_table(out, "action")] == [
        ("a1-email", "done"),
        ("a2-charge", "open, in doubt"),
    ]
    code, out, _ = cli(capsys, "--db", filled["db"], "actions", "billing", "--open")
    assert code == 0
    assert [r[2] for r in parse_table(out, "action")] == ["charge(order='7', amount='-20')"]


def test_a_planned_call_never_started_is_open_but_not_in_doubt(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str], store: RecallStore
) -> None:
    # Written ahead with its AI message's checkpoint, its tool never began: listed as open,
    # not started; verify and doctor count only the charge in doubt.
    write_planned(store, "billing", "a9-plan", "charge", {"order": "9"})
    code, out, _ = cli(capsys, "--db", filled["db"], "actions", "billing", "--open")
    assert [(r[0], r[1]) for r in parse_table(out, "action")] == [
        ("a2-charge", "open, in doubt"),
        ("a9-plan", "open, not started"),
    ]
    code, out, _ = cli(capsys, "--db", filled["db"], "--json", "verify")
    assert {a["action_id"]: a["started"] for a in json.loads(out)["open_actions"]} == {
        "a2-charge": True,
        "a9-plan": False,
    }
    code, out, _ = cli(capsys, "--db", filled["db"], "doctor")
    assert "billing': 1 call(s) in doubt" in out


def test_resolve_done_by_the_short_id_closes_it_once(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str], store: RecallStore
) -> None:
    short = filled["charge"][:8]  # people type a prefix they read in the table
    code, out, _ = cli(capsys, "--db", filled["db"], "resolve", short, "--done", "--note", "seen")
    assert code == 0
    assert "resolved done" in out
    action = store.action(filled["charge"])
    assert (action.status, action.note, action.resolved_by) == ("done", "seen", "person")
    code, out, _ = cli(capsys, "--db", filled["db"], "actions", "billing", "--open")
    assert out.strip() == "(none)"
    # A second resolve is refused: what happened is already on record.
    code, out, err = cli(capsys, "--db", filled["db"], "resolve", filled["charge"], "--not-done")
    assert code == 1
    assert "already done" in err and not out


def test_resolve_not_done_lets_the_call_run_again(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str], store: RecallStore
) -> None:
    code, payload = cli_json(
        capsys, "--db", filled["db"], "resolve", filled["charge"], "--not-done"
    )
    assert code == 0
    assert payload["status"] == "not_done"
    assert store.actions("billing", open_only=True) == []
    again = _claim(store, "billing", filled["charge"], "charge", order="7", amount="-20")
    assert again.status == "claimed" and again.action.attempt == 2


def test_resolve_refuses_a_call_whose_run_still_holds_the_lease(
    filled: dict[str, str], store: RecallStore
) -> None:
    """The charge is open, but a live run holds the agent: it may be executing the call now.
    A person's --not-done then let the resume charge a second time."""
    store.acquire_lease("billing", "worker-7", 300.0)
    for flag in ("--not-done", "--done"):
        result = run_cli("--db", filled["db"], "resolve", filled["charge"], flag)
        assert_process_error(result, "may still be running", "worker-7", "lease to expire")
    assert store.action(filled["charge"]).status == "open"


def test_undo_reports_done_actions_it_has_no_undo_for(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str
) -> None:
    # The CLI process knows no undo functions (they live in the agent's code): it must say so
    # instead of claiming success.
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    email = _claim(store, "mailer", "m-email-1", "send_email", to="bob@example.com")
    store.end("m-email-1", email.action.attempt, "done", result="sent")
    code, out, err = cli(capsys, "--db", store_target, "undo", "mailer")
    # It exited 0 with no word of --with: nothing could be undone, and nothing said how.
    assert code == 1
    assert out.strip() == "undone: 0, already undone: 0, failed: 0, without undo: 1"
    assert "pass yours with --with MODULE:ATTR" in err
    code, payload = cli_json(capsys, "--db", store_target, "undo", "mailer")
    assert code == 1
    assert payload == {
        "undone": [],
        "failed": [],
        "no_undo": ["m-email-1"],
        "no_undo_tools": ["send_email"],
        "stopped_at": None,
        "already_undone": [],
    }


@pytest.fixture
def undo_spec(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Writes a module of undo functions in the working directory; returns its --with spec."""
    monkeypatch.chdir(tmp_path)

    def write(source: str) -> str:
        module = f"ops_undo_{uuid.uuid4().hex[:8]}"  # fresh: imports are cached per process
        (tmp_path / f"{module}.py").write_text(source)
        return f"{module}:UNDO"

    return write


def test_undo_with_the_agents_undo_functions_reverses_once(
    capsys: pytest.CaptureFixture[str],
    store: RecallStore,
    store_target: str,
    tmp_path: Any,
    undo_spec: Callable[[str], str],
) -> None:
    # --with MODULE:ATTR loads the same {tool: fn} dict the agent passes to undo=; each undo
    # is a once-only action, so a second run reverses nothing again.
    spec = undo_spec(
        "import json, pathlib\n"
        "LOG = pathlib.Path(__file__).with_name('recalled.jsonl')\n"
        "def recall_email(to):\n"
        "    with LOG.open('a') as f:\n"
        "        f.write(json.dumps({'to': to}) + '\\n')\n"
        "UNDO = {'send_email': recall_email}\n"
    )
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    email = _claim(store, "mailer", "m-email-1", "send_email", to="bob@example.com")
    store.end("m-email-1", email.action.attempt, "done", result="sent")
    code, out, _ = cli(capsys, "--db", store_target, "undo", "mailer", "--with", spec)
    assert (code, out.strip()) == (0, "undone: 1, already undone: 0, failed: 0, without undo: 0")
    code, out, _ = cli(capsys, "--db", store_target, "undo", "mailer", "--with", spec)
    # It said "undone: 1" again, though it ran nothing.
    assert (code, out.strip()) == (0, "undone: 0, already undone: 1, failed: 0, without undo: 0")
    assert (tmp_path / "recalled.jsonl").read_text().splitlines() == ['{"to": "bob@example.com"}']


def test_undo_names_the_tools_its_undo_functions_leave_out(
    capsys: pytest.CaptureFixture[str],
    store: RecallStore,
    store_target: str,
    undo_spec: Callable[[str], str],
) -> None:
    # --with gave an undo for send_email only: the done charge stayed as it was, and the
    # output said "without undo: 1" with no word of which tool lacked one or where to add it.
    spec = undo_spec("UNDO = {'send_email': lambda to: None}\n")
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    for action_id, tool, args in [
        ("m-email-1", "send_email", {"to": "bob@example.com"}),
        ("m-charge-1", "charge", {"order": "7"}),
    ]:
        claim = _claim(store, "mailer", action_id, tool, **args)
        store.end(action_id, claim.action.attempt, "done", result="ok")
    code, out, err = cli(capsys, "--db", store_target, "undo", "mailer", "--with", spec)
    assert (code, out.strip()) == (0, "undone: 1, already undone: 0, failed: 0, without undo: 1")
    (line,) = err.strip().splitlines()
    assert "no undo function for charge" in line
    assert f"--with {spec}" in line
    # A script reads the same from --json (it listed action ids only).
    code, payload = cli_json(capsys, "--db", store_target, "undo", "mailer", "--with", spec)
    assert (code, payload["no_undo"], payload["no_undo_tools"]) == (0, ["m-charge-1"], ["charge"])


def test_undo_with_a_bad_spec_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], store_target: str, store: RecallStore
) -> None:
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    code, out, err = cli(capsys, "--db", store_target, "undo", "mailer", "--with", "nomodule")
    assert code == 2 and "MODULE:ATTR" in err and "Traceback" not in err


def test_undo_stops_at_an_action_in_doubt(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    code, out, _ = cli(capsys, "--db", filled["db"], "undo", "billing")
    assert code == 1
    assert f"stopped at {filled['charge']}" in out


@pytest.fixture
def second_target(backend: str, tmp_path: Any, request: pytest.FixtureRequest) -> str:
    """Another database (SQLite file) or another schema (PostgreSQL) than ``store_target``."""
    if backend == "sqlite":
        return os.path.join(str(tmp_path), "other.db")
    import psycopg
    from conftest import with_schema

    base = request.getfixturevalue("pg_database")
    schema = "t_" + secrets.token_hex(5)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return with_schema(base, schema)


def test_diff_names_the_first_differing_step_in_one_and_across_two_databases(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str, second_target: str
) -> None:
    store.record("a", run_messages("a", "ann@example.com"))
    store.record("b", run_messages("b", "ann@example.com"))
    store.record("c", run_messages("c", "carl@example.com"))
    code, out, _ = cli(capsys, "--db", store_target, "diff", "a", "b")
    assert (code, out.strip()) == (0, "a and b: identical (4 steps)")
    code, out, _ = cli(capsys, "--db", store_target, "diff", "a", "c")
    assert code == 1
    assert "agree for 1 steps, then differ at step 2" in out
    assert "a: model: '' -> send_email(to='ann@example.com')" in out
    assert "c: model: '' -> send_email(to='carl@example.com')" in out
    with RecallStore.open(second_target) as other:
        other.record("a", run_messages("elsewhere", "ann@example.com"))
        other.record("d", run_messages("d", "ann@example.com")[:2])
    code, payload = cli_json(
        capsys, "--db", store_target, "diff", "a", "a", "--db-b", second_target
    )
    assert (code, payload["identical"], payload["same_steps"]) == (0, True, 4)
    code, payload = cli_json(
        capsys, "--db", store_target, "diff", "a", "d", "--db-b", second_target
    )
    assert code == 1
    assert payload["first_difference"] == 3
    assert payload["left_step"].startswith("tool_result: send_email")
    assert payload["right_step"] is None  # d's run ended there


def test_verify_is_ok_on_a_healthy_store(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str
) -> None:
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    email = _claim(store, "mailer", "m-email-1", "send_email", to="bob@example.com")
    store.end("m-email-1", email.action.attempt, "done", result="sent")
    code, out, _ = cli(capsys, "--db", store_target, "verify")
    assert code == 0
    assert out.splitlines()[-1] == "ok"
    assert "PROBLEM" not in out


def test_verify_lists_an_open_intent_and_exits_non_zero(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    code, out, _ = cli(capsys, "--db", filled["db"], "verify")
    assert code == 1
    assert "PROBLEM" not in out
    assert f"OPEN: {filled['charge'][:16]} billing charge(order='7', amount='-20')" in out


def _sql(target: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Run one statement straight on the database, as someone with write access could."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
        return
    conn = sqlite3.connect(target)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def test_verify_reports_a_dropped_append_only_trigger(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str
) -> None:
    store.record("mailer", run_messages("mailer", "bob@example.com"))
    if store._db.dialect == "sqlite":
        _sql(store_target, "DROP TRIGGER recall_turns_no_delete")
    else:
        _sql(store_target, "DROP TRIGGER recall_turns_append_only ON recall_turns")
    code, out, _ = cli(capsys, "--db", store_target, "verify")
    assert code == 1
    assert "PROBLEM: recall_turns has lost its append-only trigger" in out
    assert "ok" not in out.splitlines()


def test_verify_reports_a_forged_approval_row(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str], store: RecallStore
) -> None:
    # Someone with write access turns the pending request into a "yes" by adding a row: the
    # tables allow inserts, but the signature covers the decision, so it cannot verify.
    (request,) = store.pending_approvals("billing")
    _sql(
        filled["db"],
        "INSERT INTO recall_approvals (approval_id, agent_id, action_id, decision, args_type, "
        "args, args_digest, message, signature, created_at) SELECT 'forged', agent_id, "
        "action_id, 'approve', args_type, args, args_digest, message, signature, created_at + 1 "
        "FROM recall_approvals WHERE approval_id = ?",
        (request.approval_id,),
    )
    code, out, _ = cli(capsys, "--db", filled["db"], "verify")
    assert code == 1
    assert "PROBLEM: approval forged for action a3-pay has an invalid signature" in out


# --- doctor: a fork made by two plain LangGraph processes, and a run that died -------------------


def plain_saver(target: str) -> Any:
    """LangGraph's own saver on the store's database, without langgraph-recall around it."""
    if target.startswith("postgresql://"):
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        conn = psycopg.connect(target, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        return PostgresSaver(conn)  # type: ignore[arg-type]
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver(sqlite3.connect(target, check_same_thread=False, timeout=60))


def _one_node_graph(saver: Any, node: Any) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph

    g = StateGraph(MessagesState)
    g.add_node("work", node)
    g.add_edge(START, "work")
    return g.compile(checkpointer=saver)


def fork_worker(target: str, thread: str, me: str, other: str) -> None:
    """Run one turn on ``thread``; inside the node wait until the other worker is inside too.

    Both read the thread's head before either can write past its own first checkpoint, so one
    checkpoint gets two children (or the new thread two roots), whoever is faster."""

    def work(state: Any) -> dict[str, Any]:
        open(me, "w").close()
        deadline = time.monotonic() + PROC_TIMEOUT
        while not os.path.exists(other):
            if time.monotonic() > deadline:
                raise TimeoutError("the other worker never arrived")
            time.sleep(0.01)
        return {"messages": [AIMessage(f"done by {os.getpid()}")]}

    graph = _one_node_graph(plain_saver(target), work)
    cfg = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(f"hello from {os.getpid()}")]}, cfg, durability="sync")


def crash_worker(target: str, thread: str) -> None:
    """Die after the node's results are saved and before the checkpoint that follows them."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    inner = plain_saver(target)

    class DiesBeforeNextCheckpoint(BaseCheckpointSaver):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(serde=inner.serde)

        def get_tuple(self, config: Any) -> Any:
            return inner.get_tuple(config)

        def list(self, config: Any, **kw: Any) -> Any:
            return inner.list(config, **kw)

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            inner.put_writes(config, writes, task_id, task_path)

        def get_next_version(self, current: Any, channel: Any) -> Any:
            return inner.get_next_version(current, channel)

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            if metadata.get("step", -1) >= 1:
                # put_writes runs on another executor thread: wait until the node's results
                # are durable, so the crash lands exactly between them and this checkpoint.
                deadline = time.monotonic() + PROC_TIMEOUT
                while not (inner.get_tuple(config).pending_writes or time.monotonic() > deadline):
                    time.sleep(0.01)
                os._exit(9)
            return inner.put(config, checkpoint, metadata, new_versions)

    def work(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage("half way")]}

    graph = _one_node_graph(DiesBeforeNextCheckpoint(), work)
    cfg = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage("go")]}, cfg, durability="sync")


def tool_crash_worker(target: str, agent: str) -> None:
    """Die inside an external tool's call: the step never ends, the lease is never given back."""
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from langgraph_recall import DurableToolNode
    from langgraph_recall.testing import ScriptedChatModel, call, reply

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        os._exit(9)

    model = ScriptedChatModel([reply("", call("send_email", to="ops@example.com")), reply("sent")])
    store = RecallStore.open(target)
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("tools", DurableToolNode([send_email], classes={"send_email": "external"}))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    graph = g.compile(store=store, checkpointer=store.checkpointer(lease_ttl=1.0))
    graph.invoke({"messages": [HumanMessage("mail ops")]}, {"configurable": {"thread_id": agent}})


def _worker(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), *args])


@pytest.mark.slow
def test_doctor_finds_a_fork_made_by_two_plain_processes(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str, tmp_path: Any
) -> None:
    code, out, _ = cli(capsys, "--db", store_target, "doctor")  # also creates the saver tables
    assert code == 0 and "no forks, unfinished runs or calls in doubt found" in out
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    procs = [
        _worker("fork-worker", store_target, "shared-thread", a, b),
        _worker("fork-worker", store_target, "shared-thread", b, a),
    ]
    assert [p.wait(PROC_TIMEOUT) for p in procs] == [0, 0]
    code, out, _ = cli(capsys, "--db", store_target, "doctor")
    assert code == 1
    assert "thread 'shared-thread':" in out
    assert "two writers" in out
    code, report = cli_json(capsys, "--db", store_target, "doctor")
    assert code == 1
    assert report["threads_checked"] == 1
    assert all("shared-thread" in f for f in report["findings"])


@pytest.mark.slow
def test_doctor_finds_a_run_that_died_before_its_next_checkpoint(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str
) -> None:
    assert cli(capsys, "--db", store_target, "doctor")[0] == 0
    proc = _worker("crash-worker", store_target, "died-thread")
    assert proc.wait(PROC_TIMEOUT) == 9
    code, out, _ = cli(capsys, "--db", store_target, "doctor")
    assert code == 1
    assert "thread 'died-thread': the last run stopped after its tasks finished" in out
    assert "invoke(None, config)" in out


@pytest.mark.slow
def test_doctor_finds_an_agent_whose_run_died_inside_a_tool_step(
    capsys: pytest.CaptureFixture[str], store: RecallStore, store_target: str
) -> None:
    proc = _worker("tool-crash-worker", store_target, "died-in-tool")
    assert proc.wait(PROC_TIMEOUT) == 9
    lease = store.lease("died-in-tool")
    assert lease is not None and lease.expires_at > 0
    time.sleep(max(0.0, lease.expires_at - time.time()) + 0.2)
    # It said "no forks, unfinished runs or calls in doubt found" and exited 0: the head, waiting on the tool
    # step, looks like a run paused before it.
    code, report = cli_json(capsys, "--db", store_target, "doctor")
    assert code == 1
    # (Messages its head holds that the killed run had not recorded yet, if any, are a
    # finding of their own: whether there are any depends on when it was killed.)
    found = [
        f
        for f in report["findings"]
        if "died-in-tool" in f and "not recorded as its turns" not in f
    ]
    assert len(found) == 2, report["findings"]
    assert "its last run" in found[0] and "never ended" in found[0]
    assert "invoke(None, config)" in found[0]
    assert "1 call(s) in doubt" in found[1]


# --- JSON for scripts ---------------------------------------------------------------------------


def test_json_output_parses_and_is_the_same_on_every_run(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    db = filled["db"]
    commands = [
        ["agents"],
        ["show", "billing"],
        ["actions", "billing"],
        ["actions", "billing", "--open"],
        ["verify"],
        ["doctor"],
    ]
    first = {" ".join(c): cli_json(capsys, "--db", db, *c) for c in commands}
    again = {" ".join(c): cli_json(capsys, "--db", db, *c) for c in commands}
    assert first == again
    _, agents = first["agents"]
    assert set(agents[0]) == {
        "agent_id",
        "created_at",
        "last_activity",
        "turns",
        "open_actions",
        "lease_holder",
        "lease_expires_at",
    }
    _, shown = first["show billing"]
    assert set(shown) == {
        "agent",
        "working_state",
        "pointers",
        "open_actions",
        "pending_approvals",
        "briefing",
    }
    assert shown["working_state"]["goal"] == "Refund order 7"
    assert shown["pointers"]["ticket"]["target"] == "https://tickets.example.com/7"
    assert [p["action_id"] for p in shown["pending_approvals"]] == ["a3-pay"]
    _, acts = first["actions billing"]
    assert [(a["action_id"], a["status"], a["args"]) for a in acts] == [
        ("a1-email", "done", {"to": "ann@example.com"}),
        ("a2-charge", "open", {"order": "7", "amount": "-20"}),
    ]
    code, report = first["verify"]
    assert code == 1 and report["ok"] is False
    assert [a["action_id"] for a in report["open_actions"]] == ["a2-charge"]
    # The same flags work after the subcommand, as people tend to type them.
    assert cli_json(capsys, "actions", "billing", "--db", db) == first["actions billing"]


# --- errors: one line, non-zero, no traceback --------------------------------------------------
# One case of each kind runs as a real process (what a person sees, tracebacks included); the
# variations run in-process through the same ``main``, because each process start costs seconds.


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code != 0
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("langgraph-recall: "), lines[0]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0]


def assert_process_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert_one_line_error(result.returncode, result.stdout, result.stderr, *needles)


def test_unknown_agent_is_one_line(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    result = run_cli("--db", filled["db"], "show", "nobody")
    assert_process_error(result, "no agent 'nobody'", "known: billing")
    for args in (["actions", "nobody"], ["undo", "nobody"], ["diff", "billing", "nobody"]):
        assert_one_line_error(*cli(capsys, "--db", filled["db"], *args), "no agent 'nobody'")


def test_unknown_action_is_one_line(
    capsys: pytest.CaptureFixture[str], filled: dict[str, str]
) -> None:
    got = cli(capsys, "--db", filled["db"], "resolve", "zzz-no-such", "--done")
    assert_one_line_error(*got, "no action 'zzz-no-such'")


def test_missing_database_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "nowhere" / "recall.db")
    assert_process_error(run_cli("--db", missing, "agents"), f"no database at {missing}")
    for args in (["verify"], ["doctor"], ["show", "x"], ["resolve", "x", "--done"]):
        assert_one_line_error(*cli(capsys, "--db", missing, *args), f"no database at {missing}")
    assert not os.path.exists(missing)  # looking never creates a database
    # The default is ./recall.db, or $LANGGRAPH_RECALL_DB.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LANGGRAPH_RECALL_DB", raising=False)
    assert_one_line_error(*cli(capsys, "agents"), "no database at ./recall.db")
    monkeypatch.setenv("LANGGRAPH_RECALL_DB", missing)
    assert_one_line_error(*cli(capsys, "agents"), f"no database at {missing}")


_LOOKS = (
    ["agents"],
    ["show", "x"],
    ["actions", "x"],
    ["verify"],
    ["doctor"],
    ["diff", "a", "b"],
    ["resolve", "x", "--done"],
    ["undo", "x"],
)


def _what_is_there(target: str, folder: Any) -> Any:
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            ).fetchone()
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("kind", ["an application's file", "an empty file", "postgres"])
def test_a_database_that_is_not_a_store_is_refused_and_left_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, kind: str, request: pytest.FixtureRequest
) -> None:
    """Each command installed the schema (and a secret file; doctor LangGraph's tables too)
    in whatever --db named, then reported "(none)" or "ok" with exit 0."""
    if kind == "postgres":
        request.node.add_marker(pytest.mark.postgres)
        target = str(request.getfixturevalue("pg_dsn"))  # a schema of its own, empty
        needle = "is not a langgraph-recall store"
    else:
        target = str(tmp_path / "app.db")
        with open(target, "wb"):
            pass
        if kind == "an application's file":
            with sqlite3.connect(target) as conn:
                conn.execute("CREATE TABLE users (id INTEGER)")
            conn.close()
        needle = f"{target} is not a langgraph-recall store"
    before = _what_is_there(target, tmp_path)
    assert_process_error(run_cli("--db", target, "agents"), needle, "nothing was written")
    for args in _LOOKS:
        assert_one_line_error(*cli(capsys, "--db", target, *args), needle)
    assert _what_is_there(target, tmp_path) == before


def test_unreachable_postgres_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://x@127.0.0.1:1/x"
    assert_process_error(run_cli("--db", dsn, "agents"), "cannot reach PostgreSQL", "127.0.0.1")
    assert_one_line_error(*cli(capsys, "--db", dsn, "verify"), "cannot reach PostgreSQL")


def test_a_password_in_the_dsns_query_is_never_shown(
    capsys: pytest.CaptureFixture[str], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the userinfo's password was left out; one given as ?password= was printed whole.
    dsn = pg_dsn + "&password=hunter2"
    code, out, err = cli(capsys, "--db", dsn, "agents")  # an empty schema: not a store yet
    assert_one_line_error(code, out, err, "is not a langgraph-recall store", "password=***")
    assert "hunter2" not in err
    unreachable = "postgresql://x@127.0.0.1:1/x?password=hunter2"
    code, out, err = cli(capsys, "--db", unreachable, "verify")
    assert_one_line_error(code, out, err, "cannot reach PostgreSQL", "password=***")
    assert "hunter2" not in err
    with RecallStore.open(dsn) as store:
        assert "hunter2" not in store.target and "hunter2" not in repr(store)
        store.record("a", [HumanMessage("kept", id="m1")])
    code, out, err = cli(capsys, "--db", dsn, "doctor")
    assert "password=***" in out and "hunter2" not in out + err
    code, out, err = cli(capsys, "--db", dsn, "show", "nobody")
    assert_one_line_error(code, out, err, "no agent 'nobody'")
    assert "hunter2" not in err
    from langgraph_recall.cli._demo import look_around

    monkeypatch.delenv("LANGGRAPH_RECALL_DB", raising=False)
    assert "hunter2" not in look_around(dsn, 1)


def test_a_password_the_driver_quotes_back_is_never_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A raw "%" in a password (not written as %25) is a DSN libpq refuses, and its message
    # quotes the token whole: 'invalid percent-encoded token: "hunter%2z"'.
    for dsn in (
        "postgresql://app:hunter%zz2@127.0.0.1:1/x",
        "postgresql://app@127.0.0.1:1/x?password=hunter%zz2",
    ):
        with pytest.raises(RecallError) as err:
            RecallStore.open(dsn, secret="s")
        assert "hunter" not in str(err.value) and "percent-encoded" in str(err.value)
        # Nor in a logged traceback, whose chained cause is the driver's own error.
        assert "hunter" not in "".join(traceback.format_exception(err.value))
        code, out, err_text = cli(capsys, "--db", dsn, "verify")
        assert_one_line_error(code, out, err_text, "cannot reach PostgreSQL")
        assert "hunter" not in err_text


def test_a_store_that_lost_only_recall_meta_is_named_so_by_the_cli(
    capsys: pytest.CaptureFixture[str], store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI's look before the open saw no recall_meta and said "not a langgraph-recall
    # store ... Check --db", sending the user to another database, while its records remain.
    monkeypatch.setenv("LANGGRAPH_RECALL_SECRET", "s")
    with RecallStore.open(store_target) as s:
        s.record("ag", [HumanMessage("kept", id="m-1")])
    if store_target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_target, autocommit=True) as conn:
            conn.execute("DROP TABLE recall_meta")
    else:
        with sqlite3.connect(store_target) as conn:
            conn.execute("DROP TABLE recall_meta")
        conn.close()
        os.remove(store_target + ".secret")
    for command in ("agents", "verify"):
        code, out, err = cli(capsys, "--db", store_target, command)
        assert_one_line_error(code, out, err, "but not recall_meta", "Restore the database")
        assert "not a langgraph-recall store" not in err


def test_bad_flags_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    db = str(tmp_path / "recall.db")
    RecallStore.open(db).close()
    result = run_cli("--db", db, "--bogus", "agents")
    # click words it "No such option '--bogus'." from 8.4, "No such option: --bogus" before.
    assert_process_error(result, "No such option", "--bogus")
    assert result.returncode == 2
    cases = [
        (["agents", "--bogus"], "--bogus"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["actions"], "Missing argument 'AGENT'"),
        (["resolve", "abc"], "--done or --not-done"),
        # Both were taken, the last one winning, and a resolution is permanent.
        (["resolve", "abc", "--done", "--not-done"], "not both; nothing was recorded"),
    ]
    for args, needle in cases:
        code, out, err = cli(capsys, "--db", db, *args)
        assert_one_line_error(code, out, err, needle)
        assert code == 2, (args, code)


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    workers = {
        "fork-worker": fork_worker,
        "crash-worker": crash_worker,
        "tool-crash-worker": tool_crash_worker,
    }
    workers[role](*rest)
