"""``langgraph-recall doctor``: versions, the database, and threads that forked or never finished."""

from __future__ import annotations

import shlex
import time
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import RecallStore

PACKAGES = (
    "langgraph-recall",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langgraph-prebuilt",
    "langchain-core",
    "langchain",
    "psycopg",
)


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_doctor(store: RecallStore) -> dict[str, Any]:
    """A JSON-able report; ``findings`` lists what needs attention (empty when healthy)."""
    from .checkpoint import inspect_threads, unrecorded_turns

    findings: list[str] = []
    threads = inspect_threads(store)
    for t in threads:
        findings.extend(t.findings())
    findings.extend(agent_findings(store))
    roots = sorted({t.thread_id for t in threads if not t.checkpoint_ns})
    for agent_id, thread_id, missing in unrecorded_turns(store, roots):
        findings.append(
            f"agent {agent_id!r}: {missing} message(s) of the head checkpoint of thread "
            f"{thread_id!r} are not recorded as its turns (its last run died, or its end could "
            "not write them); they are safe in the checkpoint: run the agent again, or submit "
            "the same turn_id again, and they are recorded"
        )
    return {
        "versions": versions(),
        "database": f"{store.dialect} at {store.target}: reachable",
        "threads_checked": len(threads),
        "findings": findings,
    }


def agent_findings(store: RecallStore) -> list[str]:
    """Agents whose last run died mid-run, and calls left in doubt while no run is going.

    A run gives its lease back when it ends, fails or pauses (its expiry set to 0); one that
    expired instead was held by a process that died or froze before its end. The checkpoints
    alone cannot show that for a run killed inside a step: its head, waiting on the step's
    tasks, looks like one paused by ``interrupt_before``.
    """
    now = time.time()
    out: list[str] = []
    for agent in store.agents():
        if agent.lease_holder is not None:
            continue  # a run is going (or its holder died within lease_ttl): not yet a finding
        lease = store.lease(agent.agent_id)
        if lease is not None and 0 < lease.expires_at <= now:
            out.append(
                f"agent {agent.agent_id!r}: its last run (holder {lease.holder}) never ended: "
                f"its lease expired at {_when(lease.expires_at)} without being given back, so "
                "the process died or froze mid-run; resume the agent with invoke(None, config) "
                "on its thread"
            )
        # Open and started: a call planned with its AI message and never started is not in
        # doubt (the agent's next run runs it once or closes it).
        doubts = (
            sum(a.started for a in store.actions(agent.agent_id, open_only=True))
            if agent.open_actions
            else 0
        )
        if doubts:
            out.append(
                f"agent {agent.agent_id!r}: {doubts} call(s) in doubt; see "
                f"`langgraph-recall actions {shlex.quote(agent.agent_id)} --open`, then `resolve` them"
            )
    return out


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
