"""The drain deadline: what an eviction a budget refused does next, and how long a moved pod is waited for.

A 429 from the Eviction API means "not now" (a PodDisruptionBudget, or the API server's own throttling):
the eviction is tried again with backoff until the drain deadline, `drain.deadline` after the drain
started (the node's `sickbay.io/draining-since`, so a drain a new leader resumes keeps the old one's
deadline); a refusal at or past it follows `drain.on_deadline` (delete the pod, or leave it in place). An
accepted eviction only marks the pod for deletion, so its pod is then waited for until the later of the
drain deadline and its own grace period (plus the kubelet's slack): a `delete` after the deadline still
waits for the deletion it asked for.

`act.drain` keeps the time (on the event loop's clock: monotonic, and fast-forwarded in tests), sleeps,
calls the API and reports; every comparison with the deadline is here. `time_left` turns the observed
start (wall clock) into seconds; the rest are seconds on that one monotonic clock, passed in; nothing here
reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app import backoff
from app.config import rules
from app.decide import footprint
from app.domain import NodeState

# After a budget's 429: 1 s, 2 s, … up to 30 s between tries, until the drain deadline.
EVICTION_RETRY = backoff.Backoff(base=1.0, cap=30.0)
# After its grace period a pod's containers are killed; the kubelet's final delete follows within its
# status sync. A pod still there this long after that is stuck (a dead kubelet, a finalizer).
KUBELET_SLACK_S = 15.0


@dataclass(frozen=True, slots=True)
class RetryIn:
    """Try the eviction again after `seconds`; `left` is how long remains before the deadline (for the log)."""

    seconds: float
    left: float


@dataclass(frozen=True, slots=True)
class DeleteAtDeadline:
    """The deadline passed with the eviction still refused, and policy says delete the pod (no budget asked)."""


@dataclass(frozen=True, slots=True)
class LeaveAtDeadline:
    """The deadline passed with the eviction still refused, and policy says leave the pod where it is."""


AfterRefusal = RetryIn | DeleteAtDeadline | LeaveAtDeadline


def time_left(node: NodeState | None, policy: rules.DrainPolicy, *, now: datetime) -> float:
    """Seconds from `now` until the deadline of the drain on `node` (negative once it passed).

    It counts from the node's `sickbay.io/draining-since`, written when the drain started by whichever
    replica led then, so a drain a new leader resumes ends when the first one's would have. A drain with
    no readable start (one that marks no state, a dry run, a node that could not be marked) starts now.
    """
    started = footprint.time_of(node, footprint.DRAINING_SINCE) if node is not None else None
    return ((started or now) + policy.deadline - now).total_seconds()


def after_refusal(*, attempt: int, deadline: float, policy: rules.DrainPolicy, now: float) -> AfterRefusal:
    """What to do after try number `attempt` (1 = the first) of an eviction was refused at `now`.

    Before the deadline: wait by the backoff, but never past the deadline, so the last try lands on it.
    A server's Retry-After does not change the wait: the backoff alone paces the tries.
    """
    left = deadline - now
    if left <= 0:
        return DeleteAtDeadline() if policy.on_deadline == "delete" else LeaveAtDeadline()
    return RetryIn(seconds=min(EVICTION_RETRY.delay(attempt), left), left=left)


def departure_wait_until(*, deadline: float, grace_period_s: float, now: float) -> float:
    """Until when a pod whose eviction (or deletion) was accepted at `now` is waited for to be gone.

    Its kubelet has the grace period to stop it, even past the drain deadline; and every moved pod is
    waited for at least until the deadline.
    """
    return max(deadline, now + grace_period_s + KUBELET_SLACK_S)
