"""The durability barrier: a side effect waits until the AI message that asked for it is saved.

Under LangGraph's default ``durability="async"`` the checkpoint holding the AI message is
written in the background while the next step (this tool call) already runs. If the process
died after the side effect but before that checkpoint landed, the resume would run the model
again, which asks again under new message and call ids: a new action, so the effect would
repeat. Waiting for the checkpoint first closes that window. Under ``"sync"`` LangGraph saved
it before this step started; under ``"exit"`` it is saved only when the run ends, so a durable
call refuses to run at all.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from .._context import CONFIG_KEY_DURABILITY, checkpointer_of, configurable
from .._errors import RecallError

_FIRST_POLL = 0.0005
_MAX_POLL = 0.05


@dataclass(frozen=True)
class Target:
    """The checkpoint to wait for, and the saver that writes it."""

    checkpointer: Any
    run_config: Any  # the running node's config (what RecallCheckpointer.wait_durable takes)
    lookup: dict[str, Any]  # a get_tuple config naming exactly that checkpoint
    checkpoint_id: str


def target_of(config: Any, runtime: Any, tool: str) -> Target | None:
    """What to wait for before ``tool`` runs; None when there is nothing to wait for.

    Raises:
        RecallError: ``durability`` when the run uses ``durability="exit"``.
    """
    conf = configurable(config)
    saver = checkpointer_of(config)
    if saver is None:  # no checkpointer: nothing is ever resumed, nothing to wait for
        return None
    mode = conf.get(CONFIG_KEY_DURABILITY)
    if mode == "exit":
        raise RecallError(
            f"{tool} has side effects and this run uses durability='exit', which saves nothing "
            "until the run ends: after a crash the model would ask again under new ids and the "
            "effect could repeat. Run with durability='async' (the default) or 'sync'. Nothing ran.",
            code="durability",
        )
    if mode == "sync":  # LangGraph saved this step's checkpoint before starting it
        return None
    info = getattr(runtime, "execution_info", None)
    checkpoint_id = getattr(info, "checkpoint_id", None) or conf.get("checkpoint_id")
    if not checkpoint_id:
        return None
    ns = _namespace_of(conf, checkpoint_id, getattr(info, "checkpoint_ns", None))
    lookup = {
        "configurable": {
            "thread_id": conf.get("thread_id"),
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
    return Target(saver, config, lookup, checkpoint_id)


def _namespace_of(conf: dict[str, Any], checkpoint_id: str, task_ns: str | None) -> str:
    # checkpoint_map maps each enclosing graph's namespace to its current checkpoint.
    for ns, cid in (conf.get("checkpoint_map") or {}).items():
        if cid == checkpoint_id:
            return str(ns)
    if task_ns and "|" in task_ns:
        return task_ns.rsplit("|", 1)[0]
    return ""


def _root(target: Target) -> bool:
    # RecallCheckpointer.wait_durable knows root checkpoints; a subgraph's is polled for.
    return not target.lookup["configurable"]["checkpoint_ns"]


def wait_sync(target: Target, timeout: float) -> bool:
    saver = target.checkpointer
    if hasattr(saver, "wait_durable") and _root(target):
        return bool(saver.wait_durable(target.run_config, target.checkpoint_id, timeout))
    deadline = time.monotonic() + timeout
    delay = _FIRST_POLL
    while True:
        if saver.get_tuple(target.lookup) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, _MAX_POLL)


async def wait_async(target: Target, timeout: float) -> bool:
    saver = target.checkpointer
    if hasattr(saver, "await_durable") and _root(target):
        return bool(await saver.await_durable(target.run_config, target.checkpoint_id, timeout))
    if hasattr(saver, "wait_durable") and _root(target):
        return await asyncio.to_thread(wait_sync, target, timeout)
    deadline = time.monotonic() + timeout
    delay = _FIRST_POLL
    while True:
        try:
            found = await saver.aget_tuple(target.lookup)
        except NotImplementedError:  # a sync-only saver: poll it from a worker thread
            return await asyncio.to_thread(wait_sync, target, max(0.0, deadline - time.monotonic()))
        if found is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_POLL)
