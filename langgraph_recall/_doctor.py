"""``langgraph-recall doctor``: versions, the database, and threads that forked or never finished."""

from __future__ import annotations

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
    from .checkpoint import inspect_threads

    findings: list[str] = []
    threads = inspect_threads(store)
    for t in threads:
        findings.extend(t.findings())
    return {
        "versions": versions(),
        "database": f"{store.dialect} at {store.target}: reachable",
        "threads_checked": len(threads),
        "findings": findings,
    }
