"""Small helpers the notebooks share: worker processes, waiting, files of effects, a database.

The notebooks run their agents in real worker processes (so a crash is a real crash: the
process is gone, its memory with it), started from a script the notebook wrote. These helpers
keep the notebook cells about the agent, not about process plumbing.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Where the notebooks look for a PostgreSQL server they may create a database on.
DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def start_worker(script: str, *args: str, log: str, env: dict[str, str] | None = None) -> Any:
    """Start ``python script args...`` as a separate process; its output goes to ``log``."""
    out = open(log, "ab")  # noqa: SIM115 - the child keeps it open; closed when we exit
    return subprocess.Popen(
        [sys.executable, script, *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )


def kill(proc: Any) -> int:
    """``kill -9`` the process: no cleanup code of its own runs. Returns its exit status."""
    proc.send_signal(signal.SIGKILL)
    return int(proc.wait(60))


def wait_for(check: Callable[[], T], *, what: str, timeout: float = 120.0) -> T:
    """Poll ``check()`` until it returns something truthy, and return that.

    Raises:
        TimeoutError: naming ``what`` was awaited, after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON lines in ``path`` (the notebooks' stand-ins for a mail server or a ledger)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def append_jsonl(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it, so a kill right after cannot lose it."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def create_postgres_database(admin_dsn: str) -> str | None:
    """Create a throwaway database; its DSN, or None when no server answers at ``admin_dsn``."""
    try:
        import psycopg

        conn = psycopg.connect(admin_dsn, autocommit=True, connect_timeout=3)
    except Exception as exc:  # no driver, no server, wrong credentials: all mean "fall back"
        print(f"No PostgreSQL server answered at {admin_dsn} ({type(exc).__name__}: {exc}).")
        return None
    name = "recall_notebook_" + secrets.token_hex(4)
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(admin_dsn)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def drop_postgres_database(admin_dsn: str, dsn: str) -> None:
    """Drop a database made by ``create_postgres_database`` (closing its connections)."""
    import psycopg

    name = urllib.parse.urlsplit(dsn).path.lstrip("/")
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
