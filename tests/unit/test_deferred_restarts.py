"""A restart decided for later is due at its `not_before`, and waits in the journal until it is run.

`restart_wait` table-driven over (not_before, now); the journal's restart queue keeps one restart per pod,
gives the restart back as it was decided, and lets exactly one runner claim it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.decide import restart_policy
from app.domain import Action, ActionKind, PodRef, RestartParams, Track
from app.store import inbox, journal

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # the function reads no clock: any origin will do


@pytest.mark.parametrize(
    ("not_before", "now", "wait"),
    [
        (None, T0, 0.0),  # no time on it: now
        (T0, T0, 0.0),  # due exactly now
        (T0 - timedelta(minutes=3), T0, 0.0),  # overdue (a new leader after a long gap): at once
        (T0 + timedelta(seconds=30), T0, 30.0),
        (T0 + timedelta(minutes=10), T0 + timedelta(minutes=4), 360.0),  # a new leader mid-wait: the rest
        (T0 + timedelta(milliseconds=500), T0, 0.5),
    ],
)
def test_restart_wait(not_before: datetime | None, now: datetime, wait: float) -> None:
    assert restart_policy.restart_wait(not_before, now=now) == wait


def restart(pod: str, uid: str, due: datetime, kind: ActionKind = ActionKind.RESTART_POD) -> Action:
    return Action(
        kind=kind,
        track=Track.WORKLOAD,
        reason=f"XID 13 under {pod}",
        node="gpu-06",
        pod=PodRef(namespace="training", name=pod),
        params=RestartParams(uid),
        not_before=due,
    )


async def test_the_queue_keeps_one_restart_per_pod_and_lets_one_runner_claim_it(tmp_path: Path) -> None:
    db = await inbox.connect(tmp_path / "j.db")
    try:
        book = await journal.Journal.open(db)
        first = restart("solo-a", "u1", T0 + timedelta(minutes=10))
        gang = restart("rank-0", "u2", T0 + timedelta(minutes=5), ActionKind.RESTART_GANG)
        assert await book.defer_restart(first, fault_id=7)
        assert await book.defer_restart(gang, fault_id=None)
        later = restart("solo-a", "u1", T0 + timedelta(minutes=20))
        assert not await book.defer_restart(later, fault_id=8), "the pod has one waiting: that one stands"

        waiting = await book.deferred_restarts()
        assert [(w.action, w.fault_id) for w in waiting] == [(gang, None), (first, 7)], "soonest first"

        assert not await book.claim_restart(restart("solo-a", "other-uid", T0)), "another pod's restart"
        assert await book.claim_restart(first)
        assert not await book.claim_restart(first), "claimed once: a second runner finds it gone"
        assert [w.action for w in await book.deferred_restarts()] == [gang]
        await db.close()
        # Durable: what is waiting is there for whoever opens the journal next.
        db = await inbox.connect(tmp_path / "j.db")
        book = await journal.Journal.open(db)
        assert [w.action for w in await book.deferred_restarts()] == [gang]
    finally:
        await db.close()
