"""The recorded path's one-series presence read and its sparse reads, through a real Prometheus; and the
reads' pipeline (answers parsed in the order asked whatever order they arrive in, an error surfacing).

The exporter's series here are what dcgm-exporter writes: a field under its DCGM 4.6 name
(`DCGM_FI_DEV_GPU_TEMP_CELSIUS`); DCGM's blank for a field the GPU does not support (MEMORY_TEMP reading
9223372036854776000 on a T4: https://github.com/NVIDIA/gpu-monitoring-tools/issues/97; the features'
`DCGM_BLANK_MIN`); counters at 0 on healthy GPUs (https://github.com/NVIDIA/dcgm-exporter/issues/250 shows
`DCGM_FI_DEV_PCIE_REPLAY_COUNTER ... 0` on every GPU of a node); a NaN sample; one GPU's field in two
series (the exporter writes a series per MIG instance or pod, https://github.com/NVIDIA/dcgm-exporter/issues/317);
and a host named only by `instance` (a scrape without the exporter's `Hostname`: `instance="host:9400"`).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.demo.processes import free_port
from app.predict import recorded_presence as presence
from app.predict import recorded_reads
from app.predict.features import fields as f
from app.predict.prometheus import PrometheusUnavailable, Reader, ReaderSettings
from app.sim.fleet import backfill
from tests import prom

STEP = 300.0
T = 7200.0  # the instant read (seconds since the epoch: a backfilled history has no calendar date)
BLANK = "9223372036854775794"


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus`; `make setup` installs it)")
    return Path(found)


SERIES = [
    # node-a GPU 0: temperature under the DCGM 4.6 name, memory temperature blank, the aggregate SBE count.
    ('DCGM_FI_DEV_GPU_TEMP_CELSIUS{Hostname="node-a",gpu="0",UUID="GPU-a0",pod="p"}', "61"),
    ('DCGM_FI_DEV_MEMORY_TEMP{Hostname="node-a",gpu="0",UUID="GPU-a0"}', BLANK),
    ('DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{Hostname="node-a",gpu="0",UUID="GPU-a0"}', "0"),
    ('DCGM_FI_DEV_ROW_REMAP_PENDING{Hostname="node-a",gpu="0",UUID="GPU-a0"}', "0"),
    # node-a GPU 1: temperature in two series (the pod label changed), one pending remap.
    ('DCGM_FI_DEV_GPU_TEMP{Hostname="node-a",gpu="1",UUID="GPU-a1",pod="old"}', "58"),
    ('DCGM_FI_DEV_GPU_TEMP{Hostname="node-a",gpu="1",UUID="GPU-a1",pod="new"}', "59"),
    ('DCGM_FI_DEV_ROW_REMAP_PENDING{Hostname="node-a",gpu="1",UUID="GPU-a1"}', "1"),
    # node-b GPU 0, named by `instance` only: temperature, and a NaN utilisation.
    ('DCGM_FI_DEV_GPU_TEMP{instance="node-b:9400",gpu="0",UUID="GPU-b0"}', "70"),
    ('DCGM_FI_DEV_GPU_UTIL{instance="node-b:9400",gpu="0",UUID="GPU-b0"}', "NaN"),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    prometheus, promtool = _binary("prometheus"), _binary("promtool")
    work = tmp_path_factory.mktemp("presence")
    families: dict[str, list[str]] = {}
    for series, value in SERIES:
        name = series.split("{", 1)[0]
        families.setdefault(name, []).extend(f"{series} {value} {t:.3f}" for t in (T - STEP, T))
    text = "".join(f"# TYPE {name} gauge\n" + "\n".join(lines) + "\n" for name, lines in families.items())
    (work / "fields.om").write_text(text + "# EOF\n")
    block = f"--max-block-duration={int(backfill.BLOCK_BASE_S * 3**5)}s"
    command = [
        str(promtool),
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        block,
        str(work / "fields.om"),
        str(work / "tsdb"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    config = work / "prometheus.yml"
    config.write_text(prom.EMPTY_CONFIG)
    with prom.running_prometheus(prometheus, data=work / "tsdb", config=config, port=free_port()) as found:
        deadline = time.monotonic() + 120
        while not prom.instant_query(found, "count(DCGM_FI_DEV_GPU_TEMP)", at=T):
            assert time.monotonic() < deadline, "the backfilled block never became queryable"
            time.sleep(0.2)
        yield found


def _reads(url: str) -> recorded_reads.InstantReads:
    return recorded_reads.InstantReads(Reader(ReaderSettings(url=url, step_s=STEP)))


def test_one_series_per_gpu_says_which_fields_are_real_blank_or_absent(url: str) -> None:
    reads = _reads(url)
    got = reads.run([recorded_reads.expression(presence.NAME, presence.query(), [T])], remember=presence.NAME)
    mask = got[presence.NAME][:, 0]
    gpus = {identity: mask[i] for identity, i in reads.gpus.items()}
    assert set(gpus) == {("node-a", 0, "GPU-a0"), ("node-a", 1, "GPU-a1"), ("node-b", 0, "GPU-b0")}
    a0, a1, b0 = (np.array([gpus[k]]) for k in sorted(gpus))
    assert presence.real(a0, f.GPU_TEMP).all()  # under its DCGM 4.6 name
    assert presence.blank(a0, f.MEMORY_TEMP).all()
    assert not presence.real(a0, f.MEMORY_TEMP).any()
    assert presence.real(a0, f.SBE_AGG).all()
    assert presence.real(a0, f.REMAP_PENDING).all()
    assert not presence.real(a0, f.PCIE_REPLAY).any()
    assert not presence.blank(a0, f.PCIE_REPLAY).any()
    # Two series of one field are one bit, not two (a sum of 2 x 2^k would read as the next field).
    assert presence.real(a1, f.GPU_TEMP).all()
    assert not presence.real(a1, f.MEMORY_TEMP).any()
    assert presence.real(b0, f.GPU_TEMP).all()
    assert not presence.real(b0, f.GPU_UTIL).any()  # a NaN sample is no sample, as the raw frame's notna
    assert set(reads.refs) == {"node-a", "node-b"}
    assert reads.refs["node-b"].label == "instance"
    expected = {
        presence.FIELDS.index(f.GPU_TEMP),
        presence.FIELDS.index(f.SBE_AGG),
        presence.FIELDS.index(f.REMAP_PENDING),
        len(presence.FIELDS) + presence.FIELDS.index(f.MEMORY_TEMP),
    }
    assert a0[0] == sum(2.0**bit for bit in expected)


def test_a_sparse_read_answers_only_non_zero_values_and_absent_gpus_with_the_field_read_zero(
    url: str,
) -> None:
    reads = _reads(url)
    mask = reads.run([recorded_reads.expression(presence.NAME, presence.query(), [T - STEP, T])])[
        presence.NAME
    ]
    sparse = reads.run([recorded_reads.raw(f.REMAP_PENDING, [T - STEP, T], sparse=True)])[f.REMAP_PENDING]
    index = {gpu: i for gpu, i in reads.gpus.items()}
    a0, a1, b0 = (
        index[("node-a", 0, "GPU-a0")],
        index[("node-a", 1, "GPU-a1")],
        index[("node-b", 0, "GPU-b0")],
    )
    assert np.isnan(sparse[a0]).all()
    assert sparse[a1].tolist() == [1.0, 1.0]
    values = presence.filled(
        sparse, presence.real(recorded_reads.pad(mask, len(reads.gpus)), f.REMAP_PENDING)
    )
    assert values[a0].tolist() == [0.0, 0.0]
    assert values[a1].tolist() == [1.0, 1.0]
    assert np.isnan(values[b0]).all()  # node-b does not export the field: missing, not zero


def test_presence_values_in_the_frame_are_what_present_fields_reads() -> None:
    real_bit = 2.0 ** presence.FIELDS.index(f.GPU_TEMP)
    blank_bit = 2.0 ** (len(presence.FIELDS) + presence.FIELDS.index(f.GPU_TEMP))
    mask = np.array([[real_bit], [blank_bit], [np.nan]])
    got = presence.frame_values(mask, f.GPU_TEMP)
    assert got[0, 0] == presence.PRESENT
    assert got[1, 0] >= f.DCGM_BLANK_MIN
    assert np.isnan(got[2, 0])


def test_event_counting_records_are_sparse_and_moments_are_not() -> None:
    assert presence.sparse("gpu:DCGM_FI_DEV_PCIE_REPLAY_COUNTER:increase24h")
    assert presence.sparse("gpu:DCGM_FI_DEV_PCIE_REPLAY_COUNTER:active1h_avg_over_time24h")
    assert presence.sparse("gpu:DCGM_FI_DEV_CLOCK_THROTTLE_REASONS:thermal_count_over_time1h")
    assert not presence.sparse("gpu:DCGM_FI_DEV_CLOCK_THROTTLE_REASONS:valid_count_over_time1h")
    assert not presence.sparse("gpu:DCGM_FI_DEV_GPU_TEMP:util_pairs_avg_over_time7d")
    assert presence.field_of("gpu:DCGM_FI_DEV_PCIE_REPLAY_COUNTER:increase24h") == f.PCIE_REPLAY
    assert presence.field_of("gpu:DCGM_FI_DEV_MEMORY_TEMP_minus_DCGM_FI_DEV_GPU_TEMP:sum_over_time1h") is None


class _SlowFirst:
    """A client whose first query answers last: the reads must still number GPUs in the order asked."""

    def __init__(self, *, fail: str | None = None) -> None:
        self.fail = fail
        self.started: list[str] = []
        self.lock = threading.Lock()

    def custom_query_range(
        self, query: str, start_time: datetime, end_time: datetime, step: str, **_: Any
    ) -> list[dict[str, Any]]:
        with self.lock:
            self.started.append(query)
            first = len(self.started) == 1
        if first:
            time.sleep(0.3)
        if query == self.fail:
            raise ConnectionError("refused")
        gpu = query  # each query names one GPU, so the numbering shows the order parsed
        metric = {"Hostname": "n", "gpu": gpu, "UUID": f"U{gpu}"}
        return [{"metric": metric, "values": [[start_time.timestamp(), "1"]]}]


def test_answers_are_parsed_in_the_order_asked_while_later_ones_arrive_first() -> None:
    client = _SlowFirst()
    reads = recorded_reads.InstantReads(Reader(ReaderSettings(step_s=STEP), client=client), concurrent=3)
    names = [str(i) for i in range(6)]
    got = reads.run([recorded_reads.expression(n, n, [T]) for n in names])
    assert [identity[1] for identity in reads.gpus] == list(range(6))
    assert all(got[n][int(n), 0] == 1.0 for n in names)
    assert len(client.started) == 6


def test_a_failed_query_is_prometheus_unavailable_and_stops_the_rest() -> None:
    client = _SlowFirst(fail="1")
    reads = recorded_reads.InstantReads(Reader(ReaderSettings(step_s=STEP), client=client), concurrent=2)
    with pytest.raises(PrometheusUnavailable, match="refused"):
        reads.run([recorded_reads.expression(str(i), str(i), [T]) for i in range(40)])
    assert len(client.started) < 40
