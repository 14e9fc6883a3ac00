"""Named fault points, so crash tests can stop or kill a real process at an exact line.

Production code calls ``fault_point("before_put")`` at the places where a crash or a freeze is
most dangerous. Nothing happens unless ``LANGGRAPH_RECALL_FAULTS`` is set when this module is
imported, e.g. ``LANGGRAPH_RECALL_FAULTS="before_put=3:stop,after_put=5:exit"``: on the third
``before_put`` the process sends itself SIGSTOP (frozen, as under a long GC pause or a paused
VM); on the fifth ``after_put`` it leaves with ``os._exit(99)`` (no cleanup, like a crash).
Actions: ``stop`` (SIGSTOP), ``kill`` (SIGKILL), ``exit`` (``os._exit(99)``).

Points: ``before_put`` (lease checked, the checkpoint not yet written), ``after_put`` (the
checkpoint written, its messages not yet recorded), ``after_writes`` (a task's writes saved,
with the ends of the calls it finished), ``before_release`` (run finished, lease still held).
Durable tool calls: ``before_start`` and ``after_start`` (a call written ahead with its AI
message's checkpoint, right before and right after the start mark commits), ``tool_claimed``
(its intent recorded and started, the tool not yet invoked), ``tool_ran`` (the tool answered,
its end not recorded).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any

ENV = "LANGGRAPH_RECALL_FAULTS"


def _parse(spec: str) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, rest = part.partition("=")
        count, _, action = rest.partition(":")
        out[name] = (int(count or 1), action or "exit")
    return out


_FAULTS = _parse(os.environ.get(ENV, ""))
_hits: dict[str, int] = {}
_lock = threading.Lock()


def arm(spec: str) -> None:
    """Replace the armed faults (same syntax as the variable; "" disarms) and reset counts.

    For test harnesses that keep one process across scenarios.
    """
    global _FAULTS
    with _lock:
        _FAULTS = _parse(spec)
        _hits.clear()


def fault_point(name: str, hold: Any = None) -> None:
    """Stop, kill or end this process here if the environment asked for it (else nothing).

    ``hold``: a lock to take before stopping (and release after), e.g. the saver's own, so the
    process freezes with that saver idle rather than halfway through another thread's write
    (a frozen SQLite writer would block every other process, a different failure).
    """
    if not _FAULTS or name not in _FAULTS:
        return
    count, action = _FAULTS[name]
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] != count:
            return
    # Thread-directed: kill(getpid()) would wake the main thread to start the stop while this
    # thread ran on for a few milliseconds, past the very line the fault is meant to freeze.
    if action == "stop":
        usable = hold is not None and hasattr(hold, "__enter__")  # not an asyncio.Lock
        with hold if usable else contextlib.nullcontext():
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    elif action == "kill":
        signal.pthread_kill(threading.get_ident(), signal.SIGKILL)
    else:
        os._exit(99)
