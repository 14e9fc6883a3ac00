"""Knowing when a run starts and ends, from inside a checkpointer.

LangGraph tells a saver nothing about runs. It does call ``get_tuple`` exactly once at the start
of every root run, on the caller's thread, from ``PregelLoop.__enter__``/``__aenter__``, with
the run's ``Runtime`` in ``configurable["__pregel_runtime"]`` and ``checkpoint_ns == ""``;
``get_state`` and ``update_state`` call it without the runtime, subgraphs with a namespace.

The end is found through that same call: the loop passes its own ``checkpoint_config`` object,
so the calling frame's ``self`` is identified by identity, and a callback pushed on its (still
empty) exit stack runs when the loop exits, *after* the loop's background executor has finished
every pending write, whether the run finished, raised, was interrupted or was closed early.
If a LangGraph version ever calls from elsewhere, ``find_loop`` returns None: the run then ends
by ``RecallCheckpointer.invoke``'s ``finally``, or its lease expires (a warning says so).
If the loop's ``__enter__`` fails after our ``get_tuple`` returned (bad input, say), the stack
never unwinds; a ``weakref.finalize`` on the loop ends the run when the loop is collected.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from langchain_core.messages import BaseMessage

from .._context import CONFIG_KEY_RUNTIME, configurable
from ._lease import HeldLease
from ._recording import MessageCursor

try:  # pragma: no cover - private module; its location differs across langgraph versions
    from langgraph.pregel._loop import PregelLoop as _PregelLoop
except ImportError:  # pragma: no cover
    _PregelLoop = None  # type: ignore[assignment,misc]


def run_key(config: Any) -> int | None:
    """An id for the run a root ``get_tuple`` belongs to (its Runtime), else None."""
    conf = configurable(config)
    if conf.get("checkpoint_ns"):
        return None
    runtime = conf.get(CONFIG_KEY_RUNTIME)
    return None if runtime is None else id(runtime)


def find_loop(config: Any, depth: int = 2, max_frames: int = 8) -> Any:
    """The PregelLoop whose ``__enter__``/``__aenter__`` is calling us with ``config``."""
    if _PregelLoop is None:
        return None
    frame: FrameType | None = sys._getframe(depth)
    for _ in range(max_frames):
        if frame is None:
            return None
        if frame.f_code.co_name in ("__enter__", "__aenter__"):
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, _PregelLoop) and candidate.checkpoint_config is config:
                return candidate
        frame = frame.f_back
    return None


@dataclass(eq=False)
class Run:
    """One root run that holds its agent's lease in this process."""

    key: int
    agent_id: str
    thread_id: str
    lease: HeldLease
    runtime: Any  # kept alive (and so its id unique) for as long as the run is registered
    cursor: MessageCursor = field(default_factory=lambda: MessageCursor(()))
    finalizer: Any = None
    ended: bool = False
    # Started from an explicit checkpoint_id (time travel): its first checkpoint is a
    # deliberate second child of an old one, which ``inspect_thread`` must not call a fork.
    branched: bool = False

    def restored(self, messages: list[BaseMessage] | None) -> None:
        self.cursor = MessageCursor(messages or ())
