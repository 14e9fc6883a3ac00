"""The wrapper claims exactly the capabilities of the saver it wraps.

LangGraph's conformance kit, and any code that probes a saver the same way, decides whether a
saver supports, say, ``prune`` by whether its class overrides ``aprune``. A wrapper that defines
every method would claim everything and then fail where the wrapped saver raises
``NotImplementedError``. So ``RecallCheckpointer(inner)`` is an instance of a subclass made
once per wrapped class, in which each capability the wrapped saver implements neither sync nor
async stays the base class's ``NotImplementedError``.
"""

from __future__ import annotations

import threading

from langgraph.checkpoint.base import BaseCheckpointSaver

# (sync, async) method pairs the conformance kit treats as capabilities.
CAPABILITIES = (
    ("get_tuple", "aget_tuple"),
    ("list", "alist"),
    ("put", "aput"),
    ("put_writes", "aput_writes"),
    ("delete_thread", "adelete_thread"),
    ("delete_for_runs", "adelete_for_runs"),
    ("copy_thread", "acopy_thread"),
    ("prune", "aprune"),
)
_VARIANTS: dict[tuple[type, type], type] = {}
_LOCK = threading.Lock()


def implements(saver_type: type, sync: str, async_: str) -> bool:
    """Whether ``saver_type`` overrides either method of a capability pair."""
    return any(
        getattr(saver_type, name, None) is not getattr(BaseCheckpointSaver, name)
        for name in (sync, async_)
    )


def variant(cls: type, inner_type: type) -> type:
    """``cls`` with the capabilities ``inner_type`` lacks left as the base class's."""
    key = (cls, inner_type)
    with _LOCK:
        found = _VARIANTS.get(key)
        if found is None:
            attrs: dict[str, object] = {"__module__": cls.__module__, "__doc__": cls.__doc__}
            for sync, async_ in CAPABILITIES:
                if not implements(inner_type, sync, async_):
                    attrs[sync] = getattr(BaseCheckpointSaver, sync)
                    attrs[async_] = getattr(BaseCheckpointSaver, async_)
            found = type(f"{cls.__name__}[{inner_type.__name__}]", (cls,), attrs)
            found.__qualname__ = cls.__qualname__
            _VARIANTS[key] = found
    return found
