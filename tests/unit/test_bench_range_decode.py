"""`bench_range_decode` runs end to end on a small answer: both ways decode the same samples (it checks),
and the report has a row per answer size with both ways' time and memory."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from tests.perf import bench_range_decode


def test_a_small_run_reports_both_ways_for_each_size(tmp_path: Path) -> None:
    out = tmp_path / "range_decode.json"
    table = bench_range_decode.main(["--series", "400", "--repeat", "1", "--out", str(out)])
    assert isinstance(table, Table)
    rows = json.loads(out.read_text())["answers"]
    assert [row["points"] for row in rows] == list(bench_range_decode.POINTS)
    for row in rows:
        assert min(row["plain_s"], row["decode_s"]) > 0
        assert min(row["plain_peak_mb"], row["decode_peak_mb"]) > 0
