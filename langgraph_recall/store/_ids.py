"""The one rule for identifiers: agent ids, thread ids, turn ids, action ids, pointer names,
item keys and namespace labels (docs/identifiers.md says it for users).

An identifier is a ``str`` that UTF-8 can encode (no lone surrogate, which the drivers refuse
with a ``UnicodeEncodeError`` naming nothing), without NUL (PostgreSQL's text cannot hold it),
and, where it is written, at most ``MAX_ID_BYTES`` bytes in UTF-8. Names (everything but item
keys, which LangGraph's stores take as any text) are also not empty and not only whitespace:
blanks are what an unset variable or a template leaves, and records filed under them are
found again only by pasting the same blanks.

The limit is in bytes because PostgreSQL's is: a btree index entry holds at most 2704 bytes,
and an item's primary key holds its namespace and its key, so a 10 KB id that SQLite took was
refused by PostgreSQL ("index row requires 10256 bytes"). 512 bytes (512 ASCII characters,
128 of the longest) per identifier and ``MAX_NAMESPACE_BYTES`` for a namespace's labels
joined by "." keep the widest entry (namespace, key and an index field path) under about
2,200 bytes. Reads check only what the drivers cannot send (type, NUL, surrogates), so an
identifier written before this rule stays readable.
"""

from __future__ import annotations

import uuid
from typing import Any

from .._errors import InvalidNamespace, RecallError

MAX_ID_BYTES = 512
# An agent's records live under ("recall", <agent id with "." and "%" escaped>, <kind>): a
# 512-byte agent id of dots makes a 1,559-byte namespace, which must fit.
MAX_NAMESPACE_BYTES = 1600


def check_id(
    name: str, value: Any, *, write: bool = True, blank_ok: bool = False, hint: str = ""
) -> str:
    """``value`` if it is a usable identifier, else ``RecallError(code="invalid_value")``
    naming ``name``, the problem and what to pass instead (``hint``, when given, says how).

    ``write``: also refuse what is too long to store (and, unless ``blank_ok``, blanks).
    ``blank_ok``: an empty or all-whitespace value is taken (item keys).
    """
    problem = id_problem(value, write=write, blank_ok=blank_ok)
    if problem is not None:
        raise RecallError(
            f"{name} {problem} (got {shown(value)}); {hint or 'pass a shorter, plain name'}",
            code="invalid_value",
            argument=name,
        )
    return value  # type: ignore[no-any-return]


def id_problem(value: Any, *, write: bool = True, blank_ok: bool = False) -> str | None:
    """What is wrong with ``value`` as an identifier, or None."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if value.isascii():  # the common case: no surrogate, one byte a character
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            return (
                f"holds a lone surrogate ({value[exc.start]!r} at position {exc.start}), which "
                "is not valid Unicode and cannot be stored; decode the text it came from "
                "properly (or with errors='replace')"
            )
    if "\x00" in value:
        return "contains a NUL character (\\x00), which PostgreSQL cannot store"
    if not blank_ok and (not value or (write and value.isspace())):
        return "must be a non-empty string, not only whitespace"
    if write and size > MAX_ID_BYTES:
        return (
            f"is {size} bytes in UTF-8; an identifier is at most {MAX_ID_BYTES} bytes "
            "(PostgreSQL indexes it)"
        )
    return None


def check_label(namespace: Any, label: Any) -> None:
    """One namespace label: LangGraph's rule (a non-empty string without ".") and the
    identifier rule; refused as ``InvalidNamespace`` (also LangGraph's error) like the rest of
    a namespace. Labels have no length of their own: the namespace as a whole has one."""
    if isinstance(label, str) and label and "." not in label:
        problem = id_problem(label, write=False, blank_ok=True)
        if problem is None:
            return
        raise InvalidNamespace(
            f"namespace label {shown(label)} {problem}; namespace: {shown(namespace)}",
            namespace=shown(namespace),
        )
    raise InvalidNamespace(
        f"Namespace labels must be non-empty strings without '.' or NUL: {namespace!r}"
    )


def check_namespace_size(namespace: tuple[str, ...]) -> None:
    """A namespace written to: its labels joined by "." (as stored) fit the index."""
    size = sum(len(label) if label.isascii() else len(label.encode()) for label in namespace)
    size += len(namespace) - 1
    if size > MAX_NAMESPACE_BYTES:
        raise InvalidNamespace(
            f"namespace {shown(namespace)} is {size} bytes in UTF-8 (its labels joined by "
            f"'.'); a namespace is at most {MAX_NAMESPACE_BYTES} bytes (PostgreSQL indexes "
            "it): use fewer or shorter labels",
            namespace=shown(namespace),
        )


def as_text(value: Any) -> Any:
    """An id given as an int or a UUID, as its text (LangGraph takes a thread id so); anything
    else as it is, for ``check_id`` to refuse by type."""
    if isinstance(value, (int, uuid.UUID)) and not isinstance(value, bool):
        return str(value)
    return value


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, with the full length: an error about
    a 10 KB id must not be 10 KB long."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f", {len(value)} characters" if isinstance(value, (str, tuple)) else ""
    return f"{text[:limit]}...{size}"
