"""Approvals: an action's requests and decisions, signed as one chain, and their spending.

Each row of ``recall_approvals`` is signed (HMAC-SHA256 with the store's secret) over a
versioned, length-prefixed encoding of everything that decides with it: the agent, the action,
the row's own id, its place ``seq`` in the action's chain (1, 2, 3 ...), the decision, the
digest of the arguments it is for, its message, the task and answer count the protocol keeps,
the attempt of the action it authorises, the signing key's id, and the signature of the row
before it. So a row cannot be copied to another action, agent, place or attempt, re-ordered,
or edited, without the secret; and a row deleted from the middle leaves a gap.

Rules that use this (``docs/security.md`` states the threat model):

- An action's decisions are read whole, in one indexed read, and verified from seq 1 before
  any of them is used; the latest is the highest seq. Any row that fails, a gap or a
  duplicate: the action's decisions are untrusted and nothing runs (``approval_mismatch``).
- An approve authorises one execution: the attempt it names, spent once (the spends table's
  primary key), in the claim's own transaction. A reject recorded after an unspent approve
  withdraws it (spent by no attempt), so deleting the reject alone does not bring it back.
- Rows written before schema v9 (``seq`` NULL, the v1 signature) are not used: their action's
  question is asked anew. ``verify`` still checks their v1 signature.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .._errors import ApprovalDenied, ApprovalMismatch, ApprovalRequired, RecallError
from ._codec import dumps_typed, loads_typed
from ._db import Tx
from ._models import Approval
from ._records import touch_agent

MAC_VERSION = "v2"
_PREFIX = MAC_VERSION + ":"
DECISIONS = ("requested", "approve", "reject")
# ``attempt`` of a spend made by a reject: the approve it follows is withdrawn, run by nothing.
WITHDRAWN = 0

_APPROVAL_COLS = (
    "approval_id, agent_id, action_id, decision, args_type, args, args_digest, message, "
    "signature, created_at, task_id, asked, seq, attempt, key_id"
)
# The action's chain, in order: read through the unique index (action_id, seq).
_CHAIN = (
    f"SELECT {_APPROVAL_COLS} FROM recall_approvals WHERE action_id = ? AND seq IS NOT NULL "
    "ORDER BY seq"
)


def _field(value: Any) -> bytes:
    """One field of the signed encoding: ``-`` for None, else ``<length>:<utf-8 bytes>,``."""
    if value is None:
        return b"-"
    data = str(value).encode("utf-8", "surrogatepass")
    return b"%d:%s," % (len(data), data)


def args_hash(args_type: str | None, args: Any) -> str | None:
    """A fingerprint of the stored arguments' bytes (what ``pending`` shows), for the MAC."""
    if args_type is None or args is None:
        return None
    return hashlib.sha256(args_type.encode() + b"\0" + bytes(args)).hexdigest()


# A row as read: the decision, and the fingerprint of its stored arguments.
Link = tuple[Approval, "str | None"]


def sign(secret: bytes, a: Approval, prev: str, stored_args: str | None) -> str:
    """The v2 signature of ``a`` as the row after the one signed ``prev`` ("" for seq 1);
    ``stored_args``: ``args_hash`` of its stored arguments."""
    fields = (
        MAC_VERSION,
        a.key_id,
        a.agent_id,
        a.action_id,
        a.approval_id,
        a.seq,
        a.decision,
        a.args_digest,
        stored_args,
        a.message,
        a.task_id,
        a.asked,
        a.attempt,
        prev,
    )
    msg = b"recall-approval;" + b"".join(_field(f) for f in fields)
    return _PREFIX + hmac.new(secret, msg, hashlib.sha256).hexdigest()


def sign_v1(secret: bytes, a: Approval) -> str:
    """The signature rows written before schema v9 carry (checked by ``verify`` only)."""
    msg = "\x1f".join([a.agent_id, a.action_id, a.decision, a.args_digest or ""]).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def _same(expected: str | None, found: str | None) -> bool:
    """Constant-time equality of two texts (any characters: a row's may be anything)."""
    return hmac.compare_digest(
        (expected or "").encode("utf-8", "surrogatepass"),
        (found or "").encode("utf-8", "surrogatepass"),
    )


def approval_of(r: Sequence[Any]) -> Approval:
    return Approval(
        approval_id=r[0],
        agent_id=r[1],
        action_id=r[2],
        decision=r[3],
        args=loads_typed(r[4], r[5]) if r[4] is not None else None,
        args_digest=r[6],
        message=r[7],
        signature=r[8],
        created_at=r[9],
        task_id=r[10],
        asked=None if r[11] is None else int(r[11]),
        seq=None if r[12] is None else int(r[12]),
        attempt=None if r[13] is None else int(r[13]),
        key_id=r[14],
    )


def link_of(r: Sequence[Any]) -> Link:
    return approval_of(r), args_hash(r[4], r[5])


def chain_problems(secret: bytes, chain: Sequence[Link]) -> list[tuple[Approval, str]]:
    """What is wrong with one action's chain (rows with a seq, in seq order); empty: it holds.

    Every row is checked, not only up to the first fault, so ``verify`` can name them all.
    """
    found: list[tuple[Approval, str]] = []
    prev, prev_seq = "", 0
    first = chain[0][0] if chain else None
    for a, stored_args in chain:
        seq = a.seq or 0
        if seq < 1:
            found.append((a, f"is at place {seq}, which no chain has"))
        elif seq == prev_seq:
            found.append((a, f"holds place {seq} of its action's chain a second time"))
        elif seq != prev_seq + 1:
            missing = f"{prev_seq + 1}" if seq == prev_seq + 2 else f"{prev_seq + 1} to {seq - 1}"
            found.append((a, f"is at place {seq}, but place {missing} is missing (deleted?)"))
        elif first is not None and a.agent_id != first.agent_id:
            found.append((a, f"names agent {a.agent_id!r}, its chain {first.agent_id!r}"))
        elif not _same(sign(secret, a, prev, stored_args), a.signature):
            found.append((a, "has an invalid signature"))
        prev, prev_seq = a.signature or "", seq
    return found


def _untrusted(action_id: str, problems: list[tuple[Approval, str]]) -> ApprovalMismatch:
    a, why = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return ApprovalMismatch(
        f"the recorded decisions for action {action_id} cannot be trusted: decision "
        f"{a.approval_id} {why}{more}. They were altered, copied, re-ordered or deleted in the "
        "database, or made with another secret, so nothing runs on them. Run `langgraph-recall "
        "verify` to see every problem, restore the approvals table from a backup, or ask a "
        "person again under a new call.",
        action_id=action_id,
    )


def trusted_chain(tx: Tx, secret: bytes, action_id: str) -> list[Approval]:
    """The action's decisions in order, every one verified (one indexed read), or
    ``approval_mismatch`` naming the first problem."""
    chain = [link_of(r) for r in tx.all(_CHAIN, (action_id,))]
    problems = chain_problems(secret, chain)
    if problems:
        raise _untrusted(action_id, problems)
    return [a for a, _ in chain]


def latest_decision(tx: Tx, secret: bytes, action_id: str) -> Approval | None:
    chain = trusted_chain(tx, secret, action_id)
    return chain[-1] if chain else None


def record_decision(
    tx: Tx,
    secret: bytes,
    *,
    agent_id: str,
    action_id: str,
    decision: str,
    args: Any = None,
    args_digest: str | None = None,
    message: str | None = None,
    task_id: str | None = None,
    asked: int | None = None,
) -> Approval:
    """Append a signed request or decision to the action's chain (verified first)."""
    if decision not in DECISIONS:
        raise RecallError(f"unknown decision {decision!r}", code="invalid_value")
    touch_agent(tx, agent_id)  # on PostgreSQL: the agent row's lock orders its writers
    chain = trusted_chain(tx, secret, action_id)
    if chain and chain[0].agent_id != agent_id:
        raise ApprovalMismatch(
            f"action {action_id} belongs to agent {chain[0].agent_id!r}, not {agent_id!r}; "
            "nothing was recorded",
            action_id=action_id,
        )
    last = chain[-1] if chain else None
    row = tx.one(
        "SELECT coalesce(max(attempt), 0) + 1 FROM recall_actions WHERE action_id = ?",
        (action_id,),
    )
    a = Approval(
        approval_id=f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}",
        agent_id=agent_id,
        action_id=action_id,
        decision=decision,  # type: ignore[arg-type]
        args=args,
        args_digest=args_digest,
        message=message,
        signature="",
        created_at=0.0,
        task_id=task_id,
        asked=asked,
        seq=len(chain) + 1,
        attempt=int(row[0]) if row else 1,
    )
    atype, adata = (None, None) if args is None else dumps_typed(args)
    signature = sign(secret, a, last.signature if last else "", args_hash(atype, adata))
    inserted = tx.one(
        f"INSERT INTO recall_approvals ({_APPROVAL_COLS}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {now}, ?, ?, ?, ?, ?) "
        "ON CONFLICT (action_id, seq) DO NOTHING RETURNING created_at",
        (
            a.approval_id,
            agent_id,
            action_id,
            decision,
            atype,
            adata,
            args_digest,
            message,
            signature,
            task_id,
            asked,
            a.seq,
            a.attempt,
            None,
        ),
    )
    if inserted is None:  # another writer took this place in the chain first
        raise ApprovalMismatch(
            f"another decision for action {action_id} was recorded at the same moment; nothing "
            "was recorded. Read the latest decision and decide again.",
            action_id=action_id,
        )
    if decision == "reject" and last is not None and last.decision == "approve":
        # The "yes" it overrides is withdrawn for good: spent by no attempt. Deleting this
        # reject alone then leaves a spent approve, never a usable one.
        tx.run(
            "INSERT INTO recall_approval_spends (approval_id, action_id, attempt, created_at) "
            "VALUES (?, ?, ?, {now}) ON CONFLICT (approval_id) DO NOTHING",
            (last.approval_id, action_id, WITHDRAWN),
        )
    return replace(a, signature=signature, created_at=float(inserted[0]))


def spend_approval(
    tx: Tx, secret: bytes, *, agent_id: str, action_id: str, args_digest: str, attempt: int
) -> Approval:
    """Use the latest decision for this action to run attempt ``attempt`` with exactly
    ``args_digest``. Once. In the claim's transaction: the chain is one indexed read."""
    chain = trusted_chain(tx, secret, action_id)
    a = chain[-1] if chain else None
    if a is None or a.decision == "requested":
        raise ApprovalRequired(f"action {action_id} has no decision yet; ask a person first")
    if a.agent_id != agent_id:
        raise ApprovalMismatch(
            f"the decision on record for {action_id} was made for agent {a.agent_id!r}, not "
            f"{agent_id!r}; nothing runs"
        )
    if a.decision == "reject":
        raise ApprovalDenied(f"a person rejected {action_id}: {a.message or 'no reason given'}")
    if not _same(a.args_digest, args_digest):
        raise ApprovalMismatch(
            f"the approval for {action_id} was given for other arguments (digest "
            f"{(a.args_digest or '')[:12]}), not the ones about to run ({args_digest[:12]}); "
            "nothing ran. Ask for a new decision.",
        )
    if a.attempt != attempt:
        # Bound to the attempt that was next when the person decided: a later attempt (after
        # one settled as not done) needs a decision of its own, whatever spends were deleted.
        raise ApprovalMismatch(
            _spent_by(tx, a.approval_id, action_id)
            or f"the approval for {action_id} authorises its attempt {a.attempt}, not attempt "
            f"{attempt}; nothing ran. Ask for a new decision."
        )
    spent = tx.run(
        "INSERT INTO recall_approval_spends (approval_id, action_id, attempt, created_at) "
        "VALUES (?, ?, ?, {now}) ON CONFLICT (approval_id) DO NOTHING",
        (a.approval_id, action_id, attempt),
    )
    if not spent:
        raise ApprovalMismatch(
            _spent_by(tx, a.approval_id, action_id) or _used(action_id),
        )
    return a


def _used(action_id: str) -> str:
    return (
        f"the approval for {action_id} was already used by one execution; a replayed resume "
        "cannot run the call again. Ask for a new decision."
    )


def _spent_by(tx: Tx, approval_id: str, action_id: str) -> str | None:
    """Why a used approval cannot run its call again, naming the attempt that used it (None:
    it is not spent). One settled by a person as not done is the common case (a crash
    mid-call, then ``resolve --not-done``): its approval went with it, so running the call
    takes a new decision."""
    row = tx.one(
        "SELECT s.attempt, a.outcome, a.note FROM recall_approval_spends s LEFT JOIN "
        "recall_actions a ON a.action_id = s.action_id AND a.attempt = s.attempt "
        "WHERE s.approval_id = ?",
        (approval_id,),
    )
    if row is None:
        return None
    if row[1] == "not_done":
        note = f" ({row[2]})" if row[2] else ""
        return (
            f"its approval was used by attempt {row[0]} of {action_id}, which was settled as "
            f"not done{note}; one approval runs one execution, so nothing ran now. To run it, "
            "call the tool again: the new call is put to a person again."
        )
    if int(row[0]) == WITHDRAWN:
        return f"the approval for {action_id} was withdrawn by a later rejection; nothing ran."
    return _used(action_id)


def pending_approvals(tx: Tx, secret: bytes, agent_id: str) -> list[Approval]:
    """Requests with no decision after them, whose chain verifies (an untrusted one is
    ``verify``'s to report: listed here, it would be offered to a person and the model)."""
    rows = tx.all(
        f"SELECT {_APPROVAL_COLS} FROM recall_approvals r WHERE r.agent_id = ? AND "
        "r.decision = 'requested' AND r.seq IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
        "recall_approvals d WHERE d.action_id = r.action_id AND d.seq > r.seq) "
        "ORDER BY r.approval_id",
        (agent_id,),
    )
    out = []
    for r in rows:
        a = approval_of(r)
        chain = [link_of(c) for c in tx.all(_CHAIN, (a.action_id,))]
        if not chain_problems(secret, chain) and chain[-1][0].approval_id == a.approval_id:
            out.append(a)
    return out


def approval_problems(tx: Tx, secret: bytes) -> list[tuple[Approval | None, str]]:
    """Every problem with the recorded approvals and spends, each naming its row."""
    links = [link_of(r) for r in tx.all(f"SELECT {_APPROVAL_COLS} FROM recall_approvals")]
    agents = {r[0] for r in tx.all("SELECT agent_id FROM recall_agents")}
    by_sig: dict[str, list[Approval]] = {}
    for a, _ in links:
        by_sig.setdefault(a.signature, []).append(a)
    chains: dict[str, list[Link]] = {}
    found: list[tuple[Approval | None, str]] = []
    for link in links:
        a = link[0]
        if a.agent_id not in agents:
            found.append((a, f"names agent {a.agent_id!r}, which has no records (orphaned)"))
        if a.seq is None:
            if not _same(sign_v1(secret, a), a.signature):
                found.append((a, "has an invalid signature (a row of the old format)"))
            continue
        chains.setdefault(a.action_id, []).append(link)
    for chain in chains.values():
        chain.sort(key=lambda link: (link[0].seq or 0, link[0].approval_id))
        stored = {id(a): h for a, h in chain}
        for a, why in chain_problems(secret, chain):
            copies = [c for c in by_sig.get(a.signature, []) if c is not a]
            if copies:
                c = copies[0]
                why = (
                    f"is a copy of decision {c.approval_id} (action {c.action_id}, agent "
                    f"{c.agent_id!r}): {why}"
                )
            elif why == "has an invalid signature":
                why = _placed_elsewhere(secret, (a, stored[id(a)]), chain) or why
            found.append((a, why))
    found += _spend_problems(tx, {a.approval_id: a for a, _ in links})
    return found


def _placed_elsewhere(secret: bytes, link: Link, chain: list[Link]) -> str | None:
    """Whether a row verifies at another place of its chain (it was re-ordered)."""
    a, stored_args = link
    prevs = [""] + [c.signature for c, _ in chain if c is not a]
    for seq in range(1, len(chain) + 2):
        for prev in prevs:
            if _same(sign(secret, replace(a, seq=seq), prev, stored_args), a.signature):
                return f"is out of order: it was signed for place {seq}, found at place {a.seq}"
    return None


def _spend_problems(tx: Tx, approvals: dict[str, Approval]) -> list[tuple[Approval | None, str]]:
    found: list[tuple[Approval | None, str]] = []
    attempts = {(r[0], int(r[1])) for r in tx.all("SELECT action_id, attempt FROM recall_actions")}
    for approval_id, action_id, attempt in tx.all(
        "SELECT approval_id, action_id, attempt FROM recall_approval_spends"
    ):
        a = approvals.get(approval_id)
        what = f"the spend of decision {approval_id} (action {action_id}, attempt {attempt})"
        if a is None:
            found.append((None, f"{what} names no recorded decision (orphaned)"))
        elif a.action_id != action_id or a.decision != "approve":
            found.append((None, f"{what} names a decision that is not an approval of that action"))
        elif int(attempt) != WITHDRAWN and (action_id, int(attempt)) not in attempts:
            found.append((None, f"{what} names an attempt that is not recorded (orphaned)"))
    return found


def all_approvals(tx: Tx) -> list[Approval]:
    return [approval_of(r) for r in tx.all(f"SELECT {_APPROVAL_COLS} FROM recall_approvals")]
