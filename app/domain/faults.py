"""What is observed and what it means: signals, the faults they are classified as, predicted risks, and the
faults journaled before (escalation and backoff read those). Standard library only (see `app.domain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

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


class Lane(StrEnum):
    """Where an inbox row waits: `fatal` (what may be a hardware fault) is taken before `soft`
    (`app.classify.lanes` decides, `app.service.pipeline` takes them in that order)."""

    FATAL = "fatal"
    SOFT = "soft"


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
