"""What `app.service.observing.situation_of` reads for a fault: the journal's history and the cluster's node
and pods at once (each row of a storm then waits for the slower of them, not both in turn), and a
cluster read that fails still leaves the history to plan with."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.domain import Fault, FaultClass, NodeState, PastFault, PodState, Signal, SignalSource, SignalStatus
from app.kube import errors
from app.service import observing

POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
NOW = datetime.now(UTC).replace(microsecond=0)
PAST = PastFault(
    at=NOW - timedelta(minutes=5),
    fault_class=FaultClass.RESTART_WORKLOAD,
    gpu=1,
    xid=13,
    workload="pod:training/job-0",
    fingerprint="f0",
)
POD = PodState(namespace="training", name="job-0", uid="u1", node="n1", gpu_request=1)


def fault() -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f1",
        status=SignalStatus.FIRING,
        name="GpuXid",
        starts_at=NOW,
        received_at=NOW,
        node="n1",
        gpu=1,
        xid=13,
    )
    return Fault(FaultClass.RESTART_WORKLOAD, signal, "application XID", "xid")


class Both:
    """A journal and a cluster that each answer only once the other has been asked: reads made one after
    the other never finish."""

    def __init__(self, *, cluster_error: Exception | None = None) -> None:
        self.journal_asked = asyncio.Event()
        self.cluster_asked = asyncio.Event()
        self.cluster_error = cluster_error

    async def history(self, *, node: str, since: datetime) -> list[PastFault]:
        self.journal_asked.set()
        await self.cluster_asked.wait()
        return [PAST]

    async def quarantine_times(self, *, node: str, since: datetime) -> list[datetime]:
        return []

    async def get_node(self, name: str) -> NodeState:
        self.cluster_asked.set()
        await self.journal_asked.wait()
        if self.cluster_error is not None:
            raise self.cluster_error
        return NodeState(name=name)

    async def list_pods(self, *, node: str | None = None, **_: Any) -> list[PodState]:
        return [POD]


async def _situation(both: Both) -> Any:
    return await asyncio.wait_for(
        observing.situation_of(fault(), kube=both, journal=both, policy=POLICY, now=NOW),  # type: ignore[arg-type]
        timeout=5,
    )


async def test_the_journal_and_the_cluster_are_read_at_once() -> None:
    found = await _situation(Both())
    assert found.history == (PAST,)
    assert found.node == NodeState(name="n1")
    assert found.pods_on_node == (POD,)


@pytest.mark.parametrize("error", [errors.NotFoundError("gone"), errors.KubeError("unreachable")])
async def test_a_failed_cluster_read_still_plans_with_the_history(error: Exception) -> None:
    found = await _situation(Both(cluster_error=error))
    assert found.node is None
    assert found.history == (PAST,)
