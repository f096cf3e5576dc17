"""The journal's deferred restarts: pod restarts decided for a later time (the restart backoff), durable.

One row per pod, with the restart decide chose for it and when it is due, so a restart or a failover
onto this journal still restarts the pod at the time the first leader set (`act.workload` wakes for it,
and reconciliation picks up what a previous leader left). A row is claimed (deleted) by whoever runs it,
so a restart is run once even when a wake-up and a reconciliation round meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.domain import Action, ActionKind, PodRef, RestartParams, Track
from app.store.journal_db import JournalDb

RESTARTS_SCHEMA = """
-- Pod restarts decided for a later time (the restart backoff): one row per pod until it is run.
CREATE TABLE IF NOT EXISTS restarts (
    namespace    TEXT NOT NULL,
    name         TEXT NOT NULL,
    uid          TEXT NOT NULL,
    node         TEXT,
    kind         TEXT NOT NULL,
    reason       TEXT NOT NULL,
    due_at       TEXT NOT NULL,
    fault_id     INTEGER,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS restarts_due ON restarts (due_at);
"""


@dataclass(frozen=True, slots=True)
class DeferredRestart:
    """A restart action due at its `not_before`, and the fault whose plan it belongs to."""

    action: Action
    fault_id: int | None


class RestartQueue(JournalDb):
    """Deferred pod restarts, by due time."""

    async def defer_restart(self, action: Action, *, fault_id: int | None) -> bool:
        """Keep `action` (a restart with its `not_before`) until it is run; False when the pod already has
        one waiting (that one stands, as the first decided)."""
        pod, due = action.pod, action.not_before
        assert pod is not None, "a deferred restart names its pod"
        assert due is not None, "a deferred restart names its time"
        uid = action.params_as(RestartParams).uid
        async with self._transaction():
            cursor = await self._db.execute(
                "INSERT INTO restarts (namespace, name, uid, node, kind, reason, due_at, fault_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, name) DO NOTHING",
                (
                    pod.namespace,
                    pod.name,
                    uid,
                    action.node,
                    action.kind.value,
                    action.reason,
                    due.isoformat(),
                    fault_id,
                ),
            )
            added = cursor.rowcount == 1
            await cursor.close()
        return added

    async def deferred_restarts(self) -> list[DeferredRestart]:
        """Every restart waiting, the soonest first."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT namespace, name, uid, node, kind, reason, due_at, fault_id FROM restarts ORDER BY due_at"
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [
            DeferredRestart(
                action=Action(
                    kind=ActionKind(kind),
                    track=Track.WORKLOAD,
                    reason=reason,
                    node=node,
                    pod=PodRef(namespace=namespace, name=name),
                    params=RestartParams(uid),
                    not_before=datetime.fromisoformat(due_at),
                ),
                fault_id=fault_id,
            )
            for namespace, name, uid, node, kind, reason, due_at, fault_id in rows
        ]

    async def claim_restart(self, action: Action) -> bool:
        """Take `action`'s row to run it; False when it is gone (another wake-up ran it)."""
        pod = action.pod
        assert pod is not None
        async with self._transaction():
            cursor = await self._db.execute(
                "DELETE FROM restarts WHERE namespace = ? AND name = ? AND uid = ?",
                (pod.namespace, pod.name, action.params_as(RestartParams).uid),
            )
            claimed = cursor.rowcount == 1
            await cursor.close()
        return claimed
