"""Verify before release: the Job run on a remediated node, and what its outcome means for the node.

A node whose remediator reported done is `verifying`. With `verification.enabled`, it is released only
after a verification Job (`rules/verification-job.yaml`: DCGM's diagnostic by default) succeeded on it;
each failed Job (it failed, or its deadline passed) counts, and `max_failures` of them in a row hand the
node to the `replace` remediator, as a remediation that timed out is (`reconciling.remediation_step`).
After a success, `reconciling.release_step` still waits for the GPUs to report healthy for the healthy
delay.

Everything this counts lives on the node (`footprint.VERIFICATION_*`: the Job's name, when it was asked
for, the failures so far) or in the Job itself, so a new leader reads the same Job and the same count.
Pure: the node, its Job as read (or None), the policy and `now` in; a decision, or a manifest, out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from string import Template
from typing import Any

from app.config import rules
from app.decide import footprint, handoffs
from app.domain import FaultClass, JobRun, NodeState, RemediationParams

NODE_LABEL = "sickbay.io/node"
ATTEMPT_LABEL = "sickbay.io/verification-attempt"
GPU_RESOURCE = "nvidia.com/gpu"
# Past its deadline by this much and still not failed, a Job counts as failed anyway: Kubernetes' Job
# controller enforces activeDeadlineSeconds, and a Job it never ends must not hold the node forever.
OVERDUE_GRACE = timedelta(minutes=1)
# The cordon's taint (the node controller adds it to an unschedulable node): a pod that does not tolerate
# it is never scheduled on the cordoned node it is meant to test.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


# What `sickbay.io/verified` says when a partial drain skipped the Job (`_verification_step`).
PARTIAL_DRAIN_SKIP = "skipped: partial drain"


@dataclass(frozen=True, slots=True)
class Start:
    """Mark the node with a new Job `name` (attempt `attempt`, `failures` failed so far), then create it."""

    name: str
    attempt: int
    failures: int
    why: str


@dataclass(frozen=True, slots=True)
class Create:
    """The node names Job `name` but it is not there (a create lost, or removed): create it."""

    name: str
    attempt: int
    why: str


@dataclass(frozen=True, slots=True)
class Passed:
    """Mark the node verified by Job `name`; the healthy delay follows."""

    name: str
    why: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    """`failures` Jobs failed: hand the node to `remediation` (replace), or, None, hold it for a human."""

    failures: int
    why: str
    remediation: RemediationParams | None


@dataclass(frozen=True, slots=True)
class Wait:
    why: str
    until: datetime | None = None


def verified(node: NodeState) -> bool:
    return bool(node.annotation(footprint.VERIFIED))


def failures_of(node: NodeState) -> int:
    raw = node.annotation(footprint.VERIFICATION_FAILURES) or "0"
    return int(raw) if raw.isdigit() else 0


def job_name(node: str, *, attempt: int, now: datetime) -> str:
    """A DNS label (63 at most, as the `job-name` label of its pods must be) naming the node, the attempt
    and when it was asked for: a later verification of the same node never meets an older finished Job."""
    base = re.sub(r"[^a-z0-9-]", "-", node.lower())[:36].strip("-") or "node"
    return f"verify-{base}-{attempt}-{int(now.timestamp()):x}"


def verification_step(
    node: NodeState,
    job: JobRun | None,
    *,
    unhealthy: str | None,
    policy: rules.Policy,
    now: datetime,
) -> Start | Create | Passed | GiveUp | Wait:
    """What the verification of a `verifying` node needs next, from its marks and its Job as read.

    `unhealthy`: why its GPUs do not report healthy (`reconciling.health_problem`), or None. A new Job
    starts only on a healthy node: right after a reboot the device plugin may not yet advertise every
    GPU, and a Job asking for all of them would fail its admission and count as a failed verification.
    """
    step = _verification_step(node, job, policy=policy, now=now)
    if isinstance(step, Start) and unhealthy is not None:
        return Wait(why=f"verification {step.attempt} waits for the GPUs to report healthy: {unhealthy}")
    return step


def _verification_step(
    node: NodeState, job: JobRun | None, *, policy: rules.Policy, now: datetime
) -> Start | Create | Passed | GiveUp | Wait:
    settings = policy.verification
    if node.annotation(footprint.VERIFICATION_GAVE_UP):
        return Wait(
            why=f"verification gave up ({node.annotation(footprint.VERIFICATION_GAVE_UP)}); waits for a human"
        )
    failures = failures_of(node)
    name = node.annotation(footprint.VERIFICATION_JOB)
    if not name and footprint.partially_drained(node):
        # A partial drain kept the node's other work on its GPUs: a Job asking for all of them cannot be
        # admitted (the kubelet refuses it: a failed verification), and a DCGM diagnostic beside live
        # training would compete with it. The reset GPU is judged by the healthy delay alone.
        return Passed(
            name=PARTIAL_DRAIN_SKIP,
            why="verification skipped: a partial drain kept the node's other work, and a DCGM diagnostic "
            "needs the node's GPUs to itself; release follows the healthy delay",
        )
    if not name:
        return Start(
            name=job_name(node.name, attempt=failures + 1, now=now),
            attempt=failures + 1,
            failures=failures,
            why=f"remediation done: verification {failures + 1} of at most {settings.max_failures}",
        )
    if job is None:
        return Create(name=name, attempt=failures + 1, why=f"verification Job {name} is not there")
    if job.succeeded:
        return Passed(name=name, why=f"verification Job {name} succeeded")
    started = footprint.time_of(node, footprint.VERIFICATION_STARTED_AT)
    overdue = (started or now) + settings.deadline + OVERDUE_GRACE
    if job.succeeded is None and now <= overdue:
        return Wait(why=f"verification Job {name} runs", until=overdue)
    how = (
        f"{job.reason or 'Failed'}: {job.message}"
        if job.succeeded is False
        else "not finished past its deadline"
    )
    failures += 1
    if failures < settings.max_failures:
        return Start(
            name=job_name(node.name, attempt=failures + 1, now=now),
            attempt=failures + 1,
            failures=failures,
            why=f"verification Job {name} failed ({how}); verification {failures + 1} of at most "
            f"{settings.max_failures}",
        )
    why = f"{failures} verification(s) failed, the last {name} ({how})"
    if node.annotation(footprint.REMEDIATION_REQUESTED) == FaultClass.REPLACE:
        return GiveUp(failures=failures, why=f"{why}; replacement was asked already", remediation=None)
    return GiveUp(
        failures=failures,
        why=f"{why}; escalating to replace",
        remediation=handoffs.remediation_for(FaultClass.REPLACE, policy),
    )


def render(
    template: Mapping[str, Any], *, node: NodeState, name: str, attempt: int, policy: rules.Policy
) -> dict[str, Any]:
    """The verification Job for `node` from the parsed template (`fill_level` first): pinned to the node by
    `spec.nodeName` (no scheduler in between, so the cordon cannot keep it off), tolerating Sickbay's taints and the cordon,
    asking for all the node's GPUs so nothing else shares them, run once (restartPolicy Never, backoffLimit
    0) within the deadline, deleted by Kubernetes `keep_finished` after it ends."""
    settings = policy.verification
    job: dict[str, Any] = copy.deepcopy(dict(template))
    job["apiVersion"], job["kind"] = "batch/v1", "Job"
    labels = {NODE_LABEL: node.name, ATTEMPT_LABEL: str(attempt)}
    meta = job.setdefault("metadata", {})
    meta.update(name=name, namespace=settings.namespace)
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    spec = job.setdefault("spec", {})
    spec.update(
        backoffLimit=0,
        activeDeadlineSeconds=max(1, int(settings.deadline.total_seconds())),
        ttlSecondsAfterFinished=int(settings.keep_finished.total_seconds()),
    )
    pod = spec.setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
    pod_spec = pod.setdefault("spec", {})
    pod_spec.update(nodeName=node.name, restartPolicy="Never")
    ours = [
        {"key": footprint.UNHEALTHY, "operator": "Exists"},
        {"key": footprint.AT_RISK, "operator": "Exists"},
        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]
    pod_spec["tolerations"] = [*(pod_spec.get("tolerations") or []), *ours]
    containers = pod_spec.get("containers") or []
    if not containers:
        raise ValueError("the verification template has no container")
    if node.gpu_capacity > 0:
        resources = containers[0].setdefault("resources", {})
        for kind in ("requests", "limits"):
            resources.setdefault(kind, {})[GPU_RESOURCE] = str(node.gpu_capacity)
    return job


def fill_level(text: str, policy: rules.Policy) -> str:
    """The template text with `$level` (the DCGM suite level) filled in."""
    return Template(text).safe_substitute(level=str(policy.verification.level))
