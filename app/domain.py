"""The values that flow through Sickbay's loop: signal → fault → plan → outcome.

Everything here is a frozen dataclass or an enum built from the standard library only, so the pure core
(`classify`, `decide`, `predict.features`) can share these types without importing any I/O. Nothing in this
module may import another `app` module or a third-party package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal, TypeVar

Pairs = tuple[tuple[str, str], ...]


def freeze_mapping(mapping: Mapping[str, str] | None) -> Pairs:
    """Turn a mapping into sorted pairs, so frozen values stay hashable and compare by content."""
    return tuple(sorted((mapping or {}).items()))


def lookup(pairs: Pairs, key: str) -> str | None:
    for name, value in pairs:
        if name == key:
            return value
    return None


class FaultClass(StrEnum):
    IGNORE = "ignore"
    RESTART_WORKLOAD = "restart-workload"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"
    REPLACE = "replace"
    DEPENDS = "depends"
    TRANSIENT = "transient"
    DRIVER_MISMATCH = "driver-mismatch"
    AT_RISK = "at-risk"

    @property
    def is_hardware(self) -> bool:
        return self in HARDWARE_CLASSES


HARDWARE_CLASSES = frozenset({FaultClass.RESET_GPU, FaultClass.REBOOT_NODE, FaultClass.REPLACE})


class SignalSource(StrEnum):
    ALERTMANAGER = "alertmanager"
    AGENT = "agent"
    ALLOCATABLE = "allocatable"
    PREDICTION = "prediction"


class SignalStatus(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    container: str | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Signal:
    """One observation from outside: an alert, an agent event, a capacity drop, a risk score."""

    source: SignalSource
    fingerprint: str
    status: SignalStatus
    name: str
    starts_at: datetime
    received_at: datetime
    node: str | None = None
    gpu: int | None = None
    uuid: str | None = None
    xid: int | None = None
    pod: PodRef | None = None
    # Where `pod` came from: the label that named it (`exported_pod`, `pod_name`, `pod`), or `agent`.
    pod_label: str | None = None
    ends_at: datetime | None = None
    labels: Pairs = ()
    annotations: Pairs = ()

    def label(self, key: str) -> str | None:
        return lookup(self.labels, key)

    @property
    def firing(self) -> bool:
        return self.status is SignalStatus.FIRING


@dataclass(frozen=True, slots=True)
class Fault:
    """A signal after classification: what is wrong, where, and why we think so."""

    fault_class: FaultClass
    signal: Signal
    reason: str
    rule: str
    evidence: tuple[str, ...] = ()

    @property
    def node(self) -> str | None:
        return self.signal.node

    @property
    def gpu(self) -> int | None:
        return self.signal.gpu

    @property
    def xid(self) -> int | None:
        return self.signal.xid


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


class RemediationState(StrEnum):
    QUARANTINED = "quarantined"
    DRAINING = "draining"
    # The drain could not empty the node (an eviction failed for good, a budget or a stuck pod held it
    # past the deadline): quarantined, never handed off, until a later drain empties it or a human acts.
    DRAIN_FAILED = "drain-failed"
    REMEDIATING = "remediating"
    VERIFYING = "verifying"
    AT_RISK = "at-risk"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None


@dataclass(frozen=True, slots=True)
class NodeState:
    """What decide needs to know about a node, read from its Node object."""

    name: str
    resource_version: str = ""
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: Pairs = ()
    annotations: Pairs = ()
    conditions: tuple[Condition, ...] = ()
    gpu_capacity: int = 0
    gpu_allocatable: int = 0

    def label(self, key: str) -> str | None:
        return lookup(self.labels, key)

    def annotation(self, key: str) -> str | None:
        return lookup(self.annotations, key)

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def state(self) -> RemediationState | None:
        raw = lookup(self.labels, "sickbay.io/state")
        try:
            return RemediationState(raw) if raw else None
        except ValueError:
            return None

    @property
    def managed(self) -> bool:
        return lookup(self.labels, "sickbay.io/managed") != "false"

    @property
    def owned_by_sickbay(self) -> bool:
        return lookup(self.annotations, "sickbay.io/owned-by") is not None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str = ""
    controller: bool = False
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class PodState:
    """What decide needs to know about a pod: where it runs, who owns it, what group it belongs to."""

    namespace: str
    name: str
    uid: str = ""
    node: str | None = None
    phase: str = "Running"
    labels: Pairs = ()
    annotations: Pairs = ()
    owners: tuple[OwnerRef, ...] = ()
    gpu_request: int = 0
    resource_version: str = ""
    # metadata.deletionTimestamp is set: the pod is Terminating (its grace period runs), not yet gone.
    deleting: bool = False
    # spec.terminationGracePeriodSeconds: how long the kubelet lets it stop once deleted (the API default).
    grace_period_s: int = 30

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name)

    def label(self, key: str) -> str | None:
        return lookup(self.labels, key)

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), self.owners[0] if self.owners else None)

    @property
    def is_daemonset(self) -> bool:
        return any(o.kind == "DaemonSet" for o in self.owners)

    @property
    def is_mirror(self) -> bool:
        return lookup(self.annotations, "kubernetes.io/config.mirror") is not None

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodePatch:
    """The desired change to one Node, applied in one write guarded by the read `resourceVersion`.

    `None` leaves a field alone; an empty string value in `labels`/`annotations` removes the key;
    `taints`, when given, is the whole new list (taints have no merge key, so Kubernetes replaces it).
    """

    node: str
    resource_version: str
    labels: Pairs = ()
    annotations: Pairs = ()
    taints: tuple[Taint, ...] | None = None
    unschedulable: bool | None = None

    @property
    def empty(self) -> bool:
        return not self.labels and not self.annotations and self.taints is None and self.unschedulable is None


class RiskLevel(StrEnum):
    NONE = "none"
    WARN = "warn"
    ACT = "act"


@dataclass(frozen=True, slots=True)
class Risk:
    node: str
    score: float
    level: RiskLevel
    model_version: str
    at: datetime
    gpu: int | None = None
    drivers: tuple[tuple[str, float], ...] = ()


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


ActionParams = (
    QuarantineParams
    | RestartParams
    | RemediationParams
    | AtRiskParams
    | CheckpointParams
    | RecheckParams
    | ConditionParams
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


@dataclass(frozen=True, slots=True)
class PastFault:
    """One journaled fault on the same node, for escalation and backoff."""

    at: datetime
    fault_class: FaultClass
    gpu: int | None
    xid: int | None
    workload: str | None
    fingerprint: str
    name: str = ""  # the alert's name (`alertname`) or the agent event's kind
