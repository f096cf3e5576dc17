"""Ground truth: everything that really happened in the simulation, for labels, tests and scoring.

Records are frozen values with times as Unix seconds; `as_dict` renders them for JSON with ISO-8601 UTC
times next to the numbers. `TruthLog` is the simulator's append-only accumulator; `GroundTruth` is an
immutable snapshot of it, so a caller can keep one while the simulation runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

TIME_FIELDS = frozenset({"time", "precursor_start", "failure_time", "until"})


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _render(record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in asdict(record).items():
        if key in TIME_FIELDS:
            out[key] = iso(value)
            out[f"{key}_ts"] = value
        else:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """A GPU failure: where, which mode, when its precursor started and when it failed, with what XID.

    `fault_class` is the XID's class in rules/xid-catalog.yaml; `expected_class` resolves `depends`
    (48 with a row-remap failure is `replace`, otherwise `reset-gpu`; 74 is `reset-gpu`).
    """

    id: str
    node: str
    gpu: int
    uuid: str
    mode: str
    category: str
    precursor_start: float | None
    failure_time: float
    lead_time_s: float | None
    xid: int
    fault_class: str
    expected_class: str
    row_remap_failure: bool
    vanished: bool
    injected: bool
    detail: str = ""
    # "strong", "weak" or "none" (no precursor): how much warning the failure gave.
    precursor_strength: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRecord:
    """A failure whose precursor is under way (the failure time is known to the simulator only)."""

    node: str
    gpu: int
    uuid: str
    mode: str
    precursor_start: float | None
    failure_time: float
    xid: int
    precursor_strength: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AppXidRecord:
    """An application XID: it belongs to the job, not the GPU."""

    time: float
    node: str
    gpu: int
    uuid: str
    xid: int
    fault_class: str
    job: str | None
    namespace: str | None
    pod: str | None
    buggy_job: bool
    injected: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsRecord:
    """An operational event: exporter restart, reboot, repair, replacement, drain, driver change, vanish."""

    time: float
    node: str
    kind: str
    gpu: int | None = None
    uuid: str | None = None
    until: float | None = None
    detail: str = ""
    injected: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TrapRecord:
    """Something that looks sick and is not: it must never be treated as a failure."""

    kind: str
    node: str | None = None
    gpu: int | None = None
    uuid: str | None = None
    job: str | None = None
    namespace: str | None = None
    detail: str = ""
    # When the trap showed (a recovered precursor's episode); None: all along.
    time: float | None = None
    until: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InterruptionRecord:
    """A job stopped by something other than its own end (and put back in the queue)."""

    time: float
    job: str
    namespace: str
    nodes: tuple[str, ...]
    cause: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroundTruth:
    start: float
    now: float
    failures: tuple[FailureRecord, ...] = ()
    pending: tuple[PendingRecord, ...] = ()
    app_xids: tuple[AppXidRecord, ...] = ()
    ops: tuple[OpsRecord, ...] = ()
    traps: tuple[TrapRecord, ...] = ()
    interruptions: tuple[InterruptionRecord, ...] = ()
    # The fleet's personality (name and every drawn value); None for a fleet built without one.
    personality: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        head = {} if self.personality is None else {"personality": dict(self.personality)}
        return head | {
            "start": iso(self.start),
            "now": iso(self.now),
            "failures": [_render(r) for r in self.failures],
            "pending": [_render(r) for r in self.pending],
            "app_xids": [_render(r) for r in self.app_xids],
            "ops": [_render(r) for r in self.ops],
            "traps": [_render(r) for r in self.traps],
            "interruptions": [_render(r) for r in self.interruptions],
        }


@dataclass(slots=True)
class TruthLog:
    """The simulator's append-only record (trap GPUs that get a real failure injected are dropped)."""

    failures: list[FailureRecord] = field(default_factory=list)
    app_xids: list[AppXidRecord] = field(default_factory=list)
    ops: list[OpsRecord] = field(default_factory=list)
    traps: list[TrapRecord] = field(default_factory=list)
    interruptions: list[InterruptionRecord] = field(default_factory=list)

    def next_failure_id(self) -> str:
        return f"F{len(self.failures) + 1:05d}"

    def drop_trap(self, uuid: str) -> None:
        self.traps = [trap for trap in self.traps if trap.uuid != uuid]

    def snapshot(
        self,
        *,
        start: float,
        now: float,
        pending: tuple[PendingRecord, ...] = (),
        personality: Mapping[str, Any] | None = None,
    ) -> GroundTruth:
        return GroundTruth(
            personality=personality,
            start=start,
            now=now,
            failures=tuple(self.failures),
            pending=pending,
            app_xids=tuple(self.app_xids),
            ops=tuple(self.ops),
            traps=tuple(self.traps),
            interruptions=tuple(self.interruptions),
        )
