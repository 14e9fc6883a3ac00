"""A PostgreSQL server of the tests' own, to break: terminate its sessions, restart it, stop it.

The shared server on 5432 is never touched: ``OwnServer`` runs ``initdb`` into a temporary
folder and ``pg_ctl`` on a free port, as the ``postgres`` user when the tests run as root
(``initdb`` refuses root). One per module (``own_pg``), removed at its end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("RECALL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnServer:
    """One PostgreSQL cluster in a temporary folder, on a port of its own."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="recall-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self._as, str(PG_BIN / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            log = self.folder / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stdout} "
                f"{done.stderr}\nserver log:\n{tail}"
            )
        return done

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories="
            f"{self.folder} -c fsync=off -c max_connections=60"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.folder / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def terminate_backends(self) -> int:
        """End every client session but the one asking (as an administrator would), and wait
        until they are gone; returns how many there were."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            pids = [
                r[0]
                for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                ).fetchall()
            ]
            conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            deadline = time.monotonic() + 10
            while pids and time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
                ).fetchone()
                if not left or not left[0]:
                    break
                time.sleep(0.01)
        return len(pids)

    def fresh_dsn(self) -> str:
        """A DSN of a new database on this server (one per test: no shared rows)."""
        import psycopg

        name = "t_" + os.urandom(5).hex()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn.rsplit("/", 1)[0] + "/" + name

    def remove(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnServer]:
    """A PostgreSQL server this module may terminate, restart and stop (removed after)."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server binaries in {PG_BIN} (set RECALL_TEST_PG_BIN)")
    server = OwnServer()
    try:
        yield server
    finally:
        server.remove()


def wait_up(server: OwnServer, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(server.dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
