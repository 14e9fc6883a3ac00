"""The store's signing secret and the "records missing" check.

On SQLite the secret lives in a file beside the database (``recall.db.secret``, mode 0600),
together with the id of the store it belongs to. That pairing is what lets us notice a database
that was deleted, emptied or swapped: the secret file says "there were records here", the
database says "I am new" (or "I am another store"), and we refuse instead of starting over.
On PostgreSQL the secret is passed in (``secret=``) or read from ``LANGGRAPH_RECALL_SECRET``.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from .._errors import RecallError, RecordsMissing
from ._db import Database
from ._probe import sqlite_found
from ._schema import TABLES

ENV_SECRET = "LANGGRAPH_RECALL_SECRET"


def secret_path(db_path: str) -> str:
    return db_path + ".secret"


def _store_id(db: Database) -> str | None:
    with db.tx() as tx:
        row = tx.one("SELECT value FROM recall_meta WHERE key = 'store_id'")
    return None if row is None else str(row[0])


def _holds_records(db: Database) -> bool:
    """Whether any recall table but ``recall_meta`` has a row."""
    with db.tx() as tx:
        return any(
            tx.one(f"SELECT 1 FROM {table} LIMIT 1") is not None
            for table in TABLES
            if table != "recall_meta"
        )


def _set_store_id(db: Database) -> str:
    new_id = secrets.token_hex(16)
    with db.tx(write=True) as tx:
        tx.run(
            "INSERT INTO recall_meta (key, value) VALUES ('store_id', ?) ON CONFLICT (key) DO NOTHING",
            (new_id,),
        )
        row = tx.one("SELECT value FROM recall_meta WHERE key = 'store_id'")
    assert row is not None
    return str(row[0])


def sqlite_secret(
    db: Database, db_path: str, existed_before: bool, given: bytes | None = None
) -> bytes:
    """Load (or on first use create) the secret file, refusing a database that lost its records.

    With ``given`` (``RecallStore.open(path, secret=...)``) the secret is the caller's, and the
    file keeps the store id only: without a file, a database deleted and created again (or
    swapped) beside the application's own secret started empty, unnoticed.
    """
    # Several processes may open a fresh database at once. Holding the database's write lock
    # while we look and create means each one sees either no store id and no secret file, or
    # both: never another process's half-written file, never two different secrets.
    with db.tx(write=True):
        return _sqlite_secret_locked(db, db_path, existed_before, given)


def refuse_if_deleted(db_path: str) -> None:
    """Refuse, before anything opens the database for writing, one that was deleted, emptied
    or replaced while its secret file remains (``records_missing``): opening it would create
    the schema in its place (in an emptied file, or in another application's) and only then
    notice. Both are looked at without writing: the file through a read-only connection.

    The secret file is checked first: a store being created by another process right now
    creates the database file (its first connection) and its schema before it writes the
    secret, so a secret seen here with no database file after it means the database was
    deleted, and one seen with a file that has no schema means the file was emptied or
    replaced. A schema with no store id yet is that creation under way (the id commits just
    after the secret is linked): the check under the write lock (``sqlite_secret``) decides.
    """
    path = secret_path(db_path)
    if not os.path.exists(path):
        return
    store_id, _ = read_secret_file(path, db_path)
    if not os.path.exists(db_path):
        raise _missing(db_path, path, "does not exist", store_id)
    found = sqlite_found(db_path)
    if found is None:
        return  # unreadable without writing: the normal open says what is wrong with it
    if not found.is_store:
        raise _missing(db_path, path, "holds no langgraph-recall records", store_id)
    if found.store_id is not None and found.store_id != store_id:
        raise _missing(db_path, path, "belongs to another store", store_id)


def _missing(db_path: str, path: str, what: str, store_id: Any) -> RecordsMissing:
    return RecordsMissing(
        f"{db_path} {what}, but {path} says this place held the records of store "
        f"{store_id}: the database was deleted, emptied or replaced. Nothing was written. "
        f"Restore the database from a backup, or, to start fresh on purpose, delete {path} too.",
        path=db_path,
    )


def read_secret_file(path: str, db_path: str) -> tuple[str, bytes | None]:
    """The store id and signing secret a secret file holds (None: the file of a store opened
    with ``secret=``, which keeps the store id only).

    Strict: a file that is empty, cut short, edited by hand or unreadable is ``secret_missing``
    (saying what to do), never taken as "no store id" (which read as another store's database,
    ``records_missing``) or let through as a raw ``KeyError`` or ``ValueError``. The file is
    written whole under a temporary name and linked into place, so a store being created
    right now never shows a partial one.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as exc:
        raise _unusable(path, db_path, f"it cannot be read ({exc})") from exc
    if not text.strip():
        raise _unusable(path, db_path, "it is empty")
    try:
        saved = json.loads(text)
    except ValueError:
        raise _unusable(path, db_path, "it is not the JSON object langgraph-recall wrote") from None
    if not isinstance(saved, dict):
        raise _unusable(path, db_path, "it is not the JSON object langgraph-recall wrote")
    store_id = saved.get("store_id")
    if not isinstance(store_id, str) or not store_id:
        raise _unusable(path, db_path, "it names no store id")
    if "secret" not in saved:
        return store_id, None
    raw = saved["secret"]
    try:
        secret = bytes.fromhex(raw) if isinstance(raw, str) else b""
    except ValueError:
        secret = b""
    if not secret:
        raise _unusable(path, db_path, "its signing secret is not hex")
    return store_id, secret


def _unusable(path: str, db_path: str, why: str) -> RecallError:
    return RecallError(
        f"{path} is not a usable secret file: {why}. It holds the store id and the approvals' "
        f"signing secret of {db_path}, which was not opened. Restore it from a backup; "
        f"to start over on purpose, move {db_path} away and delete {path}.",
        code="secret_missing",
        path=path,
    )


def _sqlite_secret_locked(
    db: Database, db_path: str, existed_before: bool, given: bytes | None
) -> bytes:
    path = secret_path(db_path)
    store_id = _store_id(db)
    if os.path.exists(path):
        saved_id, saved_secret = read_secret_file(path, db_path)
        if store_id != saved_id:
            what = "is new or empty" if store_id is None else "belongs to another store"
            raise _missing(db_path, path, what, saved_id)
        if given is not None:
            return given
        if saved_secret is None:
            return _secret_from_env(
                path,
                f"{db_path} was opened with secret=..., so its secret file {path} keeps "
                "only the store id",
            )
        return saved_secret
    if given is not None:
        # A store opened with secret= before its secret file kept the store id (or the file
        # was lost): nothing here to verify approvals with, so the file is (re)made, id only.
        _write_secret_file(path, {"store_id": store_id or _set_store_id(db)})
        return given
    if store_id is not None and existed_before:
        raise RecallError(
            f"{path} is missing, so approvals recorded in {db_path} can no longer be verified. "
            "Restore the secret file from a backup; to start over on purpose, move the database "
            "away as well.",
            code="secret_missing",
        )
    if store_id is None and existed_before and _holds_records(db):
        # Records but no store id and no secret file: a store opened with secret= before such
        # stores kept an id file. A secret made up here would read every approval as forged
        # (and, kept in the file, win over LANGGRAPH_RECALL_SECRET for good).
        secret = _secret_from_env(
            path,
            f"{db_path} holds records but no store id, and there is no secret file {path}, "
            "so it was opened with secret=...",
        )
        _write_secret_file(path, {"store_id": _set_store_id(db)})
        return secret
    store_id = store_id or _set_store_id(db)
    secret = secrets.token_bytes(32)
    _write_secret_file(path, {"store_id": store_id, "secret": secret.hex()})
    return secret


def _secret_from_env(path: str, why: str) -> bytes:
    """The secret of a store opened with ``secret=`` (it is the caller's, never in the file),
    opened now without one: ``LANGGRAPH_RECALL_SECRET``, or ``secret_missing`` saying ``why``."""
    from_env = os.environ.get(ENV_SECRET)
    if from_env:
        return from_env.encode()
    raise RecallError(
        f"{why}: pass the same secret= to RecallStore.open, or set {ENV_SECRET} to it (the CLI "
        f"reads {ENV_SECRET}).",
        code="secret_missing",
        path=path,
    )


def _write_secret_file(path: str, content: dict[str, str]) -> None:
    # Create with 0600 from the start: never a moment where others can read it. Written whole
    # under a temporary name, then linked into place, so a crash never leaves a partial file.
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def postgres_secret_given(given: str | bytes | None) -> str | bytes:
    """The signing secret for a PostgreSQL store, checked before anything touches the database
    (a refused open creates no tables)."""
    # An empty secret= counts as not given, as on SQLite.
    raw = given or os.environ.get(ENV_SECRET)
    if not raw:
        raise RecallError(
            "a PostgreSQL RecallStore needs a signing secret shared by all workers: pass "
            f"secret=... to RecallStore.open or set {ENV_SECRET} (for example to the output of "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`; the CLI reads "
            f"{ENV_SECRET}).",
            code="secret_missing",
        )
    return raw


def postgres_secret(db: Database, given: str | bytes | None) -> bytes:
    raw = postgres_secret_given(given)
    if _store_id(db) is None:
        _set_store_id(db)
    return raw if isinstance(raw, bytes) else raw.encode()
