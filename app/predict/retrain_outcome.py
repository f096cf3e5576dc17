"""What one retraining run did, and why: `RetrainOutcome` (what the CLI prints and the service logs) and the
run's record as it goes (`Run`), which turns into one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.predict import registry

log = logging.getLogger("app.predict.retrain")  # the run's own log lines, under the module that runs it


class Status(StrEnum):
    PROMOTED = "promoted"
    KEPT = "kept"
    PROMETHEUS_UNAVAILABLE = "prometheus-unavailable"
    TOO_LITTLE_DATA = "too-little-data"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrainOutcome:
    """What one retraining run did, and why; `as_dict` is what the CLI prints and the service logs."""

    status: Status
    reason: str
    at: datetime
    window_start: datetime
    window_end: datetime
    current: str | None = None
    previous: str | None = None
    challenger: str | None = None
    promotion: dict[str, Any] | None = None
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    raw_rows: int = 0
    pruned: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def promoted(self) -> bool:
        return self.status is Status.PROMOTED

    @property
    def skipped(self) -> bool:
        return self.status in (Status.PROMETHEUS_UNAVAILABLE, Status.TOO_LITTLE_DATA)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "at": iso(self.at),
            "window": {"start": iso(self.window_start), "end": iso(self.window_end)},
            "current": self.current,
            "previous": self.previous,
            "challenger": self.challenger,
            "promotion": self.promotion,
            "failures": dict(self.failures),
            "raw_rows": self.raw_rows,
            "pruned": list(self.pruned),
            "seconds": self.seconds,
        }


@dataclass(slots=True, kw_only=True)
class Run:
    at: datetime
    start: datetime
    end: datetime
    started: float
    raw_rows: int = 0
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    challenger: str | None = None
    promotion: dict[str, Any] | None = None
    pruned: tuple[str, ...] = ()

    def skip(self, reason: str, models_dir: Path) -> RetrainOutcome:
        log.warning("retraining skipped, the current model stays: too little data: %s", reason)
        return self.outcome(Status.TOO_LITTLE_DATA, reason, models_dir)

    def outcome(self, status: Status, reason: str, models_dir: Path) -> RetrainOutcome:
        try:
            pointer = registry.read_pointer(models_dir)
        except registry.ModelUnavailable:
            pointer = {"current": None, "previous": None}
        return RetrainOutcome(
            status=status,
            reason=reason,
            at=self.at,
            window_start=self.start,
            window_end=self.end,
            current=pointer["current"],
            previous=pointer["previous"],
            challenger=self.challenger,
            promotion=self.promotion,
            failures=dict(self.failures),
            raw_rows=self.raw_rows,
            pruned=self.pruned,
            seconds=round(time.perf_counter() - self.started, 3),
        )


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")
