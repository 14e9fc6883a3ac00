"""Issue 32's kill matrix: a resumed agent finishes its task from any crash point.

The task (``fix_matrix``): look up an order (pure), write the working state (recall tool),
check a policy (pure), ``issue_refund`` (external), ``set_pointer`` (recall tool),
``send_email`` (external), ``update_crm`` (idempotent), answer. A model that decides from its
input only drives it, ``DurableToolNode`` in a custom graph with ``with_briefing`` (the
README's example) and ``create_agent`` with ``RecallMiddleware``, both on
``store.checkpointer()``, on SQLite and on PostgreSQL.

Each case is two real processes, forked from this one: the first is SIGKILLed at its kill
point (after the k-th checkpoint, through the ``after_put`` fault point, or inside a tool
before or after its effect); a fresh one resumes on the same thread (``invoke(None)``, or a
new "continue" message) or on a new thread of the same ``agent_id``, with a resolver that
asks the effect log, or without one. Then:

- with a resolver: the run completes, no effect is doubled, at most one step is redone, no
  call is left open;
- without one: only a call whose effect may have started (killed inside an external tool) is
  left in doubt, and the model is told so and waits; every other run completes, and a call
  that never started runs exactly once;
- the naive model, which calls a step again whenever it cannot see its outcome, doubles
  nothing: every outcome is visible to it.

Runs use ``durability="sync"`` (under LangGraph's default "async" a kill can lose the last
checkpoint, issue 32 item 8, and the kill after the k-th checkpoint would race the next step).

Size: the full product (2 styles x 2 databases x 27-29 kill points x 3 resumes x resolver or
not x 2 models, about 1,300 cases) takes some seven minutes of CPU. So every kill point runs,
with both models, for the configuration the issue measured worst (``DurableToolNode``, SQLite,
new thread, resolver: ``full_cases``), and every other configuration runs a stratified sample:
one checkpoint kill, one kill before a tool's effect and one after it, drawn from a seeded
shuffle of each stratum and cycled, so every kill point of each style is drawn somewhere
(``sampled_cases``). The seed is ``RECALL_MATRIX_SEED`` (default 32) and is in each sampled
case's id (``s32-...``). About 200 cases of about 0.3 s of CPU each (the two children; the
tools and durable parts are built once, here, before the children fork): about 75 s of CPU
for the file with ``-n 3``, pytest's start included.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import with_schema
from fix_matrix import (
    DURABLE,
    FINAL,
    PUTS,
    STYLES,
    Case,
    briefing_outcome,
    count_puts,
    full_cases,
    outcome,
    problems,
    run_case,
    sampled_cases,
)
from langchain_core.messages import AIMessage, ToolMessage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()"),
]

SEED = int(os.environ.get("RECALL_MATRIX_SEED", "32"))
REPORT = os.environ.get("RECALL_MATRIX_REPORT")  # a file to append each case's outcome to


def _param(case: Case, prefix: str) -> Any:
    marks = [pytest.mark.postgres] if case.db == "postgres" else []
    return pytest.param(case, id=f"{prefix}{case.id}", marks=marks)


class Databases:
    """One SQLite file and one PostgreSQL schema per module and test process, made on first
    use; each case has agents of its own in them."""

    def __init__(self, request: pytest.FixtureRequest, folder: Path) -> None:
        self.request = request
        self.folder = folder
        self.made: dict[str, str] = {}

    def target(self, db: str) -> str:
        if db not in self.made:
            if db == "postgres":
                import psycopg

                database = self.request.getfixturevalue("pg_database")
                # A name of its own: under xdist's load balancing a module fixture can be
                # made again in one session when the module's tests come back to a worker.
                schema = "matrix_" + secrets.token_hex(4)
                with psycopg.connect(database, autocommit=True) as conn:
                    conn.execute(f'CREATE SCHEMA "{schema}"')
                self.made[db] = with_schema(database, schema)
            else:
                self.made[db] = str(self.folder / "matrix.db")
        return self.made[db]


@pytest.fixture(scope="module")
def databases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Databases]:
    yield Databases(request, tmp_path_factory.mktemp("matrix"))


@pytest.fixture
def folder(tmp_path: Path) -> str:
    return str(tmp_path)


@pytest.mark.parametrize(
    ("line", "seen"),
    [
        ("- issue_refund(order_id='O-4471', amount=42.5) -> done: refund R-1 of 42.5", "done"),
        ("issue_refund(order_id='O-4471') -> done (resolved by resolver: found it)", "done"),
        ("issue_refund(order_id='O-4471') -> not done (never started): call it again", "not done"),
        ("issue_refund(order_id='O-4471') -> in doubt: do not call it again", "in doubt"),
        ("issue_refund(order_id='O-4471') -> not started yet", "not started yet"),
        ("issue_refund(order_id='O-4471') -> waiting for approval", "waiting for approval"),
        ("issue_refund(order_id='O-4471') -> failed: card expired", "failed"),
        ("issue_refund(order_id='O-4471') -> refused (rejected by a person: no)", "refused"),
        ("tool issue_refund: refund R-1 of 42.5 for O-4471", "done"),
        ("tool issue_refund: The outcome of issue_refund(...) is UNKNOWN: ...", "in doubt"),
        ("assistant: Next: issue_refund. | called issue_refund(order_id='O-4471')", None),
        (
            "## Unconfirmed calls (in doubt): ...\n- issue_refund(order_id='O-4471') [a1]",
            "in doubt",
        ),
        ("## Working state\n- issue_refund(order_id='O-4471') [a1]", None),
        ("assistant: called send_email(to='a') -> done: sent", None),
    ],
)
def test_the_model_reads_each_outcome_the_briefing_can_show(line: str, seen: str | None) -> None:
    # The phrases of notes/OUTCOMES.md; a call of another tool says nothing of this one.
    assert briefing_outcome("issue_refund", f"# Briefing\n{line}\n") == seen


def test_an_answered_call_counts_as_done_over_an_older_outcome_in_the_briefing() -> None:
    # An old thread's call settled "not done" and called again here: the answer here counts.
    # Without it the naive model would call issue_refund forever.
    briefing = "issue_refund(order_id='O-4471') -> not done (never started): call it again"
    answered = [
        AIMessage("", tool_calls=[{"name": "issue_refund", "args": {}, "id": "c1"}]),
        ToolMessage("refund R-1 of 42.5", tool_call_id="c1", name="issue_refund"),
    ]
    assert outcome("issue_refund", briefing, answered) == "done"
    assert outcome("issue_refund", briefing, []) == "not done"
    # The records' state now (the briefing) before an answer given earlier in the thread.
    in_doubt = ToolMessage("UNKNOWN", tool_call_id="c1", name="issue_refund", status="error")
    in_doubt.artifact = {"recall": {"code": "in_doubt", "action_id": "a1"}}
    assert outcome("issue_refund", "", [answered[0], in_doubt]) == "in doubt"
    assert outcome("issue_refund", briefing, [answered[0], in_doubt]) == "not done"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_run_writes_the_checkpoints_the_matrix_kills_after(
    style: str, db: str, databases: Databases, folder: str
) -> None:
    # The matrix kills after each of these checkpoints: if the count changes, PUTS must follow,
    # or some checkpoints go untested (or kill points fall past the end of the run).
    puts, result = count_puts(style, databases.target(db), folder)
    assert puts == PUTS[style]
    assert result.answer == FINAL
    assert all(result.effects[t] == 1 for t in DURABLE), result.describe()
    assert result.redone == 0 and not result.open_calls, result.describe()


def _check(case: Case, databases: Databases, folder: str) -> None:
    result = run_case(case, databases.target(case.db), folder)
    found = problems(result)
    if REPORT:  # one JSON line per case, for a table of what fails where
        with open(REPORT, "a") as f:
            f.write(json.dumps({"case": case.id, "problems": found, "result": result.describe()}))
            f.write("\n")
    assert found == [], result.describe()


@pytest.mark.parametrize("case", [_param(c, "") for c in full_cases()])
def test_every_kill_point(case: Case, databases: Databases, folder: str) -> None:
    _check(case, databases, folder)


@pytest.mark.parametrize("case", [_param(c, f"s{SEED}-") for c in sampled_cases(SEED)])
def test_sampled_configurations(case: Case, databases: Databases, folder: str) -> None:
    _check(case, databases, folder)
