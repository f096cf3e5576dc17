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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.demo.processes import free_port
from app.predict import range_answers, recorded_lacking, recorded_reader, recorded_reads
from app.predict import recorded_presence as presence
from app.predict import recorded_rules as rr
from app.predict.features import fields as f
from app.predict.prometheus import PrometheusUnavailable, Reader, ReaderSettings
from app.predict.promql import selector
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


PCIE_7D = "gpu:DCGM_FI_DEV_PCIE_REPLAY_COUNTER:increase7d"
SERIES = [
    # node-a GPU 0: temperature under the DCGM 4.6 name, memory temperature blank, quiet counters.
    ('DCGM_FI_DEV_GPU_TEMP_CELSIUS{Hostname="node-a",gpu="0",UUID="GPU-a0",pod="p"}', "61"),
    ('DCGM_FI_DEV_MEMORY_TEMP{Hostname="node-a",gpu="0",UUID="GPU-a0"}', BLANK),
    ('DCGM_FI_DEV_ROW_REMAP_PENDING{Hostname="node-a",gpu="0",UUID="GPU-a0"}', "0"),
    ('DCGM_FI_DEV_PCIE_REPLAY_COUNTER{Hostname="node-a",gpu="0",UUID="GPU-a0"}', "0"),
    # node-a GPU 1: temperature in two series (the pod label changed), a pending remap, PCIe replays.
    ('DCGM_FI_DEV_GPU_TEMP{Hostname="node-a",gpu="1",UUID="GPU-a1",pod="old"}', "58"),
    ('DCGM_FI_DEV_GPU_TEMP{Hostname="node-a",gpu="1",UUID="GPU-a1",pod="new"}', "59"),
    ('DCGM_FI_DEV_ROW_REMAP_PENDING{Hostname="node-a",gpu="1",UUID="GPU-a1"}', "1"),
    ('DCGM_FI_DEV_PCIE_REPLAY_COUNTER{Hostname="node-a",gpu="1",UUID="GPU-a1"}', "7"),
    # node-b GPU 0, named by `instance` only: a temperature, a NaN utilisation, neither remap nor PCIe.
    ('DCGM_FI_DEV_GPU_TEMP{instance="node-b:9400",gpu="0",UUID="GPU-b0"}', "70"),
    ('DCGM_FI_DEV_GPU_UTIL{instance="node-b:9400",gpu="0",UUID="GPU-b0"}', "NaN"),
    # The rules' series as they write them (the GPU's names only): every GPU's week of samples, and the
    # PCIe week's increase and the hour's valid rows of the two GPUs exporting the counter.
    *(
        (f"{rr.SAMPLES}{{{labels}}}", str(rr.FULL_WEEK))
        for labels in (
            'Hostname="node-a",gpu="0",UUID="GPU-a0"',
            'Hostname="node-a",gpu="1",UUID="GPU-a1"',
            'instance="node-b:9400",gpu="0",UUID="GPU-b0"',
        )
    ),
    # An older bundle's thermal moments without the line recorded from them (`rr.SUCCESSORS`).
    (f'{rr.thermal("gpu", "util")}{{Hostname="node-a",gpu="0",UUID="GPU-a0"}}', "50"),
    (f'{PCIE_7D}{{Hostname="node-a",gpu="0",UUID="GPU-a0"}}', "0"),
    (f'{PCIE_7D}{{Hostname="node-a",gpu="1",UUID="GPU-a1"}}', "3"),
    (f'{rr.PCIE_COUNT.name("1h")}{{Hostname="node-a",gpu="0",UUID="GPU-a0"}}', "12"),
    (f'{rr.PCIE_COUNT.name("1h")}{{Hostname="node-a",gpu="1",UUID="GPU-a1"}}', "12"),
]
A0, A1, B0 = ("node-a", 0, "GPU-a0"), ("node-a", 1, "GPU-a1"), ("node-b", 0, "GPU-b0")


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


def _by_gpu(
    reads: recorded_reads.InstantReads, values: np.ndarray
) -> dict[tuple[str, int, str], list[float]]:
    return {gpu: values[i].tolist() for gpu, i in reads.gpus.items()}


def test_the_label_values_api_names_the_fleets_fields_under_either_dcgm_name(url: str) -> None:
    reader = Reader(ReaderSettings(url=url, step_s=STEP))
    start, end = datetime.fromtimestamp(T - STEP, UTC), datetime.fromtimestamp(T, UTC)
    exported = presence.exported(reader.metric_names(start, end, match=presence.NAMES_MATCH))
    assert f.GPU_TEMP in exported  # some GPUs under DCGM 4.6's DCGM_FI_DEV_GPU_TEMP_CELSIUS
    assert {f.REMAP_PENDING, f.PCIE_REPLAY, f.MEMORY_TEMP, f.GPU_UTIL} <= exported
    assert f.SBE_AGG not in exported
    assert presence.exported(None) == frozenset(f.SOURCE_METRICS)  # unknown: every field


def test_a_sparse_raw_read_sends_non_zero_values_and_the_lacking_read_the_gpus_without_the_field(
    url: str,
) -> None:
    reads = _reads(url)
    got = reads.run(
        [
            recorded_reads.raw(f.GPU_TEMP, [T]),
            recorded_reads.raw(f.REMAP_PENDING, [T], sparse=True),
            recorded_reads.lacking_raw(f.REMAP_PENDING, [T]),
        ],
        remember=f.GPU_TEMP,
    )
    assert _by_gpu(reads, got[f.GPU_TEMP]) == {A0: [61.0], A1: [59.0], B0: [70.0]}  # two series: the largest
    assert _by_gpu(reads, got[f.REMAP_PENDING]) == {A0: [0.0], A1: [1.0], B0: [0.0]}  # left out: 0
    assert _by_gpu(reads, got[recorded_reads.LACKING + f.REMAP_PENDING]) == {A0: [0.0], A1: [0.0], B0: [1.0]}
    assert set(reads.refs) == {"node-a", "node-b"}
    assert reads.refs["node-b"].label == "instance"


def test_a_sparse_record_read_and_a_dense_read_of_it_for_the_gpus_with_its_field(url: str) -> None:
    reads = _reads(url)
    got = reads.run(
        [
            recorded_reads.raw(f.GPU_TEMP, [T]),
            recorded_reads.recorded(PCIE_7D, [T], step_s=STEP, sparse=True),
            recorded_reads.recorded(PCIE_7D, [T], step_s=STEP, name=recorded_reads.HAS + f.PCIE_REPLAY),
        ]
    )
    assert _by_gpu(reads, got[PCIE_7D]) == {A0: [0.0], A1: [3.0], B0: [0.0]}  # left out: 0
    dense = _by_gpu(reads, got[recorded_reads.HAS + f.PCIE_REPLAY])
    assert dense[A0] == [0.0]
    assert dense[A1] == [3.0]
    assert np.isnan(dense[B0]).all()  # node-b has no PCIe counter: no record, not answered


def test_each_field_read_sparse_has_one_dense_read_saying_which_gpus_have_it() -> None:
    hourly = [T - 3600.0, T]
    flit_24h = rr.increase(f.NVLINK_CRC_FLIT, rr.DAY_MIN)
    flit_7d = rr.increase(f.NVLINK_CRC_FLIT, rr.WEEK_MIN)
    replay_1h = rr.hourly(f.NVLINK_REPLAY, "increase{w}")
    pcie_1h = rr.hourly(f.PCIE_REPLAY, "increase{w}")
    records = [
        recorded_reads.recorded(rr.SAMPLES, [T], step_s=STEP),
        recorded_reads.recorded(flit_24h, [T], step_s=STEP, sparse=True),
        recorded_reads.recorded(flit_7d, [T], step_s=STEP, sparse=True),
        recorded_reads.recorded(replay_1h, hourly, step_s=STEP, sparse=True),
        recorded_reads.recorded(pcie_1h, hourly, step_s=STEP, sparse=True),
        recorded_reads.recorded(rr.PCIE_COUNT.name("1h"), hourly, step_s=STEP),
    ]
    out, probes = recorded_reader._with_presence(records, [T], step_s=STEP)
    by_name = {read.name: read for read in out}
    # A field read dense already says it; else its first record at the instants turns dense; else (hourly
    # records only) one of them is read dense at the instants, apart.
    assert probes[f.PCIE_REPLAY] == rr.PCIE_COUNT.name("1h")
    assert probes[f.NVLINK_CRC_FLIT] == flit_24h
    assert not by_name[flit_24h].sparse
    assert by_name[flit_7d].sparse
    assert by_name[pcie_1h].sparse
    assert by_name[replay_1h].sparse
    has = recorded_reads.HAS + f.NVLINK_REPLAY
    assert probes[f.NVLINK_REPLAY] == has
    assert not by_name[has].sparse
    assert by_name[has].times == (T,)
    assert replay_1h in by_name[has].query
    assert len(out) == len(records) + 1
    assert f.GPU_TEMP not in probes  # never read sparse: its absence shows in its own dense reads


def test_the_cycles_values_keep_a_field_a_gpu_does_not_export_missing_and_its_quiet_counters_zero(
    url: str,
) -> None:
    reads = _reads(url)
    values = recorded_reader._read_values(reads, [T])
    by = {
        name: _by_gpu(reads, values[name])
        for name in (PCIE_7D, f.REMAP_PENDING, f.PCIE_REPLAY, f.MEMORY_TEMP)
    }
    assert by[PCIE_7D][A0] == [0.0]
    assert by[PCIE_7D][A1] == [3.0]
    assert np.isnan(by[PCIE_7D][B0]).all()  # node-b exports no PCIe counter: missing, never 0
    assert by[f.REMAP_PENDING][A0] == [0.0]
    assert np.isnan(by[f.REMAP_PENDING][B0]).all()
    # The frame's PCIe column: present on node-a's GPUs; memory temperature has no record (blank): absent.
    assert by[f.PCIE_REPLAY][A0] == by[f.PCIE_REPLAY][A1] == [presence.PRESENT]
    assert np.isnan(by[f.PCIE_REPLAY][B0]).all()
    assert all(np.isnan(v).all() for v in by[f.MEMORY_TEMP].values())


class _NoLabelValues(Reader):
    """A reader whose Prometheus has no label-values API (a client without the call)."""

    def label_values(
        self, label: str, start: datetime, end: datetime, *, match: str
    ) -> frozenset[str] | None:
        return None


class _Counting(Reader):
    """A reader that keeps the range queries it sends."""

    def __init__(self, settings: ReaderSettings) -> None:
        super().__init__(settings)
        self.sent: list[str] = []

    def query_range(self, query: str, start: datetime, end: datetime, *, step_s: float | None = None) -> Any:
        self.sent.append(query)
        return super().query_range(query, start, end, step_s=step_s)

    def range_samples(
        self, query: str, start: datetime, end: datetime, *, step_s: float | None = None
    ) -> range_answers.Samples:
        self.sent.append(query)
        return super().range_samples(query, start, end, step_s=step_s)

    def label_values(
        self, label: str, start: datetime, end: datetime, *, match: str
    ) -> frozenset[str] | None:
        self.sent.append(f"{label} of {match}")
        return super().label_values(label, start, end, match=match)


@pytest.mark.parametrize("reader_type", [_Counting, _NoLabelValues], ids=["label-values", "joins"])
def test_the_cycles_values_of_a_value_field_are_the_same_from_uuids_as_from_joins(
    url: str, reader_type: type[Reader]
) -> None:
    reads = recorded_reads.InstantReads(reader_type(ReaderSettings(url=url, step_s=STEP)))
    values = recorded_reader._read_values(reads, [T])
    got = _by_gpu(reads, values[f.REMAP_PENDING])
    assert got[A0] == [0.0]
    assert got[A1] == [1.0]
    assert np.isnan(got[B0]).all()  # node-b exports no remap field: missing, never 0
    if isinstance(reads.reader, _Counting):  # the label values said it: no join sent
        assert not [q for q in reads.reader.sent if " unless " in q]
        # Asked under dcgm-exporter's `UUID`; under `uuid` only where a GPU seen was not named by it.
        asked = [q.split(" of ")[0] for q in reads.reader.sent if q.endswith(selector(f.REMAP_PENDING))]
        assert asked == ["UUID", "uuid"]  # node-b's GPU has no remap series: asked again
        # A field no series is named after is not asked about (its features are NaN).
        assert not [q for q in reads.reader.sent if q.endswith(selector(f.RETIRED_SBE))]


@dataclass
class _Labels:
    """A reader's label-values API over a fixed answer per label (None: no such API)."""

    answers: dict[str, frozenset[str] | None]
    settings: ReaderSettings = field(default_factory=lambda: ReaderSettings(step_s=STEP))
    asked: list[str] = field(default_factory=list)

    def label_values(
        self, label: str, start: datetime, end: datetime, *, match: str
    ) -> frozenset[str] | None:
        self.asked.append(label)
        return self.answers.get(label, frozenset())


def test_a_field_is_asked_for_under_the_lower_case_uuid_only_where_the_exporters_label_names_none() -> None:
    seen = np.array([[True], [True], [False]])
    uuids = ["GPU-a", "GPU-b", "GPU-c"]
    one = _Labels({"UUID": frozenset({"GPU-a", "GPU-b"})})
    got = recorded_lacking._lacking_one(one, f.REMAP_PENDING, uuids, seen, [T])  # type: ignore[arg-type]
    assert got is not None
    assert got.tolist() == [[False], [False], [False]]
    assert one.asked == ["UUID"]  # every GPU seen named: the other spelling not asked
    relabeled = _Labels({"uuid": frozenset({"GPU-b"})})
    got = recorded_lacking._lacking_one(relabeled, f.REMAP_PENDING, uuids, seen, [T])  # type: ignore[arg-type]
    assert got is not None
    assert got.tolist() == [[True], [False], [False]]
    assert relabeled.asked == ["UUID", "uuid"]
    no_api = _Labels({"UUID": None})
    assert recorded_lacking._lacking_one(no_api, f.REMAP_PENDING, uuids, seen, [T]) is None  # type: ignore[arg-type]


def test_a_gpu_without_a_uuid_leaves_its_fields_to_the_joins() -> None:
    seen = np.array([[True, True], [True, False], [False, False]])
    lacking = presence.lacking_by_uuid(["GPU-a", "GPU-b", ""], seen, {"GPU-a"})
    assert lacking is not None  # the GPU without a UUID has no temperature: not asked about
    assert lacking.tolist() == [[False, False], [True, False], [False, False]]
    none_have = presence.lacking_by_uuid(["GPU-a", "GPU-b", ""], seen, frozenset())
    assert none_have is not None
    assert none_have.tolist() == seen.tolist()
    seen[2, 1] = True
    assert presence.lacking_by_uuid(["GPU-a", "GPU-b", ""], seen, {"GPU-a"}) is None


def test_frame_values_without_a_read_follow_the_lacking_read_then_the_records_then_the_fleet() -> None:
    seen = np.array([[True], [True], [False]])
    lacking = np.array([[False], [True], [False]])
    got = presence.frame_values(f.PCIE_REPLAY, {}, seen=seen, lacking=lacking, exported=True)
    assert got[0, 0] == presence.PRESENT
    assert np.isnan(got[1:, 0]).all()
    record = {"gpu:DCGM_FI_DEV_MEMORY_TEMP:avg_over_time7d": np.array([[40.0], [np.nan], [41.0]])}
    got = presence.frame_values(f.MEMORY_TEMP, record, seen=seen, lacking=None, exported=True)
    assert got[:, 0].tolist()[0] == presence.PRESENT
    assert np.isnan(got[1, 0])
    assert (
        presence.frame_values(f.ENERGY, {}, seen=seen, lacking=None, exported=True)[0, 0] == presence.PRESENT
    )
    assert np.isnan(presence.frame_values(f.ENERGY, {}, seen=seen, lacking=None, exported=False)).all()


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


class _Overlap:
    """A client that notes which queries were answering at the same time."""

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.together: list[frozenset[str]] = []
        self.lock = threading.Lock()

    def custom_query_range(
        self, query: str, start_time: datetime, end_time: datetime, step: str, **_: Any
    ) -> list[dict[str, Any]]:
        with self.lock:
            self.active.add(query)
            self.together.append(frozenset(self.active))
        time.sleep(0.05)
        with self.lock:
            self.active.discard(query)
        return []


def test_a_many_point_read_is_in_flight_alone_dense_two_point_reads_two_at_a_time_sparse_ones_three() -> None:
    client = _Overlap()
    reads = recorded_reads.InstantReads(Reader(ReaderSettings(step_s=STEP), client=client), concurrent=3)
    hours = [T + 3600.0 * k for k in range(12)]  # one query of 12 points
    pairs = [T, T + 1800.0]  # one query of 2 points
    plan = [
        *(("pair", i, pairs) for i in range(4)),
        ("hours", 0, hours),
        *(("pair", i, pairs) for i in range(4, 8)),
    ]
    wanted = [recorded_reads.expression(f"{kind}{i}", f"{kind}{i}", times) for kind, i, times in plan]
    sparse = [recorded_reads.Read(f"sparse{i}", f"sparse{i}", tuple(pairs), sparse=True) for i in range(8)]
    reads.run([*wanted, *sparse])
    dense_groups = [group for group in client.together if not any(q.startswith("sparse") for q in group)]
    # Dense answers waiting at once: `HELD` two-point reads' worth.
    assert max(len(group) for group in dense_groups) == recorded_reads.HELD == 2
    assert all(group == {"hours0"} for group in client.together if "hours0" in group)
    # Sparse answers are small: as many in flight as there are threads.
    assert max(len(group) for group in client.together if all(q.startswith("sparse") for q in group)) == 3


def test_rules_of_an_older_bundle_are_read_raw_and_said_so(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = recorded_reader.FeatureReader(Reader(ReaderSettings(url=url, step_s=STEP)))
    assert not reader._rules_installed(datetime.fromtimestamp(T, UTC))
    assert reader._stale == (rr.thermal("gpu", "slope"), rr.thermal("gpu", "intercept"))
    with caplog.at_level("WARNING"):
        reader._say(recorded_reader.RAW)
    assert "older than this Sickbay" in caplog.text
    assert rr.thermal("gpu", "slope") in caplog.text
    current = frozenset(
        {rr.thermal("gpu", "util"), rr.thermal("gpu", "slope"), rr.thermal("gpu", "intercept")}
    )
    assert rr.stale_records(current) == ()
    assert rr.stale_records(frozenset({rr.SAMPLES})) == ()  # no utilisation, no line: nothing missing
