"""A run's new input messages, recorded when the run starts, before its first node.

LangGraph 1.2 writes a run's input checkpoint on a background thread: ``PregelLoop.__enter__``
submits its put (``_first`` -> ``_put_checkpoint({"source": "input"})``) and the first step's
nodes start without waiting for it. Under ``durability="sync"`` the loop waits for that put
only after the first step, together with the step's own checkpoint; under ``"exit"`` nothing is
written before the run ends. The "checkpoints" stream event reports the input checkpoint when
the first step's tasks are prepared, whether or not its put has landed. A process killed in
that window left the request in no checkpoint, so no turn could be recorded from one, and the
next input sent on the thread took its place.

So a root run's start records its input's messages itself, whatever the durability mode:
``input_messages`` takes them from the loop's input when the run begins (lease held, turn
checked), and ``RunLifecycle.settle`` records them after the catch-up of a crashed
predecessor's turns (so they come after those) and before ``get_tuple`` returns to the loop,
whose first node therefore runs with the request recorded. One write per run with new input;
none per step.

The ids recorded must be those the checkpoints will hold, or one message becomes two turns. A
channel reduced by ``add_messages`` gives an id-less message a random id when the first step
applies the input, and turns a message-like (a string, a ``(role, text)`` pair, a dict) into a
new message object. For such a channel the run's start does it first: an id-less message object
gets its id in place (``add_messages`` keeps an id it finds, and stamps the same object
otherwise), and message-likes are converted, each with an id, in a copy of the input dict that
the loop reads instead (the caller's dict is left as it was). For any other channel, and for an
input that is not a dict, only message objects that already carry an id are recorded at the
start; the rest are recorded from the checkpoints, as every later message is. A graph with no
such channel (a functional ``entrypoint``) records no turns, its input included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from langchain_core.messages import BaseMessage, RemoveMessage, convert_to_messages
from langgraph.graph.message import add_messages

from ._turns import is_new_input


def input_messages(loop: Any, messages_key: str) -> list[BaseMessage]:
    """The messages the run's new input adds to ``messages_key``, with the ids the checkpoints
    will hold (see the module docstring); [] for a resume (``None``, a ``Command``).

    May replace ``loop.input`` (the ``PregelLoop``'s, read by its ``__enter__`` after the root
    ``get_tuple``) by a copy whose message-likes are converted to messages with ids.
    """
    given = getattr(loop, "input", None)
    if not is_new_input(given):
        return []
    value = given.get(messages_key) if isinstance(given, Mapping) else None
    if value is None and not isinstance(given, Mapping):
        value = getattr(given, messages_key, None)  # a dataclass or pydantic state
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]  # add_messages takes one alone
    spec = (getattr(loop, "specs", None) or {}).get(messages_key)
    if spec is None:
        return []  # no such channel (a functional entrypoint): no turns are recorded from it
    if getattr(spec, "operator", None) is not add_messages:
        return [m for m in items if _recordable(m) and m.id]
    messages: list[BaseMessage] = []
    converted = False
    for item in items:
        if isinstance(item, BaseMessage):
            if not item.id:
                item.id = str(uuid4())
            messages.append(item)
            continue
        if not isinstance(given, Mapping):
            continue  # no copy of this input to put a converted message in: left as given
        try:
            (message,) = convert_to_messages([item])
        except Exception:
            # Not a message add_messages could take either: the run fails on it as it would
            # have. Nothing of this input is recorded or changed.
            return []
        if not message.id:
            message.id = str(uuid4())
        messages.append(message)
        converted = True
    if converted and isinstance(given, Mapping):
        loop.input = {**given, messages_key: messages}
    return [m for m in messages if _recordable(m)]


def _recordable(item: Any) -> bool:
    # A RemoveMessage in the input deletes from the channel; it is no turn.
    return isinstance(item, BaseMessage) and not isinstance(item, RemoveMessage)
