"""The watch benchmark's `main` at a toy size, so it cannot rot: it runs, reports both modes, and the view's
cycles list no nodes or pods while the lists' do (the figures themselves are the benchmark's to report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.perf import bench_watch

pytestmark = pytest.mark.slow


def test_the_watch_benchmark_runs_at_a_toy_size(tmp_path: Path) -> None:
    out = tmp_path / "watch.json"
    table = bench_watch.main(["--nodes", "30", "--cycles", "1", "--out", str(out)])
    assert table.row_count == 5  # lists, watch, their ratio, the start-up without and with the wait
    (size,) = json.loads(out.read_text())["sizes"]
    assert (size["nodes"], size["pods"]) == (30, 300)
    assert size["lists"]["node_pod_lists_per_cycle"] >= 2, "a round lists nodes, the page lists nodes"
    assert size["watch"]["node_pod_lists_per_cycle"] == 0
    waited, at_once = size["watch"]["startup"], size["startup_without_wait"]
    assert waited["requests"] >= 2, "a list of nodes and one of pods (one page each)"
    assert waited["node_pod_lists"] == 2, "the view's lists only: the first round read the view"
    assert at_once["sync_wait_s"] == 0
    assert at_once["node_pod_lists"] >= waited["node_pod_lists"]
    assert size["watch"]["bytes_per_cycle"] < size["lists"]["bytes_per_cycle"]
