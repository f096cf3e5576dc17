"""The training benchmark runs end to end at a toy size: both tables, and the report it writes."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from tests.perf import bench_training


def test_main_at_a_toy_size_reports_both_tables(train_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "training.json"
    argv = ["--quick", "--pool-dataset", str(train_dataset), "--out", str(out), "--max-iter", "5"]
    argv += ["--baseline-rows", "5000", "--rows", "10000", "--scale-rows", "200000"]
    console = Console(width=200, record=True)
    console.print(bench_training.main(argv))
    text = console.export_text()
    assert "Training at fleet scale" in text
    assert "fit + calibrate" in text
    report = json.loads(out.read_text())
    assert [row["rows"] for row in report["rows"]] == [5000, 10000]
    (scale,) = report["scale"]
    sampled, full = scale["sampled"], scale["full"]
    assert scale["forced"]  # auto keeps every row at this size: the comparison rate is used
    assert sampled["rate"] == 0.1
    assert full["rate"] == 1.0
    # The same fleet either way: the same training rows seen, validation and holdout never down-sampled.
    assert sampled["train_rows"] == full["train_rows"] == full["kept_rows"]
    assert sampled["train_positives"] == full["train_positives"]
    assert sampled["kept_rows"] < full["kept_rows"] * 0.2
    assert (sampled["validation_rows"], sampled["holdout_rows"]) == (
        full["validation_rows"],
        full["holdout_rows"],
    )
    assert sampled["holdout_positives"] == full["holdout_positives"]
