"""Whether a drain emptied its node, and when a node whose drain failed is tried again.

Evictions accepted are not pods gone: a pod evicted or deleted stays Terminating for its grace period
while it checkpoints, and a reset or reboot requested then kills it mid-write. So the hardware track hands
a node to its remediator only when `settle` finds nothing left: every pod the drain covered was deleted
for real, or was never there. A pod whose eviction failed for good, one a PodDisruptionBudget held past
the deadline (`on_deadline: leave`) and one still Terminating past its wait all leave the node
`drain-failed`: quarantined, visible, and not handed off.

Pure: outcomes and observations in, a verdict out; `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.config import rules
from app.decide import footprint
from app.domain import NodeState, Outcome, OutcomeStatus, PodRef, RemediationState

_SHOWN = 3  # pods named in a summary; the rest are counted


class LeftBecause(StrEnum):
    """Why a pod is still on the node after its drain (a metric label, so a closed set)."""

    EVICTION_FAILED = "eviction-failed"  # 403, 400 (a webhook), 5xx after the client's retries, ...
    BLOCKED = "blocked"  # a PodDisruptionBudget refused it until the deadline, and policy said leave
    TERMINATING = "terminating"  # accepted, but the pod was still there when its wait ended


@dataclass(frozen=True, slots=True)
class PodLeft:
    pod: PodRef
    because: LeftBecause
    detail: str

    def __str__(self) -> str:
        return f"{self.pod} ({self.because.value}: {self.detail})"


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one drain of `node` did (one outcome per pod it covered), which pods it could not move, and
    `problem` when it could not even find out which pods to move."""

    node: str
    outcomes: tuple[Outcome, ...] = ()
    left: tuple[PodLeft, ...] = ()
    problem: str = ""

    @property
    def drained(self) -> bool:
        return not self.left and not self.problem

    @property
    def reasons(self) -> frozenset[str]:
        """Why it failed, as metric label values (empty when drained)."""
        found = {p.because.value for p in self.left}
        return frozenset(found | {"unlisted"} if self.problem else found)

    def summary(self) -> str:
        """One line, for the node's annotation and condition and the Event."""
        if self.problem:
            return self.problem
        if not self.left:
            return f"all {len(self.outcomes)} pod(s) gone"
        shown = "; ".join(str(p) for p in self.left[:_SHOWN])
        more = f"; and {len(self.left) - _SHOWN} more" if len(self.left) > _SHOWN else ""
        return f"{len(self.left)} of {len(self.outcomes)} pod(s) still on the node: {shown}{more}"


def settle(node: str, outcomes: Sequence[Outcome], *, lingering: Mapping[PodRef, str]) -> DrainResult:
    """The verdict on a drain, from each pod's eviction outcome and the accepted pods still present.

    `lingering` maps each pod whose eviction (or deletion) was accepted but which was still there when its
    wait ended to what was seen. Dry-run and skipped outcomes leave nothing behind: a dry run moves nothing
    and hands off nothing for real, and a skipped pod was already gone or being moved.
    """
    left: list[PodLeft] = []
    for outcome in outcomes:
        pod = outcome.action.pod
        if pod is None:
            continue
        if outcome.status is OutcomeStatus.FAILED:
            left.append(PodLeft(pod, LeftBecause.EVICTION_FAILED, outcome.detail))
        elif outcome.status is OutcomeStatus.BLOCKED:
            left.append(PodLeft(pod, LeftBecause.BLOCKED, outcome.detail))
        elif pod in lingering:
            left.append(PodLeft(pod, LeftBecause.TERMINATING, lingering[pod]))
    return DrainResult(node=node, outcomes=tuple(outcomes), left=tuple(left))


def retry_due(node: NodeState, policy: rules.DrainPolicy, *, now: datetime) -> bool:
    """True when a `drain-failed` node's drain should run again (its last try is `retry_after` old)."""
    if node.state is not RemediationState.DRAIN_FAILED or policy.retry_after is None:
        return False
    last = footprint.time_of(node, footprint.DRAIN_FAILED_AT)
    if last is None:
        return True  # the time of the last try was lost or garbled: try now rather than never
    return now - last >= policy.retry_after
