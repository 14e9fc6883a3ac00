"""The ``langgraph-recall`` command: look at, settle and check an agent's records.

Every command takes ``--db PATH_OR_DSN`` (default ``./recall.db`` or ``$LANGGRAPH_RECALL_DB``)
and ``--json``. Errors print one line and exit non-zero; never a traceback.
"""

from ._commands import cli, main

__all__ = ["cli", "main"]
