"""Every error langgraph-recall raises, in one place.

    RecallError(Exception)             .code is stable; the message says what to do next
     +-- LeaseHeld                     code "lease_held": another process acts for this agent
     +-- LeaseLost                     code "lease_lost": this process was fenced out mid-run
     +-- InDoubt                       code "in_doubt": a side effect may or may not have happened
     +-- ApprovalRequired              code "approval_required"
     +-- ApprovalMismatch              code "approval_mismatch": a decision for other arguments
     +-- ApprovalDenied                code "approval_denied": a person said no
     +-- UnclassifiedTool              code "unclassified_tool": a tool has no pure/idempotent/external class
     +-- RecordsMissing                code "records_missing": the database was deleted or swapped
     +-- InvalidNamespace              code "invalid_namespace": a store namespace that cannot be
                                       used (also LangGraph's InvalidNamespaceError)
     +-- InvalidValue                  code "invalid_value": an argument refused before anything
                                       ran or was written (also a ValueError)
     +-- (plain RecallError)           codes "schema_too_new",
                                       "secret_missing", "unknown_action", "unknown_agent",
                                       "not_open", "durability", "database", "replay_mismatch",
                                       "duplicate_turn", "unknown_output", "closed",
                                       "forked" (a store or checkpointer used in a
                                       process forked after it was opened),
                                       "args_changed" (a wrapper inside the durable one
                                       changed a recorded call's arguments; nothing ran)

Catch ``RecallError`` and switch on ``.code``: the codes are the contract, the classes are a
convenience. ``RecallError.for_code(code)`` returns the class used for a code, and
``RecallError(message, code=code)`` is an instance of that class (as ``OSError(errno.ENOENT,
...)`` is a ``FileNotFoundError``): every ``invalid_value`` is an ``InvalidValue``, so also a
``ValueError``, wherever it was raised.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from langgraph.store.base import InvalidNamespaceError

__all__ = [
    "ApprovalDenied",
    "ApprovalMismatch",
    "ApprovalRequired",
    "InDoubt",
    "InvalidNamespace",
    "InvalidValue",
    "LeaseHeld",
    "LeaseLost",
    "RecallError",
    "RecordsMissing",
    "UnclassifiedTool",
]


class RecallError(Exception):
    """Base of every langgraph-recall error. ``.code`` is a stable string; ``.details`` a dict."""

    default_code: ClassVar[str] = "error"
    _by_code: ClassVar[dict[str, type[RecallError]]] = {}

    def __new__(cls, *args: Any, code: str | None = None, **details: Any) -> RecallError:
        # The class follows the code, whichever way the error was raised: a caller catching
        # ``InvalidValue`` (or ``ValueError``) must not miss a ``RecallError(code=
        # "invalid_value")``. No side effect here: ``__init__`` does the rest.
        if cls is RecallError and code is not None:
            cls = RecallError._by_code.get(code, RecallError)
        return super().__new__(cls, *args)

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.code: str = code or self.default_code
        self.details: dict[str, Any] = details

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        RecallError._by_code[cls.default_code] = cls

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process and thread-pool boundaries (the CLI, executors): keep code and details.
        return (_rebuild, (type(self), str(self), self.code, self.details))

    @classmethod
    def for_code(cls, code: str) -> type[RecallError]:
        """The class raised for ``code`` (``RecallError`` itself for codes without a subclass)."""
        return cls._by_code.get(code, RecallError)


def _rebuild(
    cls: type[RecallError], message: str, code: str, details: dict[str, Any]
) -> RecallError:
    err = cls.__new__(cls)
    RecallError.__init__(err, message, code=code, **details)
    return err


class LeaseHeld(RecallError):
    """Another process holds the lease for this agent; nothing ran."""

    default_code = "lease_held"


class LeaseLost(RecallError):
    """This process lost its lease (it expired and another took over); it wrote nothing more."""

    default_code = "lease_lost"


class InDoubt(RecallError):
    """A side-effecting call started and never reported back: it may or may not have happened."""

    default_code = "in_doubt"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message, code=code, **details)
        # Raised by the tool of a durable call, it must reach the durable wrapper whatever the
        # tool node's handle_tool_errors says (``tools._bound.pass_through``). Not imported:
        # without that module loaded no durable call can be running.
        bound = sys.modules.get("langgraph_recall.tools._bound")
        if bound is not None:
            bound.pass_through(self)


class ApprovalRequired(RecallError):
    """The call needs a person's decision before it can run."""

    default_code = "approval_required"


class ApprovalMismatch(RecallError):
    """The decision on record was made for other arguments than the ones about to run."""

    default_code = "approval_mismatch"


class ApprovalDenied(RecallError):
    """A person rejected this call."""

    default_code = "approval_denied"


class UnclassifiedTool(RecallError):
    """A tool was given to a durable node without a class (pure, idempotent or external)."""

    default_code = "unclassified_tool"


class RecordsMissing(RecallError):
    """The records this store had are gone (database deleted, emptied or swapped)."""

    default_code = "records_missing"


class InvalidNamespace(RecallError, InvalidNamespaceError):
    """A namespace the store cannot use (empty, a label with "." or NUL, the "langgraph" root,
    a string instead of a tuple) or the records' own, which plain writes may not change. Also
    LangGraph's ``InvalidNamespaceError``, so code written for its stores catches it as before."""

    default_code = "invalid_namespace"


class InvalidValue(RecallError, ValueError):
    """An argument the package cannot take (an identifier, a value that cannot be stored, an
    option out of range), refused before anything ran or was written; the message names the
    argument and says what to pass instead. Also a ``ValueError``."""

    default_code = "invalid_value"
