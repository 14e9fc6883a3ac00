"""The approval protocol: ask a person, record the answer signed, bind it to exact arguments.

The node interrupts with ``{"type": "approval_request", "action_id", "tool", "args",
"digest", "description"}``. A resume may carry ``{"type": "approve"}`` (optionally with the
``"digest"`` and ``"action_id"`` the person saw), ``{"type": "edit", "args": {...}}``,
``{"type": "reject", "message": "..."}``, or HumanInTheLoopMiddleware's ``{"decisions":
[...]}`` with one decision. Anything else is an invalid resume: nothing is saved and the
question can be answered again.

Rules that keep a "yes" bound to what the person saw:

- The request is recorded once, with the arguments and digest shown. A bare approve is an
  approval of *that* digest; an edit is an approval of the edited arguments' digest.
- An approve or edit is recorded only as the answer to a pending request. LangGraph replays
  earlier resume values whenever a task re-runs (a crash, a sibling's interrupt); a replayed
  "yes" must not mint a second approval. A "no" is always recorded: it can only stop things.
- A gated call asks in its turn, and one already decided takes again as many answers as its
  asking took (each answer sent back with a problem took one), deciding nothing with them, so
  answers keep lining up with questions (see ``_order``). With one call per task it asks once
  per run of its task.
- Spending the approval happens in the same transaction as the claim, against the digest of
  the arguments about to run (``_durable.begin``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal, Union, cast

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphInterrupt
from langgraph.types import interrupt
from pydantic import TypeAdapter, ValidationError
from typing_extensions import NotRequired, Required, TypedDict

from .._errors import RecallError
from .._render import call_text
from ..checkpoint._faults import fault_point
from ..store import Approval, RecallStore
from ._bound import _INVALID_RESUME
from ._canonical import args_digest, canonical_args, edit_problem
from ._drive import Io, Step, WaitTurn
from ._order import asking_of, scratchpad_of, turns_for
from ._steps import task_id_of


class _Approve(TypedDict, total=False):
    type: Required[Literal["approve"]]
    digest: str
    action_id: str


class _Edit(TypedDict, total=False):
    type: Required[Literal["edit"]]
    args: Required[dict[str, Any]]
    digest: str
    action_id: str


class _EditedAction(TypedDict):
    name: str
    args: dict[str, Any]


class _HitlEdit(TypedDict, total=False):
    type: Required[Literal["edit"]]
    edited_action: Required[_EditedAction]


class _Reject(TypedDict, total=False):
    type: Required[Literal["reject", "respond"]]
    message: str
    action_id: str


class _Decisions(TypedDict):
    decisions: list[Union[_Approve, _Edit, _HitlEdit, _Reject]]  # noqa: UP007


ApprovalAnswer = Union[_Approve, _Edit, _HitlEdit, _Reject, _Decisions]  # noqa: UP007
"""What a resume may carry for an approval request (also sent to clients as JSON schema)."""


class ApprovalRequest(TypedDict):
    """The value a gated call interrupts with."""

    type: Literal["approval_request"]
    action_id: str
    tool: str
    args: dict[str, Any]
    digest: str
    description: str
    allowed: NotRequired[list[str]]
    # Set when the question is asked again: what was wrong with the last answer.
    problem: NotRequired[str]


@dataclass(frozen=True)
class Answer:
    kind: Literal["approve", "edit", "reject", "unclear"]
    args: dict[str, Any] | None = None
    digest: str | None = None
    action_id: str | None = None
    message: str | None = None
    tool: str | None = None


def parse_answer(raw: Any) -> Answer:
    """One decision from any accepted resume form (already validated by the schema)."""
    if isinstance(raw, dict) and "decisions" in raw:
        decisions = raw["decisions"]
        if len(decisions) != 1:
            # The schema cannot say "exactly one"; fewer or more is a mis-addressed answer, not
            # a person's "no": the caller asks again (``_problem``).
            return Answer("unclear", message=f"expected one decision, got {len(decisions)}")
        raw = decisions[0]
    kind = raw["type"]
    if kind == "approve":
        return Answer("approve", digest=raw.get("digest"), action_id=raw.get("action_id"))
    if kind == "edit":
        if "edited_action" in raw:
            edited = raw["edited_action"]
            return Answer("edit", args=dict(edited["args"]), tool=edited["name"])
        return Answer(
            "edit", args=dict(raw["args"]), digest=raw.get("digest"), action_id=raw.get("action_id")
        )
    return Answer("reject", message=raw.get("message"), action_id=raw.get("action_id"))


@dataclass(frozen=True)
class Verdict:
    """What the approval step decided: the arguments that may run, and the decision behind it."""

    args: dict[str, Any]
    digest: str
    edited: bool
    decision: Approval


def approval_step(
    store: RecallStore,
    *,
    agent_id: str,
    action_id: str,
    call: dict[str, Any],
    config: Any,
    args: dict[str, Any],
    digest: str,
    schema: Any,
    injected: frozenset[str],
) -> Generator[Step, Any, Verdict | ToolMessage]:
    """Ask (or re-read) the decision for one gated call; may raise ``GraphInterrupt``."""
    name = call["name"]
    # The whole chain of the action's decisions is verified before any of it is used (the
    # request's digest is what a bare approve is signed over): ApprovalMismatch otherwise.
    latest: Approval | None = yield Io(store.latest_decision, (action_id,))
    # Recorded in this execution: any answer this execution is handed was given before the
    # question was on record (its record deleted, or written before schema v9), so to a
    # question nobody can vouch for. Such answers are asked again, never signed.
    recorded_now = latest is None
    if latest is None:
        latest = yield Io(
            store.record_decision,
            (agent_id, action_id, "requested"),
            {"args": args, "args_digest": digest, "message": describe(name, args)},
        )
    assert latest is not None
    needs_answer = latest.decision == "requested"
    request: ApprovalRequest = {
        "type": "approval_request",
        "action_id": action_id,
        "tool": name,
        "args": args,
        "digest": digest,
        "description": describe(name, args),
        "allowed": ["approve", "edit", "reject"],
    }
    turns = turns_for(config)
    if turns is not None:
        yield WaitTurn(turns, call["id"])
    order = asking_of(config)
    # Unordered (one call per task: create_agent, Send, a lone call), the approval is its
    # task's first question: its answers are the task's first ``taken``.
    pad = scratchpad_of(config) if order is None else None
    task_id = order.task_id if order is not None else task_id_of(config)
    # Decided by a person's answer: the task it was asked in and how many answers its asking
    # took are on record, so a later run of that task takes back exactly those, and a run of
    # another task (after update_state or a fork) none.
    exact = not needs_answer and latest.asked is not None
    taken = 0
    # Answers of this task that were given to a question whose record had vanished: the
    # request asked anew keeps how many (``asked``), so a later run skips them too.
    stale = (latest.asked or 0) if needs_answer and latest.task_id == task_id else 0
    asking: ApprovalRequest = request
    answer: Answer | None = None
    # The turn passes when the call is through (DurableToolNode._run_one), not here: a tool
    # asking its own questions after its approval asks them before the calls after it.
    while True:
        resumed = False  # the answer taken is the run's resume, not one the task holds
        if not needs_answer:
            # Decided: take back the answers this call's asking took in this task, and no
            # other. Which they are is not on record, so each is looked at before it is taken:
            # only an answer to an approval can be one of them. The task's first answers are
            # not its own when it did not ask in this task (after update_state or a fork,
            # which start the task afresh, or decided through the store): taking the tool's
            # first answer handed the tool's next question that one's answer, or failed the
            # run for good (a lone call validated it as an approval's answer).
            task_pad = order.pad if order is not None else pad
            position = order.turns.position if order is not None else taken
            if task_pad is None:
                break
            if exact:
                if latest.task_id != task_id or taken >= (latest.asked or 0):
                    break
                if position >= len(task_pad.resume) and task_pad.get_null_resume(False) is None:
                    break  # its answers are not all here: never move past those held
            elif position < len(task_pad.resume):
                # Any answer to an approval, this call's or not: one naming another action,
                # held here, was taken by this call's asking (and sent back with a problem).
                if not _is_approval_answer(task_pad.resume[position]):
                    break
            else:
                # The task holds no more answers. The run's resume is this call's own only if
                # it answers an approval (the process died after recording the decision,
                # before saving the task's answers); anything else is for a later question.
                if not _is_approval_answer(task_pad.get_null_resume(False), action_id):
                    break
                resumed = True
        try:
            # A decided call repeating takes its answers as they are: one that is not an
            # approval's (given to a later question) must not fail the run.
            schema_of = cast(type, ApprovalAnswer) if needs_answer else None
            raw = interrupt(asking, response_schema=schema_of)
        except GraphInterrupt:
            taken += 1
            if order is not None:
                order.turns.took()
            if needs_answer and recorded_now and stale:
                # Asked anew: the request on record says how many answers are stale.
                yield Io(
                    store.record_decision,
                    (agent_id, action_id, "requested"),
                    {
                        "args": args,
                        "args_digest": digest,
                        "message": describe(name, args),
                        "task_id": task_id,
                        "asked": stale,
                    },
                )
            if needs_answer:
                raise
            # Decided already (ran, or a decision came from another channel): no question.
            break
        except ValidationError as exc:
            taken += 1
            if order is not None:
                order.turns.took()
            # LangGraph checked the resume against the schema: say what it may be instead
            # of pydantic's list of every union member that did not match. Nothing is
            # recorded, and the question stays open for a resume that fits.
            raise _unusable(name, action_id, f"{exc.error_count()} validation errors") from None
        taken += 1
        if order is not None:
            order.turns.took()
        if exact:
            continue
        if resumed:
            # Taken so that no later question gets it. After a crash that lost the task's
            # answers it is this call's own, already recorded; after update_state or a fork it
            # was given to a later question, which is asked again. Either way it decides
            # nothing here.
            break
        if not needs_answer:
            # Decided: its answers are taken again only to keep the places its asking took
            # (each answer sent back with a problem took one: taking only the first handed
            # the tool's own question the approval's answer), and decide nothing: one left
            # by a later question's resume (after update_state or a fork) may be anything.
            try:
                again = parse_answer(raw)
            except Exception:
                break
            if _problem(again, name, action_id, schema, injected) is None:
                break
            continue
        if recorded_now or taken <= stale:
            stale = max(stale, taken)
            asking = {**request, "problem": _VANISHED}
            continue
        answer = parse_answer(raw)
        problem = _problem(answer, name, action_id, schema, injected)
        if problem is None:
            break
        # An edit the tool would refuse (or silently drop keys of), or a decisions list
        # that is not one decision: ask again, saying why, before anything is recorded, so
        # the person can correct it. (Raising instead would not reopen the question:
        # LangGraph keeps this resume value for this interrupt.)
        asking = {**request, "problem": problem}

    if answer is not None:
        asked = {"task_id": task_id, "asked": taken}
        if answer.kind == "reject":
            if latest.decision != "reject":
                latest = yield Io(
                    store.record_decision,
                    (agent_id, action_id, "reject"),
                    {"message": answer.message, **asked},
                )
        elif needs_answer and answer.kind == "approve":
            latest = yield Io(
                store.record_decision,
                (agent_id, action_id, "approve"),
                {"args_digest": answer.digest or latest.args_digest, **asked},
            )
        elif needs_answer and answer.kind == "edit":
            edited = canonical_args(schema, answer.args or {}, injected)
            latest = yield Io(
                store.record_decision,
                (agent_id, action_id, "approve"),
                {
                    "args": edited,
                    "args_digest": args_digest(name, edited),
                    "message": "edited by a person",
                    **asked,
                },
            )
    assert latest is not None
    if answer is not None:
        fault_point("approval_recorded")  # the person's answer recorded, nothing spent or run
    if latest.decision == "approve" and latest.args is not None:
        # An edit: the edited arguments are what was approved and what runs. Their digest is
        # recomputed here, so a stored argument changed behind the signature cannot run.
        return Verdict(dict(latest.args), args_digest(name, latest.args), True, latest)
    return Verdict(args, digest, False, latest)


_VANISHED = (
    "the answer given was for a question that is no longer on record (its record was deleted, "
    "or written by an older langgraph-recall), so it cannot be vouched for: look at this call "
    "again and answer this request"
)


def _problem(
    answer: Answer, name: str, action_id: str, schema: Any, injected: frozenset[str]
) -> str | None:
    """Why ``answer`` cannot be taken as the person's decision (None: it can).

    A mis-addressed answer is asked again, not refused: refused, the call was closed while its
    request stayed pending for good, listed as waiting for a person with no question left
    open to answer it."""
    if answer.kind == "unclear":
        return f"{answer.message}: answer this call's request with one decision"
    if answer.action_id is not None and answer.action_id != action_id:
        return (
            f"the decision was given for action {answer.action_id}, not this one ({action_id}) "
            "(an earlier answer sent again?): answer this request"
        )
    if answer.kind != "edit":
        return None
    if answer.tool is not None and answer.tool != name:
        return f"the edit names tool {answer.tool!r}; an edit may change the arguments of {name}, not the tool"
    problem = edit_problem(schema, answer.args, injected)
    return None if problem is None else f"the edited arguments do not fit: {problem}"


_ANSWER: TypeAdapter[Any] = TypeAdapter(ApprovalAnswer)


def _is_approval_answer(value: Any, action_id: str | None = None) -> bool:
    """Whether ``value`` answers an approval request (with ``action_id``: this one)."""
    if value is None:
        return False
    try:
        answer = parse_answer(_ANSWER.validate_python(value))
    except Exception:
        return False
    return action_id is None or answer.action_id is None or answer.action_id == action_id


def _unusable(name: str, action_id: str, why: str) -> RecallError:
    err = RecallError(
        f"the answer to the approval of {name} (action {action_id}) cannot be used ({why}). "
        "Nothing was recorded and the question is still open: resume with "
        '{"type": "approve"} (optionally with the "digest" shown), {"type": "edit", "args": '
        '{...the tool\'s parameters...}}, {"type": "reject", "message": "..."}, or '
        'HumanInTheLoopMiddleware\'s {"decisions": [...]}',
        code="invalid_value",
        action_id=action_id,
    )
    # LangGraph's own mark for a resume that does not fit its interrupt: ToolNode re-raises
    # such an error even with handle_tool_errors=True (which made it a ToolMessage, the
    # question closed and the run going on to the model).
    setattr(err, _INVALID_RESUME, True)
    return err


def describe(name: str, args: dict[str, Any]) -> str:
    return f"{call_text(name, args, 200)} needs your approval"
