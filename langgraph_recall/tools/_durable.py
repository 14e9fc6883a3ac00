"""The one implementation of a durable tool call, used by ``DurableToolNode`` and by
``RecallMiddleware`` (``wrap_tool_call``/``awrap_tool_call``).

What happens to a call (DESIGN.md, "Behaviour on a tool call"):

1. Its action key is derived from the agent, the AI message and the tool call; its canonical
   arguments and their digest are computed.
2. ``pure`` tools without approval just run (with the key available).
3. The AI message that asked for the call must be saved first (``_barrier``).
4. Gated tools get a person's decision (``_approval``).
5. The intent is claimed (and the approval spent) in one transaction. A call that already
   finished returns its recorded answer; a failed one its recorded error; one left open by a
   crash is settled by the resolver, re-run with the same key when it is safe to repeat, or
   reported to the model as unknown and left open for a person.
6. The tool runs with the idempotency key; its end is recorded: done (with the answer),
   failed (it raised or answered with an error), or abandoned (an ``interrupt()`` inside it
   paused the run; the resume runs it again as a new attempt under the same key). A kill or a
   cancellation leaves the intent open: in doubt, never silently repeated.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp

from .._checks import check_timeout
from .._compat import failed_after_tool_returned
from .._context import agent_id_of, checkpointer_of, store_of, thread_id_of
from .._errors import ApprovalDenied, ApprovalMismatch, InDoubt, InvalidValue, RecallError
from ..checkpoint._faults import fault_point
from ..checkpoint._plans import attempts_of, close_not_started
from ..store import Action, Claim, RecallStore
from ..store._actions import Intent
from ..store._codec import MAX_DEPTH, unstorable
from . import _barrier, _steps
from ._approval import Verdict, approval_step
from ._bound import BoundCall
from ._canonical import (
    action_key,
    args_digest,
    asking_id,
    asking_message,
    canonical_args,
    given_text,
)
from ._drive import Execute, Io, Logic, Resolve, WaitDurable, adrive, drive
from ._keys import CONFIG_ACTION, CONFIG_KEY, KeyedTool, key_parameters
from ._order import asking_of
from ._outcome import (
    ActionEnd,
    Output,
    SettleReport,
    failed_message,
    from_record,
    in_doubt_message,
    is_error,
    needs_output,
    refused_message,
    rejected_message,
    stand_in,
    with_asked,
    with_edit_notice,
    with_stable_id,
)
from ._toolset import ToolSet, check_resolver
from ._undo import UNDO_PREFIX

log = logging.getLogger("langgraph_recall")

Resolver = Callable[[Action], "ActionEnd | None"]
DEFAULT_DURABLE_TIMEOUT = 30.0
# Canonical forms kept from ``plan`` for the call that follows; more are dropped oldest first
# (a plan whose call never comes: the run paused or went elsewhere).
_CANON_KEPT = 256
# What ``_run`` returns when a resolver found that the call its tool could not tell about
# did not happen: closed as not done, to be claimed again.
_NOT_DONE: Any = object()


@dataclasses.dataclass(frozen=True, slots=True)
class _Canon:
    """A call's canonical arguments and digest as ``plan`` computed them, and what from."""

    tool: Any  # the tool object whose schema made them canonical
    given: Any  # the model's arguments object
    text: str  # ``given_text(given)`` then
    args: dict[str, Any]
    digest: str


class DurableTools(ToolSet):
    """Durable execution for a set of tools: the logic behind ``DurableToolNode`` and the
    tool hooks of ``RecallMiddleware``.

    Args:
        tools: the tools (BaseTool or functions). Every one needs a class.
        classes: ``{"tool name": "pure" | "idempotent" | "external"}``; a tool may instead
            carry its class (``recall_class``).
        approve: names of tools that need a person's approval before each call.
        resolver: ``resolver(action) -> ActionEnd | None`` settles external calls left in doubt
            (sync or async).
        undo: ``{"tool name": fn}``; ``store.undo(agent_id)`` calls ``fn(**original_args)``.
        messages_key: where the state keeps its messages.
        durable_timeout: seconds to wait for the AI message's checkpoint before refusing.
        fill_key_params: give tools their ``IdempotencyKey`` parameters by wrapping the tool
            handed to ToolNode (for ``create_agent``); ``DurableToolNode`` fills them itself.

    Raises:
        UnclassifiedTool: naming every tool without a class.
        RecallError: ``invalid_value`` for an unknown class or a name that is not a tool.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]] = (),
        *,
        classes: Mapping[str, str] | None = None,
        approve: Iterable[str] = (),
        resolver: Resolver | None = None,
        undo: Mapping[str, Callable[..., Any]] | None = None,
        messages_key: str = "messages",
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
        fill_key_params: bool = True,
    ) -> None:
        check_resolver(resolver)
        super().__init__(tools, classes=classes, approve=approve, undo=undo)
        self.fill_key_params = fill_key_params
        # The store to record in when the graph's is not one (``RecallMiddleware(store=...)``).
        self.store: RecallStore | None = None
        self.resolver = resolver
        self.messages_key = messages_key
        self.durable_timeout = check_timeout("durable_timeout", durable_timeout)
        # Per tool object (held, so an id is not reused while cached).
        self._schemas: dict[int, tuple[Any, Any, frozenset[str]]] = {}
        # The tool object each name was last called with, or will be (``expect``): what
        # ``plan`` digests against.
        self._called: dict[str, Any] = {}
        self._keyed_tools: dict[int, tuple[BaseTool, BaseTool]] = {}
        self._canon: OrderedDict[str, _Canon] = OrderedDict()  # by action id, see ``plan``

    # --- the wrapper interface (ToolNode's wrap_tool_call / AgentMiddleware's) ----------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Output:
        """Run one tool call durably (sync). ``handler(request)`` runs the tool."""
        return drive(self._call(request, handler))

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Output:
        """Run one tool call durably (async). ``await handler(request)`` runs the tool."""
        return await adrive(self._call(request, handler))

    def settle(self, store: RecallStore, agent_id: str) -> SettleReport:
        """Settle the agent's calls left open by a crash, before the model sees anything.

        ``store.checkpointer()`` does this at the start of every run of the agent, on any
        thread; call it yourself with another checkpointer. A call planned with its AI
        message whose tool never began is closed as not done (never started). Open external
        calls are offered to the resolver; what it confirms is closed (done or not done).
        An idempotent call in doubt is run again under its own key (when its tool needs
        nothing only its node gives: the graph's state or runtime) and its answer recorded.
        Returns what was closed and what is still open (for the briefing and a person); an
        undo left open (``store.undo``) stays open for a person.
        """
        return drive(self._settle(store, agent_id))

    async def asettle(self, store: RecallStore, agent_id: str) -> SettleReport:
        """Async twin of ``settle``."""
        return await adrive(self._settle(store, agent_id))

    def plan(
        self,
        message: AIMessage,
        agent_id: str,
        thread_id: str,
        epoch: int | None,
        only: Collection[str] | None = None,
    ) -> list[Intent]:
        """The intents of ``message``'s calls that this node would claim as they come, for
        the checkpointer to write ahead with that message's checkpoint (``checkpoint._plans``);
        with ``only``, of the calls with those ids (the ones sent to this node).

        Only calls of tools the node has run or was built with (``expect``), so their
        arguments are made canonical by the very tool object the node will run, that are
        durable and need no approval. Each intent is exactly what ``_call`` would claim: same key, same digest.
        """
        intents: list[Intent] = []
        for call in message.tool_calls:
            if only is not None and call.get("id") not in only:
                continue
            name = call["name"]
            tool = self._called.get(name)
            klass = self._classes.get(name)
            if tool is None or klass not in ("external", "idempotent") or name in self._gated:
                continue
            schema, injected = self._schema(tool)
            given = call.get("args")
            args = canonical_args(schema, given or {}, injected)
            digest = args_digest(name, args)
            text = given_text(given) if given else None
            if (text is None or not text.isascii()) and unstorable(args, exact_text=True):
                continue  # not to be recorded as it is: the node refuses it (``_canonical``)
            action_id = action_key(agent_id, str(message.id), str(call["id"]), name)
            intents.append(
                Intent(
                    agent_id=agent_id,
                    action_id=action_id,
                    tool=name,
                    klass=klass,
                    args=args,
                    args_digest=digest,
                    idempotency_key=action_id,
                    thread_id=thread_id,
                    epoch=epoch,
                )
            )
            if text is not None:
                self._keep_canon(action_id, _Canon(tool, given, text, args, digest))
        return intents

    def _keep_canon(self, action_id: str, canon: _Canon) -> None:
        # Called on the checkpoint's thread, read on the node's: single OrderedDict operations
        # (each atomic), and a race on the trimming only trims less.
        self._canon[action_id] = canon
        while len(self._canon) > _CANON_KEPT:
            try:
                self._canon.popitem(last=False)
            except KeyError:
                break

    def _canonical(
        self, action_id: str, name: str, tool: Any, given: Any
    ) -> tuple[dict[str, Any], str, str | None]:
        """The call's canonical arguments, their digest, and the given arguments' text.

        ``plan`` computed them moments ago for the same call, from the same message object
        (its checkpoint's), and they are reused when nothing could make them differ: the
        same tool object (so the same schema and defaults) and the very same arguments object,
        unchanged since (its text is the same). Anything else (the state edited while paused:
        a new object; a wrapper that changed the arguments) computes them again.
        """
        canon = self._canon.pop(action_id, None)
        text = given_text(given)
        if canon is not None and canon.tool is tool and canon.given is given and text == canon.text:
            return canon.args, canon.digest, text
        schema, injected = self._schema(tool)
        try:
            args = canonical_args(schema, given or {}, injected)
            digest = args_digest(name, args)
        except RecursionError:  # the digest's walk: nested far deeper than any store takes
            raise unstorable_args(name, given) from None
        # Text that is not ASCII (or arguments that are not JSON) may hide a lone surrogate,
        # which LangGraph's serializer saves as "?": the call would be recorded, and resumed,
        # with other arguments than it was asked with. The usual call pays one isascii().
        if text is None or not text.isascii():
            refused = unstorable_args(name, args, exact=True)
            if refused.details.get("found"):
                raise refused
        return args, digest, text

    def expect(self, tools: Mapping[str, Any]) -> None:
        """The tool objects a node will run, by name (``DurableToolNode`` knows them when
        built): once the node has told its checkpointer about itself, the calls of all of them
        are planned, not only of those it has run already."""
        for name, tool in tools.items():
            self._called.setdefault(name, tool)

    # --- the logic, written once ---------------------------------------------------------

    def _schema(self, tool: Any) -> tuple[Any, frozenset[str]]:
        """The tool's model-facing schema and its key parameters (cached per tool object)."""
        if tool is None:
            return None, frozenset()
        cached = self._schemas.get(id(tool))
        if cached is None or cached[0] is not tool:  # ids are reused once an object is gone
            try:
                schema = tool.tool_call_schema
            except Exception:  # pragma: no cover - a tool without a usable schema
                schema = None
            cached = (tool, schema, frozenset(key_parameters(tool)))
            self._schemas[id(tool)] = cached
        return cached[1], cached[2]

    def _keyed(self, request: Any, action_id: str, args: dict[str, Any] | None = None) -> Any:
        """The request with the key in its runtime config (and edited arguments, if any)."""
        request = _with_key(request, action_id, args)
        tool = request.tool
        if self.fill_key_params and isinstance(tool, BaseTool) and not isinstance(tool, KeyedTool):
            found = self._keyed_tools.get(id(tool))
            if found is None or found[0] is not tool:
                # Every tool, with key parameters or not: KeyedTool also checks that the call
                # runs as recorded, at the last point a middleware's change could reach it.
                _, params = self._schema(tool)
                found = (tool, KeyedTool.wrap(tool, tuple(sorted(params))))
                self._keyed_tools[id(tool)] = found
            keyed = found[1]
            if keyed is not tool:
                request = request.override(tool=keyed)
        return request

    def _call(self, request: Any, handler: Callable[[Any], Any]) -> Logic[Output]:
        call = request.tool_call
        name = call["name"]
        tool = request.tool
        if tool is None and name not in self._classes:
            # A tool the model made up: ToolNode answers "not a valid tool"; nothing runs.
            return (yield Execute(handler, request, None))
        klass = self._class_of(name, tool)
        gated = name in self._gated
        runtime = request.runtime
        config = getattr(runtime, "config", None) or {}
        agent_id = agent_id_of(config)
        asking = asking_message(request.state, call["id"], self.messages_key)
        action_id = action_key(agent_id, asking_id(asking), call["id"], name)
        if klass == "pure" and not gated:
            return (yield Execute(handler, self._keyed(request, action_id), action_id))

        store = store_of(config, runtime, self.store)
        self.register_undo(store)
        args, digest, given = self._canonical(action_id, name, tool, call.get("args"))

        target = _barrier.target_of(config, runtime, name)  # raises under durability="exit"
        if target is not None:
            saved = yield WaitDurable(target, self.durable_timeout)
            if not saved:
                return refused_message(
                    call,
                    action_id,
                    "durability",
                    f"the checkpoint holding the AI message that asked for it was not saved "
                    f"within {self.durable_timeout:.0f}s (is the checkpointer's database "
                    "reachable?). Nothing ran; try again.",
                )

        verdict: Verdict | None = None
        if gated:
            schema, injected = self._schema(tool)
            try:
                found = yield from approval_step(
                    store,
                    agent_id=agent_id,
                    action_id=action_id,
                    call=call,
                    config=config,
                    args=args,
                    digest=digest,
                    schema=schema,
                    injected=injected,
                )
            except ApprovalMismatch as untrusted:  # its recorded decisions do not verify
                return refused_message(call, action_id, untrusted.code, str(untrusted))
            if isinstance(found, ToolMessage):
                return found
            verdict = found
            args, digest = verdict.args, verdict.digest

        thread_id = thread_id_of(config)
        # A holder that lost its lease must not start a side effect (raises LeaseLost); the
        # epoch is kept with the intent so a person can tell which holder started it.
        saver = checkpointer_of(config)
        epoch = saver.current_epoch(agent_id) if hasattr(saver, "current_epoch") else None
        # The call's end may commit without waiting for the disk when the task's own write,
        # which follows it, goes to this store's database through the same-database saver: that
        # write's flush carries the end (a log is flushed in order). A power loss in between
        # loses both, and the call reads as in doubt, as after a crash during the tool. With
        # any other saver the task's write lands elsewhere, so the end keeps its own flush.
        flush_later = (
            getattr(saver, "fenced", False) is True and getattr(saver, "store", None) is store
        )
        # Better still, the end may commit in the task's write itself (``store._due``), when
        # that write follows the call at once: the call is its AI message's only one (with
        # several, the node's write waits for the slowest; a crash meanwhile would lose the
        # ends of the calls that had finished).
        ride = (
            _steps.task_id_of(config)
            if flush_later
            and getattr(saver, "carries", False) is True
            and asking is not None
            and len(asking.tool_calls) == 1
            else None
        )
        planned = self._planned(saver, config, agent_id, action_id, name, tool, gated)
        if planned is not None and planned.action.args_digest != digest:
            # Written ahead for other arguments than the ones about to run (a tool object the
            # plan did not know): that attempt never started; close it, then claim as usual.
            yield Io(close_not_started, (store, attempts_of([planned])))
            planned = None
        for round_ in range(2):  # a second round only after a resolver said "not done"
            if planned is not None:
                # The intent committed with the AI message's checkpoint: already claimed.
                claimed, planned = planned, None
            else:
                try:
                    claimed = yield Io(
                        _steps.begin,
                        (store,),
                        {
                            "agent_id": agent_id,
                            "action_id": action_id,
                            "tool": name,
                            "klass": klass,
                            "args": args,
                            "digest": digest,
                            "thread_id": thread_id,
                            "epoch": epoch,
                            "gated": gated,
                        },
                    )
                except InvalidValue as exc:  # arguments no store can hold: nothing ran
                    raise unstorable_args(name, args) from exc
                except Exception as exc:  # the database: nothing may run without an intent
                    return _not_recorded(call, action_id, "intent", exc)
            if isinstance(claimed, ApprovalDenied):
                message = verdict.decision.message if verdict is not None else None
                return rejected_message(call, action_id, message)
            if isinstance(claimed, RecallError):
                return refused_message(call, action_id, claimed.code, str(claimed))
            claim: Claim = claimed
            if claim.status in ("done", "failed"):
                if claim.action.args_digest != digest:
                    _warn_other_args(claim.action, args)
                if claim.status == "failed":
                    return failed_message(claim.action, call)
                yield from _steps.take_asks_again(request, claim.action)
                return (yield Io(from_record, (store, claim.action, call)))
            action = claim.action
            if claim.status == "claimed" and not action.started:
                # Written ahead with the AI message's checkpoint: a crash until this mark
                # commits leaves the call planned, never started (it runs once on resume, or
                # a run-start settle closes it as not done); after it, the call is in doubt.
                fault_point("before_start")
                try:
                    marked = yield Io(
                        store.mark_started,
                        (action.action_id, action.attempt),
                        {"relaxed": klass == "idempotent"},
                    )
                except Exception as exc:  # the database: nothing may run without its mark
                    return _not_recorded(call, action_id, "start", exc)
                fault_point("after_start")
                if not marked:  # taken or closed meanwhile: claim again, from the records
                    continue
            if claim.status == "claimed":
                fault_point("tool_claimed")  # intent recorded, the tool not started
            elif klass == "external" or action.args_digest != digest:
                # In doubt (an earlier attempt started and never reported back), and not safe
                # to run again.
                if klass != "external":
                    return in_doubt_message(action, call)
                settled = yield from _steps.settle_in_doubt(store, self.resolver, action, call)
                if settled is not None:
                    return settled
                continue  # "not_done": claim again (a new attempt under the same key)
            # Claimed now; or in doubt and safe to repeat: the same attempt, with the same key.
            out = yield from self._run(
                store,
                request,
                handler,
                action,
                args,
                verdict,
                agent_id,
                flush_later,
                ride,
                given,
                resolve=self.resolver if klass == "external" and round_ == 0 else None,
            )
            if out is not _NOT_DONE:
                return out
        return in_doubt_message(action, call)

    def _planned(
        self,
        saver: Any,
        config: Mapping[str, Any],
        agent_id: str,
        action_id: str,
        name: str,
        tool: Any,
        gated: bool,
    ) -> Claim | None:
        """This call's claim written ahead by the checkpointer, if any; and, for later AI
        messages, tell the checkpointer this node plans its calls (``plan``)."""
        plan_ahead = getattr(saver, "plan_ahead", None)
        if plan_ahead is None or gated:
            return None
        node = (config.get("metadata") or {}).get("langgraph_node")
        # Only a node of the root graph: the checkpointer plans with root checkpoints, whose
        # triggers name root nodes (a subgraph's node of the same name is another node).
        ns = (config.get("configurable") or {}).get("checkpoint_ns") or ""
        if tool is not None and isinstance(node, str) and "|" not in ns:
            self._called[name] = tool
            plan_ahead(node, self, agent_id)
        return saver.take_planned(agent_id, action_id)  # type: ignore[no-any-return]

    def _run(
        self,
        store: RecallStore,
        request: Any,
        handler: Callable[[Any], Any],
        action: Action,
        args: dict[str, Any],
        verdict: Verdict | None,
        agent_id: str,
        flush_later: bool = False,
        ride: str | None = None,
        given: str | None = None,
        resolve: Resolver | None = None,
    ) -> Logic[Output]:
        """Run the claimed call and record its end. A tool that raises ``InDoubt`` leaves the
        call open; with ``resolve``, it is shown to that resolver at once, and ``_NOT_DONE``
        returned when it found the call did not happen (the caller claims it again)."""
        call = request.tool_call
        edited = verdict is not None and verdict.edited
        req = self._keyed(request, action.action_id, args if edited else None)
        # What reaches the tool is checked against this where the tool is invoked (``_bound``).
        schema, injected = self._schema(request.tool)
        bound = BoundCall(
            call["name"],
            args,
            None if edited else given,
            schema,
            injected,
            gated=verdict is not None,
        )
        try:
            out = yield Execute(handler, req, action.action_id, bound)
        except GraphBubbleUp:
            # interrupt() inside the tool: LangGraph re-runs the tool on resume. End this
            # attempt so the re-run is a new attempt of the same action, under the same key.
            yield Io(_steps.abandon, (store, agent_id, action, verdict is not None))
            raise
        except InDoubt as exc:
            # The tool itself cannot tell whether its effect happened (an answer lost after the
            # request left). Recording "failed" would invite a retry of something that may have
            # happened: leave the intent open, exactly as a crash would, for the resolver or a
            # person, and tell the model the outcome is unknown.
            log.info("%s reported its outcome unknown: %s", call["name"], exc)
            # The resolver is asked now, as a resume would ask it, not only by a later run.
            settled = yield from _steps.settle_in_doubt(store, resolve, action, call, str(exc))
            return _NOT_DONE if settled is None else settled
        except Exception as exc:
            if bound.refused is not None:
                return (yield from _refused_inside(store, action, call, bound.refused))
            if failed_after_tool_returned(exc):
                # The tool ran to its end; only turning its value into a message failed.
                reason = f"{type(exc).__name__} while turning it into text"
                out = stand_in(call, action.action_id, None, reason)
                return (yield from _done_instead(store, agent_id, action, call, out, reason))
            try:
                yield Io(
                    store.end,
                    (action.action_id, action.attempt, "failed"),
                    {"error": f"{type(exc).__name__}: {exc}"},
                )
            except Exception as db_exc:  # keep the tool's own error; the intent stays open
                log.warning("could not record the failure of %s: %s", call["name"], db_exc)
            raise
        if bound.refused is not None:  # a wrapper in between made an answer of the refusal
            return (yield from _refused_inside(store, action, call, bound.refused))
        fault_point("tool_ran")  # the tool answered, its end not recorded
        if edited:
            out = with_edit_notice(out, call["name"], args)
        out = with_stable_id(out, action.action_id)
        # Recorded with how many interrupt() answers the tool took (a repeat takes them again).
        order = asking_of(getattr(req.runtime, "config", None))
        kept = out if order is None else with_asked(out, order.asked, order.task_id)
        if ride is not None and not is_error(out) and not needs_output(store, out):
            # Due until the task's write carries it (or any transaction of this process, or
            # the run's end, writes it first): no I/O here.
            try:
                due = _steps.due_end(store, action, kept, ride)
            except InvalidValue as exc:  # the answer cannot be packed: nothing was sent
                return (yield from _done_instead(store, agent_id, action, call, out, str(exc)))
            store._db.due.add(due)
            return out
        try:
            yield Io(_steps.finish, (store, agent_id, action, kept, flush_later))
        except InvalidValue as exc:  # the answer cannot be packed: nothing was written
            return (yield from _done_instead(store, agent_id, action, call, out, str(exc)))
        except Exception as exc:
            # The effect happened; the model gets its answer. The record stays open (in doubt)
            # for a person or the resolver, which is the truth as far as the records know.
            log.warning(
                "%s ran but its end could not be recorded (%s); action %s stays open",
                call["name"],
                exc,
                action.action_id,
            )
        return out

    def _settle(
        self, store: RecallStore, agent_id: str, skip: Collection[str] = (), own: bool = False
    ) -> Logic[SettleReport]:
        """The agent's open calls settled, as far as they can be without a person.

        ``skip``: action ids left alone (the calls the run's own pending tool task runs
        itself). ``own``: only the calls of this node's tools (a run-start settle, where each
        tool node of the graph settles its own).
        """
        self.register_undo(store)
        report = SettleReport()
        open_actions: list[Action] = yield Io(store.actions, (agent_id,), {"open_only": True})
        for action in open_actions:
            klass = self._classes.get(action.tool) or action.klass
            # An undo left open (its process died in it) is not the tool's call: the resolver
            # checks whether the call happened (the charge did), and its "done" closed the
            # refund as done too, so undo() went on past a refund nobody knows was made.
            undo = action.tool.startswith(UNDO_PREFIX)
            if undo or action.action_id in skip or (own and action.tool not in self._classes):
                report.open.append(action)
                continue
            if not action.started:
                # Planned with its AI message, and its tool never began: no effect to doubt.
                # Closed as not done, so the model may call it again if it is still needed.
                yield Io(close_not_started, (store, [(action.action_id, action.attempt)]))
            elif klass == "idempotent":
                # Safe to repeat: run again under its own key, and its answer recorded.
                if not (yield from self._rerun(store, agent_id, action)):
                    report.open.append(action)
                    continue
            elif klass != "external" or self.resolver is None:
                report.open.append(action)
                continue
            else:
                end = yield Resolve(self.resolver, action)
                if end is None:
                    report.open.append(action)
                    continue
                yield Io(_steps.record_resolution, (store, action, end, self.resolver))
            report.closed.append((yield Io(store.action, (action.action_id,))))
        return report

    def _rerun(self, store: RecallStore, agent_id: str, action: Action) -> Logic[bool]:
        """An idempotent call left in doubt, run again outside its tool node, under its key,
        with the arguments its intent recorded; its end recorded. False (it stays open) when
        the tool is not known here or needs what only its node gives (the graph's state, a
        runtime, its call id), or it raised ``InDoubt``."""
        tool = self._called.get(action.tool)
        if not isinstance(tool, BaseTool) or not isinstance(action.args, dict):
            return False
        _, keys = self._schema(tool)
        try:
            given = set(getattr(tool.get_input_schema(), "model_fields", None) or ())
            asked = set(getattr(tool.tool_call_schema, "model_fields", None) or ())
        except Exception:  # pragma: no cover - a tool without usable schemas
            return False
        if given - asked - keys:
            return False
        keyed = KeyedTool.wrap(tool, tuple(sorted(keys))) if keys else tool
        call = {"name": action.tool, "args": dict(action.args), "id": action.action_id}
        config = RunnableConfig(
            configurable={CONFIG_KEY: action.action_id, CONFIG_ACTION: action.action_id}
        )
        try:
            out = yield Execute(
                functools.partial(keyed.invoke, config=config),
                {**call, "type": "tool_call"},
                action.action_id,
                ahandler=functools.partial(keyed.ainvoke, config=config),
            )
        except InDoubt as exc:
            log.info("%s reported its outcome unknown on its re-run: %s", action.tool, exc)
            return False
        except Exception as exc:
            yield Io(
                store.end,
                (action.action_id, action.attempt, "failed"),
                {"error": f"{type(exc).__name__}: {exc}"},
            )
            return True
        out = with_stable_id(out, action.action_id)
        yield Io(_steps.finish, (store, agent_id, action, out))
        return True

    def settle_run(
        self,
        store: RecallStore,
        agent_id: str,
        pending: Sequence[tuple[AIMessage, Collection[str] | None]] = (),
    ) -> SettleReport:
        """At a run's start (the checkpointer calls it, lease held, before any node): settle
        this node's open calls but those of ``pending`` (AI messages and the ids of their calls
        the run's pending tool task will run itself; None: all)."""
        return drive(self._settle(store, agent_id, self._pending_ids(agent_id, pending), True))

    async def asettle_run(
        self,
        store: RecallStore,
        agent_id: str,
        pending: Sequence[tuple[AIMessage, Collection[str] | None]] = (),
    ) -> SettleReport:
        """Async twin of ``settle_run``."""
        skip = self._pending_ids(agent_id, pending)
        return await adrive(self._settle(store, agent_id, skip, True))

    @staticmethod
    def _pending_ids(
        agent_id: str, pending: Sequence[tuple[AIMessage, Collection[str] | None]]
    ) -> set[str]:
        return {
            action_key(agent_id, str(message.id), str(call["id"]), call["name"])
            for message, only in pending
            for call in message.tool_calls
            if only is None or call.get("id") in only
        }


def _not_recorded(call: dict[str, Any], action_id: str, what: str, exc: Exception) -> ToolMessage:
    """The model's answer when the call's intent or start mark could not be written: nothing
    ran, and nothing may run unrecorded."""
    log.warning("could not record the %s of %s: %s", what, call["name"], exc)
    return refused_message(
        call,
        action_id,
        "database",
        f"its {what} could not be recorded ({type(exc).__name__}: {exc}), so nothing ran. "
        "Try again later.",
    )


def _done_instead(
    store: RecallStore,
    agent_id: str,
    action: Action,
    call: dict[str, Any],
    out: Output | None,
    reason: str,
) -> Logic[Output]:
    """Record a call that ran as done with a stand-in for an answer that cannot be stored
    (``_outcome.stand_in``), and say why on the log. A ToolMessage answer is replaced by the
    stand-in for the model too, so the run goes on with what a repeat will return (LangGraph's
    own checkpoint would refuse the same value); any other answer (a ``Command``) is returned
    as it is, its update being the graph's."""
    log.warning(
        "%s (action %s) ran, but its result cannot be stored (%s); recorded done with a stand-in",
        call["name"],
        action.action_id,
        reason,
    )
    kept = stand_in(call, action.action_id, out, reason)
    try:
        yield Io(_steps.finish, (store, agent_id, action, kept))
    except Exception as exc:  # the database: the effect happened, the record stays open
        log.warning("could not record the end of %s: %s", call["name"], exc)
    return kept if out is None or isinstance(out, ToolMessage) else out


def unstorable_args(name: str, args: Any, *, exact: bool = False) -> RecallError:
    """``invalid_value`` for a call whose arguments cannot be recorded as given, naming the
    argument at fault (``details["found"]``: None when the walk found nothing to name).
    ``exact``: a lone surrogate counts (it would be recorded as "?")."""
    found = unstorable(args, exact_text=exact, root="args")
    return RecallError(
        f"{name} was not run: its arguments cannot be recorded ("
        f"{found or 'LangGraph serializer refused them'}). Numbers beyond 64 bits go as str "
        "or Decimal, text must be valid Unicode, and nesting at most "
        f"{MAX_DEPTH} levels deep; fix the AI message's tool call (update_state) and resume.",
        code="invalid_value",
        tool=name,
        found=found,
    )


def _refused_inside(
    store: RecallStore, action: Action, call: dict[str, Any], refusal: RecallError
) -> Logic[Output]:
    """The tool was refused where it is invoked (``_bound``): it never ran, so the attempt is
    closed as not done, and the model is told why."""
    yield Io(close_not_started, (store, [(action.action_id, action.attempt)]))
    return refused_message(call, action.action_id, refusal.code, str(refusal))


def _warn_other_args(action: Action, args: dict[str, Any]) -> None:
    """A finished call is asked for again with other arguments than it ran with.

    It still answers with its recorded result and does not run: the call's key says it ran,
    and a changed digest has innocent causes (the tool's schema gained a default since, so the
    same saved call canonicalises differently) as well as wrong ones (the saved AI message
    edited after the call ran; a model, or a test double, that repeats message ids, so a new
    call got an old call's key). Running it again would repeat a side effect in the first
    case; refusing would invite the model to ask again under a new key. So: say it, loudly.
    """
    log.warning(
        "%s (action %s) already ran with other arguments (%s) than the call now asking for "
        "it (%s): answering with its recorded result, not running it again. If this is a "
        "new call, its AI message id repeats an earlier one's; message ids must be unique "
        "per agent",
        action.tool,
        action.action_id,
        action.args,
        args,
    )


def _with_key(request: Any, action_id: str, args: dict[str, Any] | None) -> Any:
    runtime = request.runtime
    if runtime is not None and dataclasses.is_dataclass(runtime):
        config = dict(getattr(runtime, "config", None) or {})
        config["configurable"] = {
            **(config.get("configurable") or {}),
            CONFIG_KEY: action_id,
            CONFIG_ACTION: action_id,
        }
        runtime = dataclasses.replace(runtime, config=config)  # type: ignore[type-var]
        request = dataclasses.replace(request, runtime=runtime)
    if args is not None:
        request = request.override(tool_call={**request.tool_call, "args": dict(args)})
    return request
