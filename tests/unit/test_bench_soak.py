"""The soak benchmark runs end to end at a toy size, and retention keeps the inbox from growing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Group

from tests.perf import bench_soak


def test_soak_main_runs_at_a_toy_size() -> None:
    assert isinstance(bench_soak.main(["--alerts", "2000", "--samples", "2"]), Group)


def test_retention_bounds_the_inbox_over_a_simulated_year(tmp_path: Path) -> None:
    kept = asyncio.run(bench_soak.soak(3000, prune=True, folder=tmp_path))
    grown = asyncio.run(bench_soak.soak(3000, prune=False, folder=tmp_path))
    assert grown[-1].inbox_rows > 3000
    # 14 days of a 365-day year, plus the probes' rows of the last checkpoints
    assert kept[-1].inbox_rows < grown[-1].inbox_rows / 5
    assert kept[-1].fault_rows < grown[-1].fault_rows / 2
