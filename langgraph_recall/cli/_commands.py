"""Subcommands of ``langgraph-recall``."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, TypeVar

import click

from .._errors import RecallError
from ..store import RecallStore
from ..store._db import _redact, check_scheme, is_postgres_target, sqlite_path
from ..store._probe import found_at
from ..store._secret import secret_path
from ..store._store import default_target
from ._format import ago, emit_json, jsonable, table

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    def __init__(self, db: str, as_json: bool) -> None:
        self.db = db
        self.as_json = as_json


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"langgraph-recall: {message}", err=True)
    raise SystemExit(code)


@contextmanager
def open_store(ctx: Ctx, *, create: bool = False) -> Iterator[RecallStore]:
    """Open the store for a command; a missing SQLite file is an error unless ``create``."""
    try:
        check_scheme(ctx.db)
    except RecallError as exc:
        _fail(str(exc), code=2)
    if not create and not is_postgres_target(ctx.db):
        path = sqlite_path(ctx.db)
        # A file gone but its secret still there is a deletion: RecallStore.open says so
        # (records_missing), where "no database" would send the user to the demo.
        if not os.path.exists(path) and not os.path.exists(secret_path(path)):
            _fail(f"no database at {path} (run `langgraph-recall demo`, or pass --db PATH_OR_DSN)")
    if not create:
        _refuse_if_not_a_store(ctx.db)
    try:
        store = RecallStore.open(ctx.db)
    except RecallError as exc:
        _fail(str(exc))
        raise  # unreachable, for type checkers
    try:
        yield store
    finally:
        store.close()


def _refuse_if_not_a_store(target: str) -> None:
    """Refuse a database that exists but is not a langgraph-recall store (an application's
    SQLite file, an empty file, the wrong PostgreSQL database), looked at without writing:
    opening it installed the schema (and a secret file) and a look reported "(none)" or "ok".
    A SQLite file whose secret file remains is left to ``RecallStore.open``, which says it
    was emptied or replaced (``records_missing``)."""
    try:
        found = found_at(target)
    except RecallError as exc:
        _fail(str(exc))
        return
    if found is None or found.is_store or found.lost_meta:
        return  # a store that lost recall_meta: the open refuses it (records_missing)
    if is_postgres_target(target):
        where = f"PostgreSQL database {_redact(target)}"
    else:
        path = sqlite_path(target)
        if os.path.exists(secret_path(path)):
            return
        where = path
    _fail(
        f"{where} is not a langgraph-recall store (it has no recall_meta table); nothing was "
        "written. Check --db (or $LANGGRAPH_RECALL_DB); a store is created by your agent's "
        "RecallStore.open or by `langgraph-recall demo`"
    )


def _require_agent(store: RecallStore, agent_id: str) -> None:
    try:
        store._require_agent(agent_id)
    except RecallError as exc:
        _fail(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    default=None,
    metavar="PATH_OR_DSN",
    help="SQLite path or postgresql:// DSN (default ./recall.db or $LANGGRAPH_RECALL_DB).",
)
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON for scripts.")
@click.pass_context
def cli(click_ctx: click.Context, db: str | None, as_json: bool) -> None:
    """Look at, settle and check the records of LangGraph agents."""
    click_ctx.obj = Ctx(_given_db(db) or default_target(), as_json)


def _given_db(db: str | None, option: str = "--db") -> str | None:
    # An empty --db (an unset variable in a script: --db "$DB") would fall back to the default
    # database, which is then read or, by demo, written: refuse it.
    if db is not None and not db.strip():
        raise click.UsageError(f"{option} is empty: give a SQLite file path or a postgresql:// DSN")
    return db


pass_ctx = click.make_pass_decorator(Ctx)


def _anywhere(fn: F) -> F:
    """Accept ``--db`` and ``--json`` after the subcommand too (``show AGENT --json``)."""

    @functools.wraps(fn)
    def run(*args: Any, sub_db: str | None, sub_json: bool, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Ctx)
        if ctx is not None:
            ctx.db = _given_db(sub_db) or ctx.db
            ctx.as_json = ctx.as_json or sub_json
        return fn(*args, **kwargs)

    run = click.option("--json", "sub_json", is_flag=True, help="Print stable JSON.")(run)
    run = click.option(
        "--db", "sub_db", default=None, metavar="PATH_OR_DSN", help="As before the command."
    )(run)
    return run  # type: ignore[return-value]


@cli.command()
@pass_ctx
@_anywhere
def agents(ctx: Ctx) -> None:
    """Every agent: lease holder, open actions, turns, last activity."""
    with open_store(ctx) as store:
        rows = store.agents()
    if ctx.as_json:
        emit_json([asdict(a) for a in rows])
        return
    click.echo(
        table(
            ["agent", "lease holder", "open actions", "turns", "last activity"],
            [
                (a.agent_id, a.lease_holder or "-", a.open_actions, a.turns, ago(a.last_activity))
                for a in rows
            ],
        )
    )


def _action_row(a: Any) -> tuple[Any, ...]:
    return (a.action_id[:16], _status(a), a.call_text(60), a.attempt, a.note or a.error or "")


def _status(a: Any) -> str:
    """An open call is in doubt only once its tool may have begun."""
    if a.status != "open":
        return str(a.status)
    return "open, in doubt" if a.started else "open, not started"


def _action_dict(a: Any) -> dict[str, Any]:
    d = asdict(a)
    d["args"] = jsonable(d["args"])
    d["result"] = jsonable(d["result"])
    return d


@cli.command()
@click.argument("agent")
@pass_ctx
@_anywhere
def show(ctx: Ctx, agent: str) -> None:
    """Working state, pointers, open actions, pending approvals and the briefing of AGENT."""
    with open_store(ctx) as store:
        _require_agent(store, agent)
        state = store.working_state(agent)
        pointers = store.pointers(agent)
        open_actions = store.actions(agent, open_only=True)
        pending = store.pending_approvals(agent)
        # A look: the memories it shows keep the TTL they had (a read would refresh it).
        brief = store.briefing(agent, refresh_ttl=False)
    if ctx.as_json:
        emit_json(
            {
                "agent": agent,
                "working_state": jsonable(state),
                "pointers": {k: asdict(p) for k, p in pointers.items()},
                "open_actions": [_action_dict(a) for a in open_actions],
                "pending_approvals": [
                    {"action_id": p.action_id, "args": jsonable(p.args), "digest": p.args_digest}
                    for p in pending
                ],
                "briefing": {"text": brief.text, "tokens": brief.tokens},
            }
        )
        return
    click.secho(f"agent {agent}", bold=True)
    click.secho("\nworking state", bold=True)
    click.echo("\n".join(f"  {k}: {v}" for k, v in state.items()) or "  (none)")
    click.secho("\npointers", bold=True)
    click.echo(
        "\n".join(
            f"  {p.name}: {p.target}" + (f"  ({p.note})" if p.note else "")
            for p in pointers.values()
        )
        or "  (none)"
    )
    click.secho("\nopen actions", bold=True)
    click.echo(
        table(
            ["action", "status", "call", "attempt", "note"], [_action_row(a) for a in open_actions]
        )
    )
    click.secho("\npending approvals", bold=True)
    click.echo(
        table(
            ["action", "digest"], [(p.action_id[:16], (p.args_digest or "")[:12]) for p in pending]
        )
    )
    click.secho(f"\nbriefing ({brief.tokens} tokens)", bold=True)
    click.echo(brief.text)


@cli.command()
@click.argument("agent")
@click.option(
    "--open",
    "open_only",
    is_flag=True,
    help="Only actions still open: in doubt, or planned and not started yet.",
)
@pass_ctx
@_anywhere
def actions(ctx: Ctx, agent: str, open_only: bool) -> None:
    """The side-effecting tool calls of AGENT and how each ended."""
    with open_store(ctx) as store:
        _require_agent(store, agent)
        rows = store.actions(agent, open_only=open_only)
    if ctx.as_json:
        emit_json([_action_dict(a) for a in rows])
        return
    click.echo(
        table(["action", "status", "call", "attempt", "note"], [_action_row(a) for a in rows])
    )


@cli.command()
@click.argument("action")
@click.option("--done", is_flag=True, help="It happened (its effect is real).")
@click.option("--not-done", is_flag=True, help="It did not happen; may run again.")
@click.option("--note", default=None, help="Why you decided so (kept with the record).")
@pass_ctx
@_anywhere
def resolve(ctx: Ctx, action: str, done: bool, not_done: bool, note: str | None) -> None:
    """Settle an open (in doubt) ACTION after checking the real world."""
    # Two flags, not one option with two flag values: given both, click kept the last, and a
    # resolution is permanent.
    if done and not_done:
        _fail("give one of --done or --not-done, not both; nothing was recorded", code=2)
    if not (done or not_done):
        _fail("say what happened: --done or --not-done", code=2)
    outcome = "done" if done else "not_done"
    with open_store(ctx) as store:
        try:
            a = store.resolve(action, str(outcome), note)
        except RecallError as exc:
            _fail(str(exc))
            return
    if ctx.as_json:
        emit_json(_action_dict(a))
    else:
        click.echo(f"{a.action_id[:16]} {a.call_text(60)}: resolved {a.status}")


@cli.command()
@click.argument("agent")
@click.option(
    "--with",
    "undo_from",
    metavar="MODULE:ATTR",
    default=None,
    help="Your undo functions: a dict {tool_name: fn}, e.g. myapp.tools:UNDO.",
)
@pass_ctx
@_anywhere
def undo(ctx: Ctx, agent: str, undo_from: str | None) -> None:
    """Reverse AGENT's done actions newest first, with their undo functions.

    The undo functions live in your code: --with MODULE:ATTR names the same {tool_name: fn}
    dict you pass to DurableToolNode(undo=...).
    """
    functions = _load_undo(undo_from) if undo_from else {}
    with open_store(ctx) as store:
        _require_agent(store, agent)
        try:
            report = store.undo(agent, undo=functions)
        except RecallError as exc:
            _fail(str(exc))
            return
        # The tools of the done actions left as they were: what a script or a person has to add
        # an undo function for.
        without = sorted({store.action(a).tool for a in report.no_undo})
    left_out = without if functions else []  # --with's spec names the dict to add them to
    # Done actions left as they were because this process knows no undo for them: with no
    # --with, none is known at all (the functions live in the user's code).
    unknown = bool(report.no_undo) and not functions
    if ctx.as_json:
        emit_json({**asdict(report), "no_undo_tools": without})
    else:
        click.echo(
            f"undone: {len(report.undone)}, already undone: {len(report.already_undone)}, "
            f"failed: {len(report.failed)}, without undo: {len(report.no_undo)}"
        )
        if report.stopped_at:
            click.echo(f"stopped at {report.stopped_at}: it is in doubt; resolve it first")
        if unknown:
            click.echo(
                "no undo functions are known here: pass yours with --with MODULE:ATTR (the "
                "{tool_name: fn} dict you give DurableToolNode(undo=...))",
                err=True,
            )
        elif left_out:
            click.echo(
                f"no undo function for {', '.join(left_out)} in --with {undo_from}: add it to "
                "that {tool_name: fn} dict and run undo again",
                err=True,
            )
    if report.failed or report.stopped_at or (unknown and not report.undone):
        raise SystemExit(1)


def _load_undo(spec: str) -> dict[str, Callable[..., Any]]:
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        _fail(f"--with wants MODULE:ATTR (e.g. myapp.tools:UNDO), got {spec!r}", code=2)
    sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        _fail(f"cannot load undo functions from {spec}: {exc}", code=2)
        raise
    from ..tools._undo import is_undo_function

    if not isinstance(found, dict) or not all(is_undo_function(f) for f in found.values()):
        _fail(f"{spec} must be a dict of tool name to undo function or LangChain tool", code=2)
    return dict(found)


@cli.command()
@click.argument("agent_a")
@click.argument("agent_b")
@click.option(
    "--db-b", default=None, metavar="PATH_OR_DSN", help="Database of AGENT_B, if another."
)
@pass_ctx
@_anywhere
def diff(ctx: Ctx, agent_a: str, agent_b: str, db_b: str | None) -> None:
    """The first step where the runs of AGENT_A and AGENT_B differ."""
    from .._diff import diff as diff_runs

    # An empty --db-b would otherwise diff both agents in the first database, silently.
    db_b = _given_db(db_b, "--db-b")
    with open_store(ctx) as store:
        _require_agent(store, agent_a)
        if db_b:
            with open_store(Ctx(db_b, ctx.as_json)) as other:
                _require_agent(other, agent_b)
                result = diff_runs(store, agent_a, agent_b, store_b=other)
        else:
            _require_agent(store, agent_b)
            result = diff_runs(store, agent_a, agent_b)
    if ctx.as_json:
        emit_json(result.as_dict())
    else:
        click.echo(str(result))
    if not result.identical:
        raise SystemExit(1)


@cli.command()
@pass_ctx
@_anywhere
def verify(ctx: Ctx) -> None:
    """Check schema, approval signatures, append-only guards; list intents left open."""
    from ..store._verify import verify as run_verify

    with open_store(ctx) as store:
        report = run_verify(store)
    if ctx.as_json:
        emit_json(report.as_dict())
    else:
        click.echo(f"schema v{report.schema_version}; checked {report.checked}")
        for p in report.problems:
            click.secho(f"PROBLEM: {p}", fg="red")
        for a in report.open_actions:
            why = (
                "in doubt; see `resolve`"
                if a["started"]
                else "planned, never started: it runs once on its thread's resume, or is "
                "closed as not done at the agent's next run"
            )
            click.secho(
                f"OPEN: {a['action_id'][:16]} {a['agent_id']} {a['call']} ({why})", fg="yellow"
            )
        if report.ok:
            click.secho("ok", fg="green")
    if not report.ok:
        raise SystemExit(1)


@cli.command()
@pass_ctx
@_anywhere
def doctor(ctx: Ctx) -> None:
    """Versions, database reachable, forked threads, runs that died, calls left in doubt."""
    from .._doctor import run_doctor

    with open_store(ctx) as store:
        report = run_doctor(store)
    if ctx.as_json:
        emit_json(report)
    else:
        for k, v in report["versions"].items():
            click.echo(f"{k:32} {v}")
        click.echo(f"database: {report['database']}")
        for line in report["findings"]:
            click.secho(line, fg="yellow")
        if not report["findings"]:
            click.secho("no forks, unfinished runs or calls in doubt found", fg="green")
    if report["findings"]:
        raise SystemExit(1)


@cli.command()
@pass_ctx
@_anywhere
def demo(ctx: Ctx) -> None:
    """Crash, resume, tamper and race an agent, without and with langgraph-recall."""
    from ._demo import run_demo

    try:
        run_demo(ctx.db)
    except RecallError as exc:
        _fail(str(exc))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``langgraph-recall`` console script."""
    try:
        cli.main(args=argv, prog_name="langgraph-recall", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:  # one line, like every other error; the help says the rest
        where = exc.ctx.command_path if exc.ctx is not None else "langgraph-recall"
        click.echo(f"langgraph-recall: {exc.format_message()} (see `{where} --help`)", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except SystemExit as exc:
        return int(exc.code or 0)
    except RecallError as exc:
        click.echo(f"langgraph-recall: {exc}", err=True)
        return 1
    except Exception as exc:  # one clear line, never a traceback
        click.echo(f"langgraph-recall: unexpected {type(exc).__name__}: {exc}", err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
