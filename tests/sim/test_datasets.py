"""Datasets: the per-GPU table, the ground truth files and OpenMetrics text, written in one pass."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from app import cli
from app.sim.fleet import metrics
from app.sim.fleet.datasets import COLUMNS, parquet_available, write_dataset
from tests.sim.helpers import quiet_sim

HOUR = 3600.0


def parse_openmetrics(text: str) -> list[Metric]:
    """prometheus_client's strict OpenMetrics parser (untyped upstream)."""
    return list(text_string_to_metric_families(text))  # type: ignore[no-untyped-call]


def test_table_truth_and_strict_openmetrics(tmp_path: Path) -> None:
    sim = quiet_sim(nodes=2)
    node = sim.node_names[1]
    sim.inject(node, 2, "thermal", lead_time_s=HOUR)
    report = write_dataset(
        tmp_path,
        nodes=2,
        duration_s=2 * HOUR,
        step_s=300,
        formats=("csv", "openmetrics"),
        grouping="series",
        sim=sim,
    )
    assert report.frames == 25
    with (tmp_path / "timeseries.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == report.rows == 25 * 2 * 8, "every GPU at every instant, with or without series"
    lost = [r for r in rows if r["node"] == node and r["gpu"] == "2" and r["present"] == "0"]
    assert lost
    assert all(r["DCGM_FI_DEV_GPU_TEMP"] == "" for r in lost)
    xids = {r["DCGM_FI_DEV_XID_ERRORS"] for r in rows if r["node"] == node and r["gpu"] == "2"}
    assert "79" in xids
    truth = json.loads((tmp_path / "truth.json").read_text())
    (failure,) = truth["failures"]
    assert failure["xid"] == 79
    assert failure["mode"] == "thermal"
    assert (tmp_path / "failures.csv").read_text().startswith("id,node,gpu,uuid,mode")

    text = (tmp_path / "metrics.om").read_text()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(text)}
    assert set(metrics.all_family_names()) <= set(families)
    assert {"up", "kube_node_status_capacity", "kube_node_status_allocatable"} <= set(families)
    assert families["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"].type == "unknown"
    temp = [s for s in families["DCGM_FI_DEV_GPU_TEMP"].samples if s.labels["gpu"] == "0"]
    assert len(temp) == 25 * 2
    assert all(s.timestamp is not None for s in temp)
    assert temp[0].labels["job"] == "dcgm-exporter"
    assert temp[0].labels["instance"].endswith(":9400")


def test_openmetrics_counter_styles(tmp_path: Path) -> None:
    for style in ("counter", "suffixed"):
        out = tmp_path / style
        write_dataset(
            out, nodes=1, duration_s=600, formats=("openmetrics",), counter_style=style, grouping="series"
        )
        text = (out / "metrics.om").read_text()
        assert "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter" in text
        if style == "suffixed":
            families = {f.name: f.type for f in parse_openmetrics(text)}
            assert families["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == "counter"
            assert "\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL_total{" in text
        else:
            assert "\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL{" in text


def test_openmetrics_family_filter(tmp_path: Path) -> None:
    write_dataset(
        tmp_path, nodes=1, duration_s=300, formats=("openmetrics",), om_families=metrics.RULE_FAMILIES
    )
    text = (tmp_path / "metrics.om").read_text()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert names <= metrics.RULE_FAMILIES
    assert "DCGM_FI_DEV_XID_ERRORS" in names
    assert "DCGM_FI_DEV_SM_CLOCK" not in names


@pytest.mark.skipif(not parquet_available(), reason="pyarrow is not installed")
def test_parquet_table(tmp_path: Path) -> None:
    pq: Any = importlib.import_module("pyarrow.parquet")
    report = write_dataset(tmp_path, nodes=2, duration_s=1800, formats=("parquet",))
    table = pq.read_table(tmp_path / "timeseries.parquet")
    assert table.num_rows == report.rows == 31 * 16
    assert tuple(table.column_names) == COLUMNS
    assert table.schema.field("DCGM_FI_DEV_POWER_USAGE").type == "double"


def test_simulate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--out", str(tmp_path), "--nodes", "2", "--days", "0.01", "--format", "csv"]
    args += ["--format", "openmetrics", "--om-families", "rules", "--hostname-label", "hostname"]
    code = cli.main(args)
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["frames"] == 15
    assert report["rows"] == 15 * 16
    assert (tmp_path / "truth.json").exists()
    assert 'hostname="gpu-node-000"' in (tmp_path / "metrics.om").read_text()
