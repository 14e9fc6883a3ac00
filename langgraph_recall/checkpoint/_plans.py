"""Intents written ahead: a durable call's intent commits with the AI message that asks for it.

With ``store.checkpointer()`` the checkpoints and the actions share one database, so the intent
of each side-effecting call in a new AI message can go into the transaction of the checkpoint
that holds that message, instead of a commit of its own between that checkpoint and the tool.
On PostgreSQL that commit was a round trip that waits for the disk on every durable call.

What a crash means is unchanged in kind: an intent is written before its tool runs, and a crash
after it leaves the call open (in doubt; re-run under its key if idempotent). It is earlier in
time: a crash between that checkpoint and the tool's start now also leaves the call open. The
calls planned here are only those the next step will run: the checkpoint triggers a node
(``branch:to:<node>``) whose ``DurableToolNode`` this checkpointer knows (found in the run's
graph when the run started, ``Plans.of_graph``, or registered by the node itself), and
the tool is ``external`` or ``idempotent`` with no approval to ask for (an approval's spend
must commit with its intent, in the tool node).

A node started by ``Send`` instead (``create_agent`` sends each tool call to its tool node
this way, so ``RecallMiddleware`` plans too) is triggered by the checkpoint whose pending sends
(``__pregel_tasks``) name it; then only the calls those sends carry are planned.

The tool node takes its planned claim from the run (``take``) instead of claiming. A planned
call the run never started (the run paused before the tool node, or routed elsewhere, or the
node's own arguments turned out different) is closed when the run ends, before the lease goes,
as ``not_done`` by ``NOT_STARTED``: never in doubt, and its key, never used, may serve other
arguments (``settled_claim``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.messages import AIMessage

from .._recent import Recent
from ..store._actions import NOT_STARTED, Intent, Planned, end, planned_insert
from ..store._models import Claim

if TYPE_CHECKING:
    from ..store import RecallStore
    from ._runs import Run

log = logging.getLogger("langgraph_recall")

_TRIGGER = "branch:to:"
try:  # pragma: no cover - location differs across langgraph versions
    from langgraph._internal._constants import TASKS as _SENDS
except ImportError:  # pragma: no cover
    _SENDS = "__pregel_tasks"
# Compiled graphs a checkpointer keeps the planners of. A process usually compiles its graphs
# once; one that compiles a graph per request forgets the oldest, whose next run finds its
# nodes again (a loop over them, no I/O).
RECENT_GRAPHS = 64
NOT_STARTED_NOTE = (
    "planned with the checkpoint of the AI message that asked for it; the run ended before "
    "the tool started, so it never ran"
)


Pending = list[tuple[AIMessage, "Collection[str] | None"]]


class Planner(Protocol):
    """A tool node that can name the intents of an AI message's calls, and settle the agent's
    open calls of its tools at a run's start (``DurableTools``)."""

    def plan(
        self,
        message: AIMessage,
        agent_id: str,
        thread_id: str,
        epoch: int | None,
        only: Collection[str] | None = None,
    ) -> list[Intent]: ...

    def expect(self, tools: Mapping[str, Any]) -> None: ...

    def settle_run(self, store: RecallStore, agent_id: str, pending: Pending = ...) -> Any: ...

    async def asettle_run(
        self, store: RecallStore, agent_id: str, pending: Pending = ...
    ) -> Any: ...


class PlanRider:
    """The planned inserts, sent in a checkpoint's transaction (``_same_db.put_with``)."""

    __slots__ = ("planned", "_dialect", "_rows", "_cursors")

    def __init__(self, planned: list[Planned], dialect: str) -> None:
        self.planned = planned
        self._dialect = dialect
        self._rows: list[Any] = []
        self._cursors: list[Any] = []

    def send(self, cur: Any) -> None:
        if self._dialect == "sqlite":
            # Inside the transaction: a RETURNING row is read before the COMMIT.
            self._rows = [cur.execute(p.sql, p.params).fetchone() for p in self.planned]
            return
        from psycopg.rows import tuple_row

        # Pipelined: each answer is read after the Sync (``claims``), one cursor each.
        for p in self.planned:
            own = cur.connection.cursor(row_factory=tuple_row)
            own.execute(p.sql, p.params)
            self._cursors.append(own)

    def claims(self) -> list[Claim]:
        """After the commit: the attempts this checkpoint inserted (a conflict gave no row)."""
        rows = self._rows if self._dialect == "sqlite" else [c.fetchone() for c in self._cursors]
        return [
            p.claimed(row[0]) for p, row in zip(self.planned, rows, strict=True) if row is not None
        ]


class Plans:
    """One RecallCheckpointer's planners: per compiled graph, by the node name whose trigger
    they answer.

    Per graph, because a checkpointer may serve several graphs, and two of them may both name
    their tool node "tools": a run plans only with its own graph's nodes, even while a run of
    the other graph is going on another thread.
    """

    def __init__(self, store: RecallStore, messages_key: str) -> None:
        self.store = store
        self.messages_key = messages_key
        # Each compiled graph's planners, under the id of its nodes mapping, which is kept
        # alive beside them (so the id is not reused while kept). A handful per process.
        self._graphs: Recent[int, tuple[Any, dict[str, Planner]]] = Recent(RECENT_GRAPHS)
        # The planners of runs whose graph could not be found (LangGraph's internals moved):
        # nodes register here at their first call, as they did before graphs were told apart.
        self._unknown: dict[str, Planner] = {}

    def of_graph(self, nodes: Mapping[str, Any] | None) -> dict[str, Planner]:
        """The planners of the graph whose run loop has ``nodes``: its durable tool nodes,
        found at its first run's start, so even a process's first durable call is planned.
        A node also registers itself on its first call (``register``): what
        ``RecallMiddleware`` relies on, whose tool node is LangGraph's own and is not found
        here. The same dict for every run of one compiled graph."""
        if nodes is None:
            return self._unknown
        kept = self._graphs.get(id(nodes))
        if kept is not None and kept[0] is nodes:
            return kept[1]
        planners: dict[str, Planner] = {}
        hooked: list[Planner] = []  # the planners of middleware (``RecallMiddleware``)
        tool_nodes: dict[str, Mapping[str, Any]] = {}
        for name, node in list(nodes.items()):
            bound = getattr(node, "bound", None)
            planner = getattr(bound, "recall_planner", None)
            if planner is not None:
                planners[name] = planner
                continue
            # A middleware's hook node (``create_agent``): its function is the middleware's
            # bound method, and the middleware carries its planner.
            owner = getattr(getattr(bound, "func", None), "__self__", None)
            planner = getattr(owner, "recall_planner", None)
            if planner is not None and planner not in hooked:
                hooked.append(planner)
            tools = getattr(bound, "tools_by_name", None)
            if isinstance(tools, Mapping):
                tool_nodes[name] = tools
        if len(hooked) == 1 and len(tool_nodes) == 1:
            # ``create_agent``'s one tool node runs the middleware's calls: the middleware
            # plans for it, with the tool objects that node hands each call.
            ((name, tools),) = tool_nodes.items()
            hooked[0].expect(tools)
            planners[name] = hooked[0]
        self._graphs[id(nodes)] = (nodes, planners)
        return planners

    @staticmethod
    def register(planners: dict[str, Planner], node: str, planner: Planner) -> None:
        """``planner`` answers ``node``'s trigger in the graph whose planners these are."""
        if planners.get(node) is not planner:
            planners[node] = planner

    def rider(
        self,
        planners: dict[str, Planner],
        checkpoint: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        agent_id: str,
        thread_id: str,
        epoch: int | None,
    ) -> PlanRider | None:
        """The inserts to send with this checkpoint of a run of the graph whose ``planners``
        these are, or None (the usual case: no I/O)."""
        if not planners or self.messages_key not in new_versions:
            return None
        intents: list[Intent] = []
        for planner, last, only in self.pending(planners, checkpoint["channel_values"]):
            intents += planner.plan(last, agent_id, thread_id, epoch, only)
        if not intents:
            return None
        db: Any = self.store._db
        return PlanRider([planned_insert(db.sql, db.dialect, i) for i in intents], db.dialect)

    def pending(
        self, planners: Mapping[str, Planner], values: Mapping[str, Any]
    ) -> list[tuple[Planner, AIMessage, Collection[str] | None]]:
        """The calls a checkpoint's next step runs in the durable tool nodes: per node the
        checkpoint triggers, its planner, the AI message (the last one) and the ids of the
        calls sent to it (None: all of its calls)."""
        found: list[tuple[Planner, AIMessage, Collection[str] | None]] = []
        # A copy: a node may register from a tool's thread while a put plans on another.
        for node, planner in list(planners.items()):
            only: Collection[str] | None = None
            if _TRIGGER + node not in values:
                only = sent_calls(values.get(_SENDS), node)
                if not only:
                    continue
            messages = values.get(self.messages_key)
            last = messages[-1] if isinstance(messages, list) and messages else None
            if not isinstance(last, AIMessage) or not last.tool_calls or not last.id:
                return []
            found.append((planner, last, only))
        return found

    def settlers(
        self, planners: Mapping[str, Planner], saved: Mapping[str, Any] | None
    ) -> list[tuple[Planner, Pending]]:
        """Who settles the agent's open calls at a run's start: each durable tool node of the
        run's graph once, with the calls it must leave alone, those the run's pending tool task
        (of ``saved``, the checkpoint a resume continues from; None for a new input, whose
        run drops that task) runs itself."""
        values = saved["channel_values"] if saved is not None else {}
        pending = self.pending(planners, values) if values else []
        out: list[tuple[Planner, Pending]] = []
        for planner in planners.values():
            if all(p is not planner for p, _ in out):
                out.append((planner, [(m, only) for p, m, only in pending if p is planner]))
        return out


def sent_calls(sends: Any, node: str) -> set[str]:
    """Ids of the tool calls that pending sends carry to ``node``: a ToolNode's inputs, a list
    of tool calls (what ``create_agent`` sends) or one call with its context. A send carrying
    anything else plans nothing (what it would run is not known here)."""
    ids: set[str] = set()
    for send in sends if isinstance(sends, list) else ():
        if getattr(send, "node", None) != node:
            continue
        arg = getattr(send, "arg", None)
        if isinstance(arg, dict) and isinstance(arg.get("tool_call"), dict):
            arg = [arg["tool_call"]]
        for call in arg if isinstance(arg, list) else ():
            if isinstance(call, dict) and isinstance(call.get("id"), str) and "name" in call:
                ids.add(call["id"])
    return ids


def take(run: Run | None, action_id: str) -> Claim | None:
    """The run's planned claim of ``action_id``, handed over once."""
    if run is None or not run.planned:
        return None
    return run.planned.pop(action_id, None)


def close_not_started(store: RecallStore, attempts: list[tuple[str, int]]) -> None:
    """End planned attempts (action id, attempt) that never started: ``not_done`` by
    ``NOT_STARTED``, in one transaction. An attempt that has an end already keeps it."""
    if not attempts:
        return
    try:
        with store._db.tx(write=True) as tx:
            for action_id, attempt in attempts:
                end(
                    tx,
                    action_id,
                    attempt,
                    "not_done",
                    note=NOT_STARTED_NOTE,
                    resolved_by=NOT_STARTED,
                )
    except Exception as exc:  # they stay open: in doubt, the safe side
        log.warning("could not close %d planned call(s) that never started: %s", len(attempts), exc)


def attempts_of(claims: list[Claim]) -> list[tuple[str, int]]:
    return [(c.action.action_id, c.action.attempt) for c in claims]
