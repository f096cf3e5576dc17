"""Backfilling a dataset: lean OpenMetrics text, and the round trip through promtool, Prometheus and the
predictor's `Reader`, which must read back exactly the dataset's values, with gaps still gaps."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from app import cli
from app.predict import dataset, features, prometheus
from app.sim.fleet import backfill, backfill_source, backfill_text
from app.sim.fleet.datasets import write_dataset
from tests.prom import backfilled_prometheus, instant_query
from tests.sim.helpers import quiet_sim

HOUR = 3600.0
T0 = 1_740_960_000.0
ALIGNED = 1_740_852_000.0  # a multiple of 486 h, so on every block boundary up to 486 h
TEMP, XID, SBE = features.GPU_TEMP, features.XID, features.SBE_AGG
KEYS = ["node", "gpu", "uuid", "timestamp"]


def lines_of(
    table: pa.Table, *, host_label: backfill_text.HostLabel = "Hostname", target_labels: bool = False
) -> list[str]:
    out = io.BytesIO()
    columns = (TEMP, XID, SBE, features.SBE_VOL)
    backfill_text.write_window(
        table,
        out,
        host="node",
        uuid="uuid",
        columns=columns,
        host_label=host_label,
        target_labels=target_labels,
    )
    return out.getvalue().decode().splitlines()


def small_table() -> pa.Table:
    """Two GPUs, three instants (given out of order): a present=0 row, a NaN and a null value."""
    return pa.table(
        {
            "node": ["n1", "n1", "n1", "n1", "n1", "n1"],
            "gpu": [1, 0, 0, 1, 0, 1],
            "uuid": ["GPU-b", "GPU-a", "GPU-a", "GPU-b", "GPU-a", "GPU-b"],
            "timestamp": [T0, T0 + 300, T0, T0 + 300, T0 + 600, T0 + 600],
            "present": [1, 1, 1, 0, 1, 1],
            TEMP: [60.0, 61.5, np.nan, 70.0, 62.0, 63.0],
            XID: pa.array([0, 0, 0, 0, 79, None], type=pa.int64()),
            SBE: pa.array([3, 1, 1, 3, 2, 4], type=pa.int64()),
            features.SBE_VOL: pa.array([None] * 6, type=pa.int64()),
        }
    )


def test_only_present_values_become_samples_each_series_in_time_order() -> None:
    lines = lines_of(small_table())
    gpu0 = 'n1",gpu="0",UUID="GPU-a"} '
    gpu1 = 'n1",gpu="1",UUID="GPU-b"} '
    assert lines == [
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        'DCGM_FI_DEV_GPU_TEMP{Hostname="' + gpu1 + "60 1740960000",
        'DCGM_FI_DEV_GPU_TEMP{Hostname="' + gpu1 + "63 1740960600",
        'DCGM_FI_DEV_GPU_TEMP{Hostname="' + gpu0 + "61.5 1740960300",
        'DCGM_FI_DEV_GPU_TEMP{Hostname="' + gpu0 + "62 1740960600",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        'DCGM_FI_DEV_XID_ERRORS{Hostname="' + gpu1 + "0 1740960000",
        'DCGM_FI_DEV_XID_ERRORS{Hostname="' + gpu0 + "0 1740960000",
        'DCGM_FI_DEV_XID_ERRORS{Hostname="' + gpu0 + "0 1740960300",
        'DCGM_FI_DEV_XID_ERRORS{Hostname="' + gpu0 + "79 1740960600",
        "# TYPE DCGM_FI_DEV_ECC_SBE_AGG_TOTAL unknown",
        "# HELP DCGM_FI_DEV_ECC_SBE_AGG_TOTAL Total number of single-bit persistent ECC errors.",
        'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="' + gpu1 + "3 1740960000",
        'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="' + gpu1 + "4 1740960600",
        'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="' + gpu0 + "1 1740960000",
        'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="' + gpu0 + "1 1740960300",
        'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="' + gpu0 + "2 1740960600",
    ], "an all-null family (SBE_VOL) is left out"


def test_labels_follow_the_spelling_asked_and_target_labels_are_optional() -> None:
    sample = lines_of(small_table(), host_label="hostname", target_labels=True)[2]
    assert sample == (
        'DCGM_FI_DEV_GPU_TEMP{hostname="n1",gpu="1",UUID="GPU-b",instance="n1:9400",job="dcgm-exporter"} '
        "60 1740960000"
    )


@pytest.mark.parametrize(
    ("start_h", "span_h", "samples_per_h", "block_h"),
    [
        (0, 3, 1e6, 6),  # a short span in one block
        (0, 1, 1e6, 2),  # never under promtool's 2 h
        (5, 3, 1e6, 18),  # 5:00-8:00 crosses 6:00: one 18 h block rather than two of 6 h
        (0, 15 * 24, 1e3, 486),  # small fleet, long span: one block holds all of it
        (0, 15 * 24, 460_800, 18),  # 200 nodes x 8 GPUs x 24 metrics at 5 min: 18 h windows, 8.3M samples
        (0, 48, 9_000_000, 2),  # a window never shrinks under 2 h, whatever the rate
    ],
)
def test_block_duration(start_h: float, span_h: float, samples_per_h: float, block_h: float) -> None:
    start = ALIGNED + start_h * HOUR
    got = backfill.block_duration_s(
        start=start, end=start + span_h * HOUR, samples_per_s=samples_per_h / HOUR
    )
    assert got == block_h * HOUR


def test_source_columns_keep_both_dcgm_names_in_source_order() -> None:
    names = ["node", "DCGM_FI_DEV_XID_ERROR", TEMP, "DCGM_FI_DEV_POWER_USAGE", XID, SBE]
    assert backfill_source.source_columns(names) == (SBE, TEMP, XID, "DCGM_FI_DEV_XID_ERROR")


# -- round trips through promtool and a real Prometheus -------------------------------------------------


def gappy_dataset(directory: Path) -> pd.DataFrame:
    """A simulated dataset (3 nodes, 4 h at 5 min, a GPU failing with XID 79 and vanishing), with gaps cut
    in: a node's exporter down for 20 min, rows marked absent but with values left in, single NaNs."""
    sim = quiet_sim(nodes=3)
    sim.inject(sim.node_names[0], 2, "hbm", lead_time_s=HOUR)
    write_dataset(directory, nodes=3, duration_s=4 * HOUR, step_s=300, formats=("parquet",), sim=sim)
    path = directory / "timeseries.parquet"
    frame = pd.read_parquet(path)
    t = frame["timestamp"] - frame["timestamp"].min()
    metrics = [c for c in frame.columns if c.startswith("DCGM_FI_")]
    down = (frame["node"] == "gpu-node-001") & (t >= HOUR) & (t < HOUR + 1200)
    frame.loc[down, "present"] = 0
    frame[metrics] = frame[metrics].astype("float64")
    frame.loc[down, metrics] = np.nan
    absent = (frame["node"] == "gpu-node-002") & (frame["gpu"] == 5) & (t == 2 * HOUR)
    frame.loc[absent, "present"] = 0  # values stay: presence alone must keep them out
    frame.loc[(frame["node"] == "gpu-node-002") & (frame["gpu"] == 1) & (t == 1800), TEMP] = np.nan
    frame.to_parquet(path, index=False)
    assert (frame["present"] == 0).sum() > 8 * 4, "the vanished GPU and the exporter gap are in the data"
    return dataset.read_timeseries(directory)


def expected_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """What a reader must see: values of present rows, NaN elsewhere; present = any value."""
    out = frame.copy()
    metrics = list(features.SOURCE_METRICS)
    out[metrics] = out[metrics].astype("float64")
    out.loc[out["present"] == 0, metrics] = np.nan
    out["present"] = out[metrics].notna().any(axis=1).astype("int64")
    return out


def read_back(url: str, frame: pd.DataFrame) -> pd.DataFrame:
    start, end = float(frame["timestamp"].min()), float(frame["timestamp"].max())
    reader = prometheus.Reader(prometheus.ReaderSettings(url=url, step_s=300.0))
    got = reader.read(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC))
    assert reader.queries == len(features.SOURCE_METRICS), "one query per metric, whatever the fleet"
    return got


def assert_same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    metrics = list(features.SOURCE_METRICS)
    want = want.assign(node=want["node"].astype(str), uuid=want["uuid"].astype(str))
    got = got.assign(node=got["node"].astype(str), uuid=got["uuid"].astype(str))
    want = want.set_index(KEYS).sort_index()
    got = got.set_index(KEYS).sort_index()
    assert got.index.equals(want.index), "the same GPUs at the same instants"
    np.testing.assert_array_equal(got[metrics].to_numpy(), want[metrics].to_numpy())
    np.testing.assert_array_equal(got["present"].to_numpy(), want["present"].to_numpy())


@pytest.mark.slow
def test_reader_reads_back_the_dataset_gaps_included(
    tmp_path: Path, promtool: Path, prometheus: Path, free_port: Callable[[], int]
) -> None:
    frame = gappy_dataset(tmp_path / "ds")
    want = expected_frame(frame)
    stats: list[backfill.BackfillStats] = []
    with backfilled_prometheus(
        tmp_path / "ds", tmp_path, prometheus=prometheus, promtool=promtool, port=free_port(), stats=stats
    ) as url:
        got = read_back(url, frame)
        (fill,) = stats
        assert fill.samples == int(want[list(features.SOURCE_METRICS)].notna().sum().sum())
        assert fill.families == features.SOURCE_METRICS
        assert 100 < fill.bytes_per_sample < 140, "lean: name, Hostname, gpu, UUID, value, timestamp"
        # Nothing but what the predictor reads, with nothing but the identifying labels.
        (one,) = instant_query(url, f'{TEMP}{{Hostname="gpu-node-000",gpu="0"}}', at=fill.end)
        assert set(one["metric"]) == {"__name__", "Hostname", "gpu", "UUID"}
        assert not instant_query(url, "DCGM_FI_DEV_POWER_USAGE", at=fill.end)
    assert_same(got, want)
    gap = got[(got["node"] == "gpu-node-001") & (got["timestamp"] == frame["timestamp"].min() + HOUR)]
    assert len(gap) == 8
    assert (gap["present"] == 0).all()
    assert gap[list(features.SOURCE_METRICS)].isna().all().all()


@pytest.mark.slow
def test_csv_dataset_with_another_host_spelling_and_a_replaced_board_through_the_cli(
    tmp_path: Path, promtool: Path, prometheus: Path, free_port: Callable[[], int]
) -> None:
    """A hand-made CSV (the layout a production export could have): `hostname` labels, a board replaced
    mid-way (a new UUID in the same slot), ISO `time` only, a family that is all empty."""
    times = T0 + 300.0 * np.arange(12)
    rows = []
    for i, t in enumerate(times):
        uuid = "GPU-old" if i < 6 else "GPU-new"
        rows.append(
            {
                "time": pd.Timestamp(t, unit="s", tz="UTC").isoformat(),
                "Hostname": "h1",
                "gpu": 0,
                "uuid": uuid,
                "present": 1,
                TEMP: 50.0 + i,
                SBE: 10 * i,
                XID: 79 if i == 5 else 0,
                features.ENERGY: None,
            }
        )
    directory = tmp_path / "csv"
    directory.mkdir()
    pd.DataFrame(rows).to_csv(directory / "timeseries.csv", index=False)
    tsdb = tmp_path / "tsdb"
    args = ["--dataset", str(directory), "--tsdb", str(tsdb), "--keep-om", "--host-label", "hostname"]
    code = cli.main(["simulate", "backfill", *args, "--promtool", str(promtool)])
    assert code == 0
    (kept,) = (directory / "backfill-om").glob("*.om")
    assert kept.read_text().endswith("# EOF\n")
    assert features.ENERGY not in kept.read_text(), "an all-empty family is skipped"
    again = tmp_path / "again"
    again.mkdir()
    with backfilled_prometheus(
        directory, again, prometheus=prometheus, promtool=promtool, port=free_port(), host_label="hostname"
    ) as url:
        got = read_back(url, pd.DataFrame({"timestamp": times}))
    got = got.sort_values(["uuid", "timestamp"])
    new = got[got["uuid"] == "GPU-new"]
    old = got[got["uuid"] == "GPU-old"]
    assert new["node"].unique().tolist() == ["h1"]
    assert new["present"].tolist() == [0] * 6 + [1] * 6, "the new board has no history before it came"
    assert old["present"].tolist() == [1] * 6 + [0] * 6
    assert old[TEMP].tolist()[:6] == [50.0 + i for i in range(6)]
    assert new[SBE].tolist()[6:] == [10.0 * i for i in range(6, 12)]
    assert old[XID].tolist()[5] == 79
    assert got[features.ENERGY].isna().all()
