"""Transient faults: restart with capped exponential backoff, and notice when a fault follows the GPU.

An application XID on a GPU says little by itself: most are the job's own bug. It becomes evidence
against the hardware when the same GPU faults under different workloads, or keeps faulting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.config import rules
from app.domain import FaultClass, PastFault

RETRY_CLASSES = frozenset({FaultClass.RESTART_WORKLOAD, FaultClass.TRANSIENT})


@dataclass(frozen=True, slots=True)
class Escalation:
    escalate: bool
    reason: str


def backoff(attempt: int, policy: rules.RetryPolicy) -> timedelta:
    """Delay before restart number `attempt` (1-based): initial · factor^(attempt-2), capped; none for the first."""
    if attempt <= 1:
        return timedelta(0)
    return timedelta(seconds=policy.waits.delay(attempt - 1))


def restart_wait(not_before: datetime | None, *, now: datetime) -> float:
    """Seconds from `now` until a restart decided for `not_before` is due; 0 once it is (or when it
    carries no time: restart now). Act defers a restart by this much, and runs a deferred one at 0."""
    if not_before is None:
        return 0.0
    return max(0.0, (not_before - now).total_seconds())


def prior_on_gpu(history: tuple[PastFault, ...], *, gpu: int | None, fingerprint: str) -> list[PastFault]:
    return [
        h for h in history if h.gpu == gpu and h.fault_class in RETRY_CLASSES and h.fingerprint != fingerprint
    ]


def follows_the_gpu(
    history: tuple[PastFault, ...],
    *,
    gpu: int | None,
    workload: str | None,
    fingerprint: str,
    now: datetime,
    policy: rules.EscalationPolicy,
) -> Escalation:
    """Escalate when ≥ `distinct_workloads` workloads or ≥ `repeats` faults hit this GPU in the window."""
    if gpu is None:
        return Escalation(False, "no GPU on the signal, so it cannot follow one")
    recent = [
        h for h in prior_on_gpu(history, gpu=gpu, fingerprint=fingerprint) if now - h.at <= policy.window
    ]
    workloads = {h.workload for h in recent if h.workload} | ({workload} if workload else set())
    count = len(recent) + 1
    window = f"{policy.window.total_seconds() / 3600:g}h"
    if len(workloads) >= policy.distinct_workloads:
        names = ", ".join(sorted(workloads))
        return Escalation(
            True,
            f"the fault follows the GPU: GPU {gpu} faulted under {len(workloads)} different workloads within "
            f"{window} ({names})",
        )
    if count >= policy.repeats:
        return Escalation(
            True, f"GPU {gpu} faulted {count} times within {window} (threshold {policy.repeats})"
        )
    return Escalation(
        False, f"occurrence {count} on GPU {gpu} under {len(workloads) or 1} workload(s) in {window}"
    )


def restart_attempt(
    history: tuple[PastFault, ...],
    *,
    workload: str | None,
    fingerprint: str,
    now: datetime,
    window: timedelta,
) -> tuple[int, datetime | None]:
    """Which restart this would be for the workload, and when the previous one happened."""
    prior = sorted(
        (
            h
            for h in history
            if h.workload == workload
            and workload
            and h.fault_class in RETRY_CLASSES
            and h.fingerprint != fingerprint
            and now - h.at <= window
        ),
        key=lambda h: h.at,
    )
    return len(prior) + 1, (prior[-1].at if prior else None)
