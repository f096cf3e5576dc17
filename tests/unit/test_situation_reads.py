"""What planning a fault needs read (`situation.reads_for`), and which gangs' pods (`groups.gangs_among`).

Pure: table-driven over (fault, policy, now); the reader in `act` only reads what these say.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import groups, situation
from app.decide.situation import Reads
from app.domain import (
    Fault,
    FaultClass,
    OwnerRef,
    PodState,
    Signal,
    SignalSource,
    SignalStatus,
    freeze_mapping,
)

NOW = datetime.now(UTC)
WINDOW = timedelta(hours=6)
POLICY = rules.Policy(version=1, escalation=rules.EscalationPolicy(window=WINDOW))
ESCALATING = POLICY.model_copy(update={"transient": rules.TransientPolicy(escalate_to="reset-gpu")})
WEEK = NOW - timedelta(days=7)


def fault(cls: FaultClass, *, node: str | None = "n1", status: SignalStatus = SignalStatus.FIRING) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f",
        status=status,
        name="A",
        starts_at=NOW - timedelta(minutes=3),
        received_at=NOW,
        node=node,
        gpu=0,
    )
    return Fault(fault_class=cls, signal=signal, reason="because", rule="test")


@pytest.mark.parametrize(
    ("the_fault", "policy", "reads"),
    [
        # Hardware: the node, its pods and their gangs, and the week of quarantines for the attempt cap.
        (fault(FaultClass.RESET_GPU), POLICY, Reads(quarantines_since=WEEK, cluster=True, gangs=True)),
        (fault(FaultClass.REBOOT_NODE), POLICY, Reads(quarantines_since=WEEK, cluster=True, gangs=True)),
        (fault(FaultClass.REPLACE), POLICY, Reads(quarantines_since=WEEK, cluster=True, gangs=True)),
        # An application error: the pod to restart, and the escalation window's history.
        (fault(FaultClass.RESTART_WORKLOAD), POLICY, Reads(history_since=NOW - WINDOW, cluster=True)),
        # A soft signal that cannot escalate: its history only, never the cluster (a storm of them must
        # not spend the API budget); one that can escalate to hardware reads the cluster too.
        (fault(FaultClass.TRANSIENT), POLICY, Reads(history_since=NOW - WINDOW)),
        (fault(FaultClass.TRANSIENT), ESCALATING, Reads(history_since=NOW - WINDOW, cluster=True)),
        # A predicted risk: the node and the fleet its proactive budget is measured against.
        (fault(FaultClass.AT_RISK), POLICY, Reads(cluster=True, proactive_fleet=True)),
        (fault(FaultClass.DRIVER_MISMATCH), POLICY, Reads(cluster=True)),
        # No node: nothing to read about it.
        (fault(FaultClass.RESET_GPU, node=None), POLICY, Reads()),
        (fault(FaultClass.TRANSIENT, node=None), POLICY, Reads()),
    ],
)
def test_reads_for(the_fault: Fault, policy: rules.Policy, reads: Reads) -> None:
    assert situation.reads_for(the_fault, policy=policy, now=NOW) == reads


def test_the_history_window_follows_the_policy_and_now() -> None:
    later = NOW + timedelta(hours=1)
    wide = POLICY.model_copy(update={"escalation": rules.EscalationPolicy(window=timedelta(days=2))})
    reads = situation.reads_for(fault(FaultClass.RESTART_WORKLOAD), policy=wide, now=later)
    assert reads.history_since == later - timedelta(days=2)
    hardware = situation.reads_for(fault(FaultClass.RESET_GPU), policy=wide, now=later)
    assert hardware.quarantines_since == later - timedelta(days=7)


def test_a_risk_that_went_away_needs_no_fleet() -> None:
    gone = fault(FaultClass.AT_RISK, status=SignalStatus.RESOLVED)
    assert situation.reads_for(gone, policy=POLICY, now=NOW) == Reads(cluster=True)


JOBSET = "jobset.sigs.k8s.io/jobset-name"
GANGS = rules.WorkloadPolicy(group_policy={"jobset": "restart-gang", "job": "requeue"})


def pod(name: str, *, labels: dict[str, str] | None = None, owner: str | None = None) -> PodState:
    owners = (OwnerRef(kind="ReplicaSet", name=owner, controller=True),) if owner else ()
    return PodState(
        namespace="train", name=name, uid=f"uid-{name}", labels=freeze_mapping(labels or {}), owners=owners
    )


@pytest.mark.parametrize(
    ("pods", "policy", "keys"),
    [
        # Two ranks of one restart-gang JobSet: listed once.
        ([pod("a", labels={JOBSET: "llm"}), pod("b", labels={JOBSET: "llm"})], GANGS, ["jobset:train/llm"]),
        # Two gangs, in the order first met.
        (
            [pod("a", labels={JOBSET: "y"}), pod("b", labels={JOBSET: "x"}), pod("c", labels={JOBSET: "y"})],
            GANGS,
            ["jobset:train/y", "jobset:train/x"],
        ),
        # A group whose policy is not restart-gang, or one found only by its owner (no label to list it
        # by), or a pod of no group: nothing to list.
        ([pod("a", labels={"batch.kubernetes.io/job-name": "j"})], GANGS, []),
        ([pod("a", owner="web")], rules.WorkloadPolicy(group_policy={"replicaset": "restart-gang"}), []),
        ([pod("a")], GANGS, []),
        # The default policy counts too.
        ([pod("a", labels={JOBSET: "llm"})], rules.WorkloadPolicy(), []),
        (
            [pod("a", labels={JOBSET: "llm"})],
            rules.WorkloadPolicy(default_policy="restart-gang"),
            ["jobset:train/llm"],
        ),
    ],
)
def test_gangs_among(pods: list[PodState], policy: rules.WorkloadPolicy, keys: list[str]) -> None:
    found = groups.gangs_among(pods, policy)
    assert [g.key for g in found] == keys
    assert all(g.label for g in found)
