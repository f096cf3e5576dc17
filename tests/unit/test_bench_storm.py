"""bench_storm's main at a toy size: the table comes back with the budget's count and every figure."""

from __future__ import annotations

import json

from tests.perf import bench_storm


def test_main_runs_at_a_toy_size() -> None:
    table = bench_storm.main(["--nodes", "12"])
    assert table.row_count == 5
    results = json.loads(bench_storm.OUT.read_text())
    assert 1 <= results["default"]["quarantined"] < 12
    assert results["raised"]["nodes"] == 12
    assert results["raised"]["floor_s"] > 0
