"""The notebooks run top to bottom in a fresh ``python3`` kernel, so they can never rot.

Each notebook asserts on what it computes (emails sent, payments made, orders charged); after
it ran, a probe cell in the same kernel reports those values and the test checks them again, so
a notebook whose own asserts were deleted still fails here. The committed files carry no
outputs. ``03_postgres_workers`` runs on the real PostgreSQL server, and its fallback (no server
answers) is checked by running its setup cell against a port where nothing listens.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
CELL_TIMEOUT = 300  # per cell; generous, the machine is shared
NAMES = ["01_quickstart", "02_durable_tools_and_approvals", "03_postgres_workers"]
PROBE_MARK = "PROBE:"
# Run in the notebook's kernel after it, even when a cell failed: no worker process, throwaway
# database or temporary folder outlives the test.
CLEANUP = """
import contextlib as _c, shutil as _s
for _p in [globals().get("worker"), *(globals().get("workers") or {}).values()]:
    if _p is not None and _p.poll() is None:
        _p.kill()
if globals().get("on_postgres"):
    with _c.suppress(Exception):
        _workers.drop_postgres_database(admin_dsn, target)
if globals().get("folder"):
    _s.rmtree(folder, ignore_errors=True)
"""

pytestmark = pytest.mark.slow


def read(name: str) -> Any:
    return nbformat.read(os.path.join(NOTEBOOKS, f"{name}.ipynb"), as_version=4)


def run(
    name: str, probe: str, *, code_cells: int | None = None, env: dict[str, str] | None = None
) -> tuple[Any, dict[str, Any]]:
    """Execute the notebook (or its first ``code_cells`` code cells) in a fresh kernel, then
    ``probe`` (an expression) in the same kernel; returns the executed notebook and the probe."""
    nb = read(name)
    if code_cells is not None:
        keep, seen = [], 0
        for cell in nb.cells:
            if cell.cell_type == "code":
                if seen == code_cells:
                    break
                seen += 1
            keep.append(cell)
        nb.cells = keep
    nb.cells.append(new_code_cell(f"import json\nprint({PROBE_MARK!r} + json.dumps({probe}))"))
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": NOTEBOOKS}},
    )
    kernel_env = {**os.environ, **(env or {})}
    with client.setup_kernel(env=kernel_env):
        try:
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        finally:
            with contextlib.suppress(Exception):  # the kernel may be gone; nothing more to do
                client.execute_cell(new_code_cell(CLEANUP), len(nb.cells))
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    line = next(x for x in out.splitlines() if x.startswith(PROBE_MARK))
    return nb, json.loads(line[len(PROBE_MARK) :])


def text_of(nb: Any) -> str:
    """All text the notebook printed or displayed as plain text."""
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                parts.append(o.text)
            elif "data" in o:
                parts.append(str(o.data.get("text/plain", "")))
    return "\n".join(parts)


def outputs_of(nb: Any, starts_with: str) -> list[Any]:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts_with)]
    return list(cell.outputs)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_no_outputs(name: str) -> None:
    nb = read(name)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, name
    assert all(not c.outputs and c.execution_count is None for c in code), name
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_quickstart_resumes_from_the_briefing_after_a_kill() -> None:
    nb, got = run(
        "01_quickstart",
        '{"sent": [e["to"] for e in sent], "first_call": [m.type for m in first_call], '
        '"briefing": briefing.text, "tokens": briefing.tokens, "exists": os.path.exists(folder)}',
    )
    # ops was emailed by the killed worker, the customer by the resumed agent; nobody twice.
    assert got["sent"] == ["ops@example.com", "customer@example.com"]
    # The resumed model saw the briefing and one new message, not a replayed history.
    assert got["first_call"] == ["system", "human"]
    assert "goal: Announce that deploy 42 finished" in got["briefing"]
    assert 0 < got["tokens"] <= 2000
    # The briefing cell shows the rich Jupyter display, not a dataclass repr.
    (shown,) = outputs_of(nb, "briefing = store.briefing")
    assert "text/html" in shown.data and "Briefing: agent deploy-bot" in shown.data["text/html"]
    assert "worker exit status: -9" in text_of(nb)
    assert not got["exists"]  # it cleaned up after itself


def test_durable_tools_notebook_never_repeats_and_refuses_the_tamper() -> None:
    nb, got = run(
        "02_durable_tools_and_approvals",
        '{"emails": [e["to"] for e in emails], '
        '"payments": [(p["amount"], p["to"]) for p in payments], '
        '"tampered": result["messages"][-2].content}',
    )
    text = text_of(nb)
    assert "unclassified_tool: 1 tool(s) have no class: delete_branch" in text
    assert text.count("worker exit status: 9") == 2  # two real crashes inside send_email
    assert "is UNKNOWN" in text and "NOT run again" in text  # the model was told, not lied to
    assert "resolved done" in text  # the operator's CLI resolve
    assert got["emails"] == ["ann@example.com", "ann@example.com"]  # one per agent, none again
    # approve pay(10), edit to pay(8), reject, tampered 9999 refused, then undo refunds 10 once.
    assert got["payments"] == [[10, "alice"], [8, "alice"], [-10, "alice"]]
    assert "given for other arguments" in got["tampered"] and "nothing ran" in got["tampered"]
    assert "9999" not in json.dumps(got["payments"])


def _pg_reachable() -> bool:
    try:
        import psycopg
        from conftest import PG_ADMIN

        psycopg.connect(PG_ADMIN, connect_timeout=5).close()
        return True
    except Exception:
        return False


def test_postgres_workers_notebook_hands_over_after_a_kill() -> None:
    nb, got = run(
        "03_postgres_workers",
        '{"orders": [(e["order"], e["by"]) for e in ledger], "killed": at_work, "codes": codes, '
        '"status": report.status, "on_postgres": on_postgres, "target": target}',
    )
    orders = [o for o, _ in got["orders"]]
    assert sorted(orders) == ["A-1", "A-2", "A-3", "A-4", "A-5", "A-6"]  # each exactly once
    takers = {by for _, by in got["orders"][2:]}
    assert len(takers) == 1 and got["killed"] not in takers  # one other worker finished it
    assert got["codes"][got["killed"]] == -9
    assert sorted(c for n, c in got["codes"].items() if n != got["killed"]) == [0, 0]
    assert got["status"] == "ok"
    if _pg_reachable() or os.environ.get("CI"):
        assert got["on_postgres"], "PostgreSQL answers, yet the notebook fell back to SQLite"
        import psycopg
        from conftest import PG_ADMIN

        dbname = got["target"].rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        assert row is None, f"the notebook left its database {dbname} behind"
    assert "Falling back" not in text_of(nb) or not got["on_postgres"]


def test_postgres_workers_notebook_falls_back_to_sqlite_without_a_server() -> None:
    nowhere = "postgresql://nobody@127.0.0.1:1/nothing"
    nb, got = run(
        "03_postgres_workers",
        '{"on_postgres": on_postgres, "target": target}',
        code_cells=1,
        env={"RECALL_TEST_PG": nowhere},
    )
    text = text_of(nb)
    assert f"No PostgreSQL server answered at {nowhere}" in text
    assert "Falling back to a SQLite file" in text
    assert got["on_postgres"] is False and got["target"].endswith("recall.db")
