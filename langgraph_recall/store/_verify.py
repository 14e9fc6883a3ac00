"""Integrity checks over a store's records, for ``langgraph-recall verify`` and for tests.

Each check names what it found; ``problems`` are things that are wrong (tampering, a missing
guard, a broken invariant), ``open_actions`` are things a person must look at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._actions import actions as list_actions
from ._approvals import approval_problems
from ._schema import APPEND_ONLY_TABLES, APPROVAL_CHAIN_VERSION, SCHEMA_VERSION

if TYPE_CHECKING:
    from ._store import RecallStore


@dataclass
class VerifyReport:
    schema_version: int
    problems: list[str] = field(default_factory=list)
    open_actions: list[dict[str, Any]] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        # A call planned and never started needs nobody: it runs once, or is closed, at the
        # agent's next run. One in doubt needs a person or a resolver.
        return not self.problems and not any(a["started"] for a in self.open_actions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "schema_version": self.schema_version,
            "supported_schema_version": SCHEMA_VERSION,
            "problems": self.problems,
            "open_actions": self.open_actions,
            "checked": self.checked,
        }


def verify(store: RecallStore) -> VerifyReport:
    db = store._db
    with db.tx() as tx:
        row = tx.one("SELECT value FROM recall_meta WHERE key = 'schema_version'")
        version = int(row[0]) if row else 0
        report = VerifyReport(schema_version=version)
        if version != SCHEMA_VERSION:
            report.problems.append(
                f"schema version is v{version}, this langgraph-recall expects v{SCHEMA_VERSION}"
            )
        if tx.dialect == "sqlite":
            names = {r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
            guarded = {
                t
                for t in APPEND_ONLY_TABLES
                if f"{t}_no_update" in names and f"{t}_no_delete" in names
            }
        else:
            names = {
                r[0]
                for r in tx.all(
                    "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND "
                    "tgrelid::regclass::text = ANY(?)",
                    (list(APPEND_ONLY_TABLES),),
                )
            }
            # Row triggers do not fire on TRUNCATE: a journal is guarded only with both.
            guarded = {
                t
                for t in APPEND_ONLY_TABLES
                if f"{t}_append_only" in names and f"{t}_no_truncate" in names
            }
        for table in APPEND_ONLY_TABLES:
            if table not in guarded:
                report.problems.append(f"{table} has lost its append-only trigger")
        # Turn sequence numbers are handed out without gaps; a gap means rows were removed.
        for agent_id, n, top in tx.all(
            "SELECT agent_id, COUNT(*), MAX(seq) FROM recall_turns GROUP BY agent_id"
        ):
            if int(n) != int(top):
                report.problems.append(
                    f"agent {agent_id}: {int(top) - int(n)} recorded turns are missing (seq gaps)"
                )
        report.checked["turns"] = int(tx.one("SELECT COUNT(*) FROM recall_turns")[0])  # type: ignore[index]
        report.checked["actions"] = int(tx.one("SELECT COUNT(*) FROM recall_actions")[0])  # type: ignore[index]
        agents = [
            r[0]
            for r in tx.all("SELECT DISTINCT agent_id FROM recall_actions WHERE outcome IS NULL")
        ]
        for agent_id in agents:
            for a in list_actions(tx, agent_id, True):
                report.open_actions.append(
                    {
                        "action_id": a.action_id,
                        "agent_id": a.agent_id,
                        "tool": a.tool,
                        "call": a.call_text(),
                        "started": a.started,
                    }
                )
        # Every decision row in its action's chain: bad signatures, copies, re-ordered or
        # gapped places, orphaned rows and spends, each named (``_approvals``). A store not
        # upgraded yet has no chains (its version is reported above).
        found = approval_problems(tx, store._secret) if version >= APPROVAL_CHAIN_VERSION else []
        for ap, why in found:
            if ap is None:
                report.problems.append(why)
            else:
                report.problems.append(
                    f"approval {ap.approval_id} for action {ap.action_id} {why}; nothing runs on "
                    "this action's decisions (altered, copied, re-ordered or deleted rows, or "
                    "another secret)"
                )
    report.checked["approvals"] = _count(store, "recall_approvals")
    return report


def _count(store: RecallStore, table: str) -> int:
    with store._db.tx() as tx:
        row = tx.one(f"SELECT COUNT(*) FROM {table}")
    return int(row[0]) if row else 0
