"""Leases: who acts for an agent now, until when, and the fencing epoch written with every
checkpoint (see ``acquire_lease``)."""

from __future__ import annotations

import time

from .._errors import LeaseHeld
from ._db import Tx
from ._models import Lease
from ._records import check_agent_id


def lease(tx: Tx, agent_id: str) -> Lease | None:
    check_agent_id(agent_id, write=False)
    row = tx.one(
        "SELECT agent_id, holder, epoch, expires_at FROM recall_leases WHERE agent_id = ?",
        (agent_id,),
    )
    return None if row is None else Lease(row[0], row[1], int(row[2]), float(row[3]))


def acquire_lease(tx: Tx, agent_id: str, holder: str, ttl: float) -> Lease:
    """Take the lease if it is free, expired or already ours, in one conditional statement.

    The epoch grows whenever the holder changes: it is the fencing token written with every
    checkpoint, so a holder that was frozen past its expiry can be told apart from the new one.
    It grows too when a holder id takes its own lease while that lease is still live: one
    process never does (its runs of an agent take turns, each releasing first), so that is
    another process given the same ``holder=`` (a worker restarted under its name). It takes
    over at once, but the old one, if it still runs or is only frozen, is fenced out: with the
    epoch kept, both acted and the old one's late writes landed.
    """
    check_agent_id(agent_id)
    row = tx.one(
        "INSERT INTO recall_leases (agent_id, holder, epoch, expires_at, acquired_at) "
        "VALUES (?, ?, 1, {now} + ?, {now}) ON CONFLICT (agent_id) DO UPDATE SET "
        "epoch = CASE WHEN recall_leases.holder = excluded.holder "
        "AND recall_leases.expires_at <= {now} THEN recall_leases.epoch "
        "ELSE recall_leases.epoch + 1 END, holder = excluded.holder, "
        "expires_at = excluded.expires_at, acquired_at = excluded.acquired_at "
        "WHERE recall_leases.expires_at <= {now} OR recall_leases.holder = excluded.holder "
        "RETURNING agent_id, holder, epoch, expires_at",
        (agent_id, holder, float(ttl)),
    )
    if row is None:
        current = lease(tx, agent_id)
        assert current is not None
        left = max(0.0, current.expires_at - time.time())
        raise LeaseHeld(
            f"agent {agent_id!r} is being run by {current.holder} (lease epoch {current.epoch}, "
            f"expires in {left:.1f}s); nothing ran here. Wait for it to finish, pass wait= to "
            "queue, or run a different agent_id.",
            agent_id=agent_id,
            holder=current.holder,
            expires_at=current.expires_at,
            epoch=current.epoch,
        )
    return Lease(row[0], row[1], int(row[2]), float(row[3]))


def renew_lease(tx: Tx, agent_id: str, holder: str, epoch: int, ttl: float) -> bool:
    # Not a released lease (expires_at 0): the renewer picks its leases, then renews them
    # outside its lock, so a run that ended in between would otherwise have its lease held
    # again, by nobody, for a whole ttl, and the next process would wait that long.
    return bool(
        tx.run(
            "UPDATE recall_leases SET expires_at = {now} + ? WHERE agent_id = ? AND holder = ? "
            "AND epoch = ? AND expires_at > 0",
            (float(ttl), agent_id, holder, epoch),
        )
    )


def release_lease(tx: Tx, agent_id: str, holder: str, epoch: int) -> bool:
    # The row stays (expired) so the epoch keeps growing across holders.
    return bool(
        tx.run(
            "UPDATE recall_leases SET expires_at = 0 WHERE agent_id = ? AND holder = ? AND epoch = ?",
            (agent_id, holder, epoch),
        )
    )
