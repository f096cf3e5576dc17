"""The Prometheus reader against a small fake of Prometheus' HTTP API (a real server on loopback).

What matters: one query per source metric for ALL GPUs (never per node), both DCGM names in one query,
both host spellings, chunked long ranges, incremental refreshes, and a typed error when Prometheus is down.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from app.predict import features as f
from app.predict import prometheus, promql, recent_window

T0 = 1_740_960_000  # on the 5-minute grid
STEP = 300


@dataclass
class Series:
    name: str
    labels: dict[str, str]
    start: int = T0 - 10 * 86400
    slope: float = 1.0
    offset: float = 0.0

    def value(self, t: int) -> float:
        return self.offset + self.slope * (t - T0) / STEP


@dataclass
class FakePrometheus:
    series: list[Series] = field(default_factory=list)
    queries: list[dict[str, str]] = field(default_factory=list)
    fail_with: int | None = None
    encodings: list[str | None] = field(default_factory=list)  # each request's Accept-Encoding

    def answer(self, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.queries.append(params)
        if self.fail_with is not None:
            return self.fail_with, {"status": "error", "error": "boom"}
        query = params["query"]
        matched = re.fullmatch(r'\{__name__=~"([^"]+)"\}', query)
        names = set(matched.group(1).split("|")) if matched else {query}
        start, end, step = int(params["start"]), int(params["end"]), int(float(params["step"].rstrip("s")))
        result = []
        for s in self.series:
            if s.name not in names:
                continue
            times = [t for t in range(start, end + 1, step) if t >= s.start]
            if times:
                result.append(
                    {
                        "metric": {"__name__": s.name, **s.labels},
                        "values": [[t, str(s.value(t))] for t in times],
                    }
                )
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _handler(fake: FakePrometheus) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path != "/api/v1/query_range":
                self.send_error(404)
                return
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            fake.encodings.append(self.headers.get("Accept-Encoding"))
            code, body = fake.answer(params)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake() -> Iterator[tuple[FakePrometheus, str]]:
    state = FakePrometheus()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def fleet(state: FakePrometheus) -> None:
    """Two nodes with two GPUs each: one exporter says Hostname, the other hostname and DCGM 4.6 names."""
    for node, host_label, new_names in (("node-a", "Hostname", False), ("node-b", "hostname", True)):
        for gpu in range(2):
            labels = {
                host_label: node,
                "gpu": str(gpu),
                "UUID": f"GPU-{node}-{gpu}",
                "instance": f"{node}:9400",
            }
            temp = "DCGM_FI_DEV_GPU_TEMP_CELSIUS" if new_names else f.GPU_TEMP
            state.series.append(Series(temp, labels, slope=0.0, offset=50.0 + gpu))
            state.series.append(Series(f.SBE_AGG, labels, slope=2.0))
            state.series.append(Series(f.ENERGY, labels, slope=1000.0, offset=1e9))
            state.series.append(Series(f.XID, {**labels, "err_code": "0", "err_msg": "No Error"}, slope=0.0))
    # A pod label change splits one GPU's counter into two series; the reader merges them.
    split_labels = {"Hostname": "node-a", "gpu": "0", "UUID": "GPU-node-a-0", "pod": "trainer-1"}
    state.series.append(Series(f.PCIE_REPLAY, split_labels, start=T0 - 3600, slope=1.0))


def settings(url: str, **kwargs: Any) -> prometheus.ReaderSettings:
    return prometheus.ReaderSettings(
        url=url, step_s=STEP, lookback_s=6 * 3600, retries=0, timeout_s=5, **kwargs
    )


def at(t: int) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def test_one_query_per_metric_for_the_whole_fleet(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    fleet(state)
    reader = prometheus.Reader(settings(url))
    frame = reader.read(at(T0 - 3600), at(T0))
    assert reader.queries == len(f.SOURCE_METRICS) == len(state.queries)
    assert not any("node" in q["query"] or "Hostname" in q["query"] for q in state.queries)
    assert sorted(set(zip(frame["node"], frame["gpu"], strict=True))) == [
        ("node-a", 0),
        ("node-a", 1),
        ("node-b", 0),
        ("node-b", 1),
    ]
    assert len(frame) == 4 * 13  # 4 GPUs x 13 instants (an hour at 5 minutes, both ends)
    # DCGM 4.6's GPU_TEMP_CELSIUS arrives under the old name.
    b1 = frame[(frame["node"] == "node-b") & (frame["gpu"] == 1)]
    assert (b1[f.GPU_TEMP] == 51.0).all()
    assert (frame["present"] == 1).all()
    table = f.compute_features(frame, last_only=True)
    assert table["sbe_rate_1h"].tolist() == pytest.approx([24.0] * 4)  # 2 per 5 minutes


def test_aliases_are_queried_together(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    prometheus.Reader(settings(url)).read(at(T0 - 600), at(T0))
    queries = {q["query"] for q in state.queries}
    assert '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS"}' in queries
    assert f.SBE_AGG in queries


def test_long_ranges_are_read_in_chunks_without_gaps_or_duplicates(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    fleet(state)
    reader = prometheus.Reader(settings(url, max_points=10, metrics=(f.SBE_AGG,)))
    frame = reader.read(at(T0 - 24 * STEP), at(T0))
    assert reader.queries == 3  # 25 points in chunks of at most 10
    one = frame[(frame["node"] == "node-a") & (frame["gpu"] == 0)].sort_values("timestamp")
    assert np.diff(one["timestamp"].to_numpy()).tolist() == [STEP] * 24
    assert one[f.SBE_AGG].tolist() == [2.0 * k for k in range(-24, 1)]


def test_chunks_cover_the_range_on_the_grid() -> None:
    pieces = prometheus.chunks(at(0), at(9 * 60), step_s=60, max_points=4)
    assert [(a.timestamp(), b.timestamp()) for a, b in pieces] == [(0, 180), (240, 420), (480, 540)]


def test_several_series_of_one_gpu_are_merged(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    fleet(state)
    frame = prometheus.Reader(settings(url, metrics=(f.PCIE_REPLAY, f.GPU_TEMP))).read(at(T0 - 1800), at(T0))
    a0 = frame[(frame["node"] == "node-a") & (frame["gpu"] == 0)]
    assert a0[f.PCIE_REPLAY].notna().all()
    others = frame[(frame["node"] != "node-a") | (frame["gpu"] != 0)]
    assert others[f.PCIE_REPLAY].isna().all()


def test_recent_window_reads_only_what_is_new(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    fleet(state)
    window = recent_window.RecentWindow(prometheus.Reader(settings(url, metrics=(f.SBE_AGG,))))
    first = window.refresh(at(T0))
    assert len(first) == 4 * 73  # six hours at 5 minutes, both ends
    window.refresh(at(T0 + 2 * STEP))
    last = state.queries[-1]
    assert int(last["start"]) == T0 + STEP
    assert int(last["end"]) == T0 + 2 * STEP
    second = window.refresh(at(T0 + 2 * STEP))  # nothing new: no query, same frame
    assert len(second) == 4 * 73
    assert second["timestamp"].min() == T0 + 2 * STEP - 6 * 3600


def test_a_gpu_that_vanishes_keeps_rows_marked_missing(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    labels = {"Hostname": "node-a", "gpu": "0", "UUID": "GPU-0"}
    state.series.append(Series(f.GPU_TEMP, labels, slope=0.0, offset=50))
    state.series.append(Series(f.GPU_TEMP, {**labels, "gpu": "1", "UUID": "GPU-1"}, slope=0.0, offset=50))
    window = recent_window.RecentWindow(prometheus.Reader(settings(url, metrics=(f.GPU_TEMP,))))
    window.refresh(at(T0))
    state.series = state.series[:1]  # GPU 1 falls off the bus: its series stop
    frame = window.refresh(at(T0 + 3 * STEP))
    gone = frame[(frame["gpu"] == 1) & (frame["timestamp"] > T0)]
    assert len(gone) == 3
    assert (gone["present"] == 0).all()


def test_prometheus_down_is_a_typed_error() -> None:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reader = prometheus.Reader(settings(f"http://127.0.0.1:{port}"))
    with pytest.raises(prometheus.PrometheusUnavailable) as caught:
        reader.read(at(T0 - 600), at(T0))
    assert caught.value.query is not None


def test_an_http_error_is_a_typed_error(fake: tuple[FakePrometheus, str]) -> None:
    state, url = fake
    state.fail_with = 422
    with pytest.raises(prometheus.PrometheusUnavailable, match="422"):
        prometheus.Reader(settings(url)).read(at(T0 - 600), at(T0))


def test_gpu_identity_accepts_every_host_spelling() -> None:
    for label in ("node", "Hostname", "hostname", "kubernetes_node"):
        assert promql.gpu_identity({label: "n1", "gpu": "3", "uuid": "GPU-x"}) == ("n1", 3, "GPU-x")
    assert promql.gpu_identity({"instance": "10.0.0.1:9400", "gpu": "0"}) == ("10.0.0.1", 0, "")
    assert promql.gpu_identity({"Hostname": "n1"}) is None


def test_answers_are_asked_uncompressed_unless_compression_is_asked_for(
    fake: tuple[FakePrometheus, str],
) -> None:
    state, url = fake
    fleet(state)
    for one in (
        settings(url),
        settings(url, compress=True),
        settings(url, headers={"accept-encoding": "br"}),
    ):
        prometheus.Reader(one).query_range(f.GPU_TEMP, at(T0 - 600), at(T0))
    assert state.encodings == ["identity", "gzip, deflate", "br"]  # requests' own default when compressing
