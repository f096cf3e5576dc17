"""The scale benchmark's pieces (rule levels and reach, copied fleets) and its `--quick --verify` run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from app.predict import recorded_rules as rr
from tests.perf import scoring_scale_fleet as fleet
from tests.perf import scoring_scale_rules as rules

TWO_LEVELS = [
    {
        "name": "short",
        "interval": "5m",
        "rules": [
            {"record": "gpu:m:increase1h", "expr": "increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[1h])"},
            {"record": "gpu:t:avg1h", "expr": "avg_over_time((DCGM_FI_DEV_GPU_TEMP offset 5m)[55m:5m])"},
        ],
    },
    {
        "name": "long",
        "interval": "1h",
        "rules": [{"record": "gpu:m:increase7d", "expr": "sum_over_time(gpu:m:increase1h[7d:1h])"}],
    },
]


def test_reach_adds_the_range_the_subquery_and_the_offset() -> None:
    assert rules.reach_s("increase(x[1h])") == 3600
    assert rules.reach_s("avg_over_time((increase(x[1h]) > bool 0)[1435m:5m])") == 3600 + 1435 * 60
    assert rules.reach_s("sum_over_time((x offset 10m)[24h:])") == 86400 + 600
    assert rules.duration_s("1h30m") == 5400


def test_levels_follow_which_rule_reads_which() -> None:
    specs = {s.record: s for s in rules.specs(TWO_LEVELS)}
    assert specs["gpu:m:increase1h"].level == 0
    assert specs["gpu:m:increase1h"].raw
    assert specs["gpu:m:increase7d"].level == 1
    assert not specs["gpu:m:increase7d"].raw
    assert specs["gpu:m:increase7d"].deps == ("gpu:m:increase1h",)
    assert specs["gpu:m:increase7d"].interval_s == 3600


def test_needed_history_reaches_through_the_levels() -> None:
    specs = rules.specs(TWO_LEVELS)
    starts = rules.needed_starts(specs, read={"gpu:m:increase7d": 0.0, "gpu:t:avg1h": 0.0})
    assert starts["gpu:m:increase7d"] == 0.0
    assert starts["gpu:m:increase1h"] == -(7 * 86400 + 3600)  # its reader's week and one interval
    assert starts[rules.RAW] == starts["gpu:m:increase1h"] - 3600 - 300
    assert "gpu:t:avg1h" in starts


def test_the_shipped_rules_are_read_from_recorded_rules() -> None:
    specs = rules.specs()
    assert [s.record for s in specs] == list(rr.RECORDS)
    assert all(s.raw or s.deps for s in specs)
    assert set(rr.READ) <= set(rr.RECORDS)


def test_a_copy_renames_nodes_and_uuids_and_copy_zero_is_the_base() -> None:
    assert fleet.copy_node("gpu-node-00007", 0, 125) == "gpu-node-00007"
    assert fleet.copy_node("gpu-node-00007", 3, 125) == "gpu-node-00382"
    uuid = "GPU-000000000042-5eed-4b6e-9d1c-0000000481fe"
    assert fleet.copy_uuid(uuid, 0) == uuid
    assert fleet.copy_uuid(uuid, 2) == "GPU-000200000042-5eed-4b6e-9d1c-0000000481fe"


def test_copies_are_written_as_openmetrics_and_compared(tmp_path: Path) -> None:
    base = fleet.Recorded(
        labels=(
            ("Hostname", "gpu-node-00001"),
            ("UUID", "GPU-00000000000a-x"),
            ("__name__", "gpu:m:x"),
            ("gpu", "2"),
        ),
        points=((600.0, "1.5"), (900.0, "2")),
    )
    path = tmp_path / "copies.om"
    assert fleet.write_copies([base], path, copies=2, base=4) == 4
    text = path.read_text().splitlines()
    assert text[0] == "# TYPE gpu:m:x unknown"
    assert text[-1] == "# EOF"
    assert 'gpu:m:x{Hostname="gpu-node-00005",UUID="GPU-00010000000a-x",gpu="2"} 2 900' in text
    assert fleet.compare([base], [base]) == {"points": 2, "differ": 0, "max_abs_diff": 0.0, "records": {}}
    moved = fleet.Recorded(labels=base.labels, points=((600.0, "1.5"), (900.0, "2.5")))
    assert fleet.compare([base], [moved])["records"] == {"gpu:m:x": 1}


@pytest.mark.slow
@pytest.mark.real_clock  # Prometheus and promtool read the real clock
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    not Path("/usr/bin/prometheus").exists() or shutil.which("promtool") is None,
    reason="needs Prometheus and promtool (Debian package `prometheus`)",
)
@pytest.mark.skipif(
    not os.environ.get("SICKBAY_BENCH_QUICK"),
    reason="minutes, not seconds (Prometheus records the 130 rules over a week even for 2 nodes): "
    "SICKBAY_BENCH_QUICK=1 runs it",
)
def test_quick_run_measures_both_paths_and_the_copied_series_equal_promtools(tmp_path: Path) -> None:
    from tests.perf import bench_scoring_scale  # noqa: PLC0415

    out = tmp_path / "scale.json"
    bench_scoring_scale.main(["--quick", "--verify", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["not_run"] == []
    base, copied = report["rows"]
    assert base["raw"]["cold"]["path"] == "raw"
    assert base["recorded"]["cold"]["path"] == "recorded"
    assert copied["recorded"]["cold"]["path"] == "recorded"
    assert base["recorded"]["cold"]["raw_hosts"] == 0
    assert copied["recorded"]["cold"]["raw_hosts"] == 0
    assert copied["recorded"]["cold"]["gpus"] == 2 * base["recorded"]["cold"]["gpus"]
    # The recorded path reads the fields at two instants, the raw path the week.
    assert base["recorded"]["cold"]["window_samples"] < base["raw"]["cold"]["window_samples"] / 10
    # Every rule evaluated where the week is held.
    assert len(base["prometheus"]["rules"]) == len(rr.RECORDS)
    assert not base["prometheus"]["not_evaluated"]
    # Where only the instants' fields and the read records are held, the level reading the exporter is.
    assert {c["level"] for c in copied["prometheus"]["rules"]} == {0}
    assert all(c["samples"] > 0 for c in base["prometheus"]["rules"])
    check = copied["verify"]
    assert check["points"] > 0
    assert check["differ"] == 0, check


def test_a_copied_size_waits_for_compaction_unless_quick_or_told_not_to() -> None:
    from tests.perf import bench_scoring_scale  # noqa: PLC0415

    parse = bench_scoring_scale.parse_args
    assert parse([]).settle is True
    assert parse(["--quick"]).settle is False
    assert parse(["--quick", "--settle"]).settle is True
    assert parse(["--no-settle"]).settle is False
