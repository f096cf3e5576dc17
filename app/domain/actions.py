"""What is decided and what came of it: actions with their typed parameters, plans, outcomes.
Standard library only (see `app.domain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal, TypeVar

from app.domain.cluster import OwnerRef
from app.domain.faults import Fault, FaultClass, PodRef, RiskLevel


class Track(StrEnum):
    WORKLOAD = "workload"
    HARDWARE = "hardware"
    RECORD = "record"


class ActionKind(StrEnum):
    RECORD = "record"
    RESTART_POD = "restart-pod"
    EVICT_POD = "evict-pod"
    RESTART_GANG = "restart-gang"
    QUARANTINE = "quarantine"
    DRAIN = "drain"
    REQUEST_REMEDIATION = "request-remediation"
    TAINT_AT_RISK = "taint-at-risk"
    CLEAR_AT_RISK = "clear-at-risk"
    REQUEST_CHECKPOINT = "request-checkpoint"
    # Transient signals: look again later while it fires; make a lasting one visible on the node.
    RECHECK = "recheck"
    RAISE_CONDITION = "raise-condition"
    CLEAR_CONDITION = "clear-condition"
    # A Kueue-managed job: send it back through its queue (deactivate its Workload, then reactivate it).
    REQUEUE_WORKLOAD = "requeue-workload"


# What each kind of action needs, one frozen value per kind (`Action.params`); kinds absent take none.
@dataclass(frozen=True, slots=True)
class QuarantineParams:
    fault_class: FaultClass  # the taint's value and the fault annotation's class
    cordon: bool = True  # False: taint only (a driver mismatch), running work stays


@dataclass(frozen=True, slots=True)
class RestartParams:
    uid: str  # the pod decide confirmed: a namesake that replaced it since is not deleted


# How a remediator is asked: not at all (a human), an annotation, a custom resource, a webhook.
RemediatorKind = Literal["none", "annotate", "custom-resource", "webhook"]


@dataclass(frozen=True, slots=True)
class RemediationParams:
    """Hand the node to the remediator decide chose for `remediation`; act asks it, it chooses nothing."""

    remediation: FaultClass  # what is asked for: reset-gpu, reboot-node or replace
    remediator: RemediatorKind = "none"
    template: str | None = None  # custom-resource: the YAML of the object to create
    url: str | None = None  # webhook: where the request is posted


@dataclass(frozen=True, slots=True)
class AtRiskParams:
    level: RiskLevel
    held: str = ""  # why decide held it at warn when act was asked for (the proactive budget)


@dataclass(frozen=True, slots=True)
class CheckpointParams:
    """Ask the pod (`Action.pod`, of this uid) to checkpoint, or its controller `owner` in `namespace`."""

    uid: str = ""
    owner: OwnerRef | None = None
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class RecheckParams:
    check: int  # which re-check of the signal this is, from 1


@dataclass(frozen=True, slots=True)
class ConditionParams:
    condition: str  # the node condition's type
    reason: str = ""  # its reason when raised


@dataclass(frozen=True, slots=True)
class RequeueParams:
    """Requeue through Kueue the job `owner` (in `namespace`, queued in `queue`): act finds its Workload
    by the `kueue.x-k8s.io/job-uid` label (the owner's UID) and deactivates, then reactivates it."""

    owner: OwnerRef
    namespace: str
    queue: str = ""


ActionParams = (
    QuarantineParams
    | RestartParams
    | RemediationParams
    | AtRiskParams
    | CheckpointParams
    | RecheckParams
    | ConditionParams
    | RequeueParams
)
_P = TypeVar("_P", bound=ActionParams)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    track: Track
    reason: str
    node: str | None = None
    pod: PodRef | None = None
    params: ActionParams | None = None
    not_before: datetime | None = None

    def __post_init__(self) -> None:
        wanted = PARAMS.get(self.kind)
        if not (isinstance(self.params, wanted) if wanted else self.params is None):
            needs = wanted.__name__ if wanted else "no parameters"
            raise TypeError(f"{self.kind.value} actions take {needs}, not {self.params!r}")

    def params_as(self, kind: type[_P]) -> _P:
        """The parameters, as the type this action's kind takes (checked when it was made)."""
        if not isinstance(self.params, kind):
            raise TypeError(f"this {self.kind.value} action carries {self.params!r}, not {kind.__name__}")
        return self.params


PARAMS: dict[ActionKind, type[ActionParams]] = {
    ActionKind.QUARANTINE: QuarantineParams,
    ActionKind.RESTART_POD: RestartParams,
    ActionKind.RESTART_GANG: RestartParams,
    ActionKind.REQUEST_REMEDIATION: RemediationParams,
    ActionKind.TAINT_AT_RISK: AtRiskParams,
    ActionKind.REQUEST_CHECKPOINT: CheckpointParams,
    ActionKind.RECHECK: RecheckParams,
    ActionKind.RAISE_CONDITION: ConditionParams,
    ActionKind.CLEAR_CONDITION: ConditionParams,
    ActionKind.REQUEUE_WORKLOAD: RequeueParams,
}


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do about one fault, as two independent tracks; built by `decide`, carried out by `act`."""

    fault: Fault
    decided_at: datetime
    summary: str
    actions: tuple[Action, ...] = ()
    # The workload the fault is attributed to (a group key such as `jobset:ns/name`, or `pod:ns/name`):
    # journaled, so that "the fault follows the GPU" can count distinct workloads later.
    workload: str | None = None
    # A plan made in shadow (the proactive ladder before its model is validated on this fleet): the actions
    # it would have taken. Journaled so an operator can see them; never executed.
    shadowed: tuple[Action, ...] = ()

    @classmethod
    def record_only(
        cls,
        fault: Fault,
        now: datetime,
        summary: str,
        *,
        workload: str | None = None,
        shadowed: tuple[Action, ...] = (),
    ) -> Plan:
        """A plan that acts on nothing: the fault is journaled with why (and what it would have done)."""
        record = Action(kind=ActionKind.RECORD, track=Track.RECORD, node=fault.node, reason=fault.reason)
        return cls(
            fault=fault,
            decided_at=now,
            summary=summary,
            actions=(record,),
            workload=workload,
            shadowed=shadowed,
        )

    def track(self, track: Track) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.track is track)

    @property
    def is_noop(self) -> bool:
        return all(a.kind is ActionKind.RECORD for a in self.actions)


class OutcomeStatus(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry-run"
    SKIPPED = "skipped"
    BLOCKED = "blocked"
    FAILED = "failed"
    RECORDED = "recorded"


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    status: OutcomeStatus
    detail: str
    at: datetime
    attempts: int = 1
