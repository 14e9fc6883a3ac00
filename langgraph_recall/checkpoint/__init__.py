"""The checkpointer: one process per agent, exact fencing, each message recorded once.

``RecallCheckpointer`` wraps any LangGraph saver; ``store.checkpointer()`` builds one over
LangGraph's own SqliteSaver/PostgresSaver on the store's database, where a stale writer's
checkpoint is refused by the database itself. ``inspect_thread`` / ``inspect_threads`` /
``find_forks`` / ``unfinished_runs`` read a thread's history for forks and runs that died;
``unrecorded_turns`` finds agents whose checkpoints hold messages their turns lack.
"""

from ._forks import ThreadReport, find_forks, inspect_thread, inspect_threads, unfinished_runs
from ._recording import unrecorded_turns
from ._saver import RecallCheckpointer

__all__ = [
    "RecallCheckpointer",
    "ThreadReport",
    "find_forks",
    "inspect_thread",
    "inspect_threads",
    "unfinished_runs",
    "unrecorded_turns",
]
