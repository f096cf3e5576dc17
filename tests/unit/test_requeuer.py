"""`act.requeue` against a fake queue port: what it writes and reports when Kueue does not answer as hoped
(no Workload resource at all, a quota never released, a write that raced Kueue's)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

from app.act.recorder import Recorder
from app.act.requeue import Requeuer
from app.domain import (
    Action,
    ActionKind,
    Condition,
    OutcomeStatus,
    OwnerRef,
    RequeueParams,
    Track,
    WorkloadState,
)
from app.kube import errors
from app.obs.metrics import create_metrics

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
JOB = OwnerRef(kind="Job", name="llm", uid="uid-llm", api_version="batch/v1")
ACTION = Action(
    kind=ActionKind.REQUEUE_WORKLOAD,
    track=Track.WORKLOAD,
    node="n1",
    reason="r",
    params=RequeueParams(JOB, namespace="train", queue="team-a"),
)
ADMITTED = WorkloadState(
    "train",
    "job-llm",
    resource_version="1",
    conditions=(Condition("QuotaReserved", "True"), Condition("Admitted", "True")),
)


class Queue:
    """Kueue that evicts at once but keeps the quota (an integration that never stops the job)."""

    def __init__(self, *, served: bool = True, conflicts: int = 0) -> None:
        self.served = served
        self.conflicts = conflicts
        self.workload = ADMITTED
        self.writes: list[tuple[bool, str | None]] = []
        self.lists = 0

    async def list_workloads(self, namespace: str, *, job_uid: str) -> list[WorkloadState]:
        return [self.workload] if job_uid == JOB.uid else []

    async def list_requeued_workloads(self) -> list[WorkloadState]:
        self.lists += 1
        if not self.served:
            raise errors.NotFoundError("the server could not find the requested resource")
        return []

    async def get_workload(self, namespace: str, name: str) -> WorkloadState:
        return self.workload

    async def set_workload_active(
        self, workload: WorkloadState, *, active: bool, requeued_from: str | None
    ) -> WorkloadState:
        if self.conflicts:
            self.conflicts -= 1
            raise errors.ConflictError("the object has been modified")
        self.writes.append((active, requeued_from))
        evicted = Condition("Evicted", "True", reason="Deactivated")
        self.workload = replace(
            workload,
            active=active,
            requeued_from=requeued_from or "",
            conditions=(*workload.conditions, evicted),
        )
        return self.workload


class Sleeps:
    def __init__(self) -> None:
        self.slept = 0.0

    async def __call__(self, seconds: float) -> None:
        self.slept += seconds
        await asyncio.sleep(0)


def requeuer(queue: Queue, sleep: Sleeps, *, wait_s: float = 5.0) -> Requeuer:
    recorder = Recorder(kube=None, metrics=create_metrics(), clock=lambda: T0, events=False)  # type: ignore[arg-type]
    return Requeuer(
        queue=queue,
        recorder=recorder,
        journal=None,
        dry_run=False,
        poll_s=1.0,
        wait_s=wait_s,
        sleep=sleep,  # type: ignore[arg-type]
    )


async def test_a_quota_never_released_is_reported_and_left_to_reconciliation() -> None:
    queue, sleep = Queue(), Sleeps()
    outcome = await requeuer(queue, sleep, wait_s=0.0).requeue(ACTION)
    assert outcome.status is OutcomeStatus.FAILED
    assert "still holds its quota" in outcome.detail
    assert queue.writes == [(False, "n1")]  # deactivated once, never reactivated while the quota is held


async def test_a_write_that_raced_kueue_is_read_again_and_retried() -> None:
    queue, sleep = Queue(conflicts=1), Sleeps()
    outcome = await requeuer(queue, sleep, wait_s=0.0).requeue(ACTION)
    assert queue.writes == [(False, "n1")]
    assert outcome.status is OutcomeStatus.FAILED  # then waits on the quota, as above


async def test_a_cluster_without_kueue_is_asked_once() -> None:
    queue, sleep = Queue(served=False), Sleeps()
    made = requeuer(queue, sleep)
    assert await made.resume() == 0
    assert await made.resume() == 0
    assert queue.lists == 1


async def test_a_job_without_a_workload_is_skipped() -> None:
    queue, sleep = Queue(), Sleeps()
    other = replace(ACTION, params=RequeueParams(replace(JOB, uid="uid-other"), namespace="train"))
    outcome = await requeuer(queue, sleep).requeue(other)
    assert outcome.status is OutcomeStatus.SKIPPED
    assert queue.writes == []
