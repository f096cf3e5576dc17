"""What a backfill reports: each window's figures (`WriteStats`), the run's (`BackfillStats`), and its
one error (`BackfillError`). Values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class BackfillError(RuntimeError):
    """promtool refused the text, or the dataset cannot be backfilled."""


@dataclass(frozen=True, slots=True)
class WriteStats:
    samples: int
    gpus: int
    bytes: int
    families: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillStats:
    """What a backfill wrote; rates are over the whole run (writing and promtool overlap)."""

    samples: int
    gpus: int
    bytes: int
    families: tuple[str, ...]
    windows: int
    block_s: float
    step_s: float | None
    start: float
    end: float
    write_s: float
    promtool_s: float  # summed over runs, which overlap each other and the writing
    elapsed_s: float
    om_files: tuple[Path, ...] = ()

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / self.samples if self.samples else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "gpus": self.gpus,
            "bytes": self.bytes,
            "bytes_per_sample": round(self.bytes_per_sample, 1),
            "samples_per_s": round(self.samples_per_s),
            "families": list(self.families),
            "windows": self.windows,
            "block_hours": self.block_s / 3600.0,
            "step_s": self.step_s,
            "start": self.start,
            "end": self.end,
            "write_s": round(self.write_s, 2),
            "promtool_s": round(self.promtool_s, 2),
            "elapsed_s": round(self.elapsed_s, 2),
            "om_files": [str(p) for p in self.om_files],
        }
