"""Reading DCGM history from Prometheus (or anything with its HTTP API) into the features' input frame.

One range query per source metric (`features.SOURCE_METRICS`) across ALL GPUs — never one per node — so a
scoring cycle costs a fixed number of queries whatever the fleet size. Metrics DCGM 4.6 renamed are
queried under both names in the same query (`{__name__=~"OLD|NEW"}`). Long ranges (training windows) are
cut into chunks of at most `max_points` steps per series, under Prometheus' 11,000-point limit.

`RecentWindow` keeps the last `lookback` in memory and, each cycle, asks only for what is new since the
previous cycle, so steady-state scoring reads minutes of data, not days.

Every failure to talk to Prometheus (connection refused, timeout after the retries, an HTTP error, a
response that is not Prometheus JSON) raises `PrometheusUnavailable`: the scoring job pauses, and says so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pandas as pd

from app.predict import allocator, features, range_answers, range_json
from app.predict.promql import HostRef, host_matchers, host_ref, selector

log = logging.getLogger(__name__)

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries with more points per series


class PrometheusUnavailable(Exception):
    """Prometheus could not be read; scoring pauses until it can."""

    def __init__(self, reason: str, *, query: str | None = None) -> None:
        self.reason = reason
        self.query = query
        super().__init__(f"Prometheus unavailable: {reason}" + (f" (query {query})" if query else ""))


class RangeClient(Protocol):
    """The part of `prometheus_api_client.PrometheusConnect` this module uses."""

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderSettings:
    url: str = "http://127.0.0.1:9090"
    step_s: float = 300.0
    lookback_s: float = 7 * 86400.0
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_points: int = 10_000
    verify_tls: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    # Answers uncompressed unless asked: gzip cost Prometheus ~13% of its CPU on a 10,000-node scoring
    # cycle's reads and the cycle ~11% of its time (docs/benchmarks.md), to save a network in the same
    # cluster ~0.8 GB a cycle. Across a slow link, compress (or set `Accept-Encoding` in `headers`).
    compress: bool = False
    metrics: tuple[str, ...] = features.SOURCE_METRICS
    # glibc's mmap threshold while answers are read into arrays (`allocator.lowered`; 0: glibc's own).
    mmap_threshold_bytes: int = 0


class HttpClient:
    """`PrometheusConnect` (timeouts, urllib3's retries with backoff on 429 and 5xx) for the calls it makes,
    and range answers as the body's bytes on the same session, for `range_json` to decode without a
    Python object per sample (the reads that answer every GPU)."""

    def __init__(self, settings: ReaderSettings) -> None:
        import requests  # noqa: PLC0415 - only when a reader connects
        from prometheus_api_client import PrometheusConnect  # noqa: PLC0415
        from urllib3.util.retry import Retry  # noqa: PLC0415

        retry = Retry(
            total=settings.retries,
            backoff_factor=settings.backoff_s,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
        )
        headers = dict(settings.headers)
        if not settings.compress and not any(name.lower() == "accept-encoding" for name in headers):
            headers["Accept-Encoding"] = "identity"
        self.url = settings.url.rstrip("/")
        self.headers = headers or None
        self.session = requests.Session()
        self.session.verify = settings.verify_tls
        # PrometheusConnect mounts its retrying adapter on the session given it: both paths retry alike.
        self.prometheus = PrometheusConnect(
            url=settings.url,
            headers=self.headers,
            disable_ssl=not settings.verify_tls,
            retry=retry,
            session=self.session,
            timeout=settings.timeout_s,
        )

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.prometheus.custom_query_range(
            query, start_time=start_time, end_time=end_time, step=step, params=params, timeout=timeout
        )
        return result

    def get_label_values(self, label_name: str, params: dict[str, Any] | None = None) -> list[str]:
        values: list[str] = self.prometheus.get_label_values(label_name, params=params)
        return values

    def range_body(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> bytes:
        """The body of a successful range query (the same request `custom_query_range` makes)."""
        response = self.session.get(
            f"{self.url}/api/v1/query_range",
            params={
                "query": query,
                "start": round(start_time.timestamp()),
                "end": round(end_time.timestamp()),
                "step": step,
                **(params or {}),
            },
            headers=self.headers,
            timeout=timeout,
        )
        if response.status_code != 200:
            raise PrometheusUnavailable(
                f"HTTP Status Code {response.status_code} ({response.content[:500]!r})"
            )
        return response.content


def connect(settings: ReaderSettings) -> RangeClient:
    """A client with timeouts and retries (urllib3's, with backoff, on 429 and 5xx)."""
    return HttpClient(settings)


def _millisecond_bounds(start: datetime, end: datetime) -> dict[str, str] | None:
    """The bounds to the millisecond where they are not whole seconds (the client rounds to seconds)."""
    if start.microsecond == 0 and end.microsecond == 0:
        return None
    return {"start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}"}


def chunks(
    start: datetime, end: datetime, *, step_s: float, max_points: int
) -> list[tuple[datetime, datetime]]:
    """[start, end] cut into pieces of at most `max_points` steps, contiguous on the step grid."""
    if end < start:
        return []
    span = timedelta(seconds=step_s * (max_points - 1))
    out: list[tuple[datetime, datetime]] = []
    cursor = start
    while cursor <= end:
        stop = min(end, cursor + span)
        out.append((cursor, stop))
        cursor = stop + timedelta(seconds=step_s)
    return out


class Reader:
    """Range reads of every source metric into one wide frame (one row per GPU per step)."""

    def __init__(self, settings: ReaderSettings, *, client: RangeClient | None = None) -> None:
        if settings.max_points > MAX_POINTS_PER_SERIES:
            raise ValueError(f"max_points above Prometheus' limit of {MAX_POINTS_PER_SERIES}")
        allocator.check(settings.mmap_threshold_bytes)
        self.settings = settings
        self._client = client
        self.queries = 0

    @property
    def client(self) -> RangeClient:
        if self._client is None:
            self._client = connect(self.settings)
        return self._client

    def query_range(
        self, query: str, start: datetime, end: datetime, *, step_s: float | None = None
    ) -> list[dict[str, Any]]:
        """The answer's series of one range query (cut into chunks), or `PrometheusUnavailable`."""
        out: list[dict[str, Any]] = []
        for one in self._chunks(query, start, end, step_s=step_s, body=False):
            if not isinstance(one, list):
                raise PrometheusUnavailable("the response is not a list of series", query=query)
            out.extend(one)
        return out

    def range_samples(
        self, query: str, start: datetime, end: datetime, *, step_s: float | None = None
    ) -> range_answers.Samples:
        """One range query's answer (cut into chunks) as columns, decoded from the body where the client
        gives it (`HttpClient`), else from the client's series; or `PrometheusUnavailable`."""
        parts: list[range_answers.Samples] = []
        for one in self._chunks(query, start, end, step_s=step_s, body=True):
            try:
                if isinstance(one, bytes):
                    parts.append(range_json.decode(one))
                elif isinstance(one, list):
                    parts.append(range_answers.samples(one))
                else:
                    raise range_answers.Malformed("the response is not a list of series")
            except range_answers.Malformed as exc:
                raise PrometheusUnavailable(str(exc), query=query) from exc
        return range_answers.Samples.joined(parts)

    def _chunks(
        self, query: str, start: datetime, end: datetime, *, step_s: float | None, body: bool
    ) -> Iterator[object]:
        """Each chunk's answer as the client gives it: the body's bytes where `body` and the client can."""
        step_s = self.settings.step_s if step_s is None else step_s
        step = f"{step_s:g}s"
        ask = getattr(self.client, "range_body", None) if body else None
        ask = ask or self.client.custom_query_range
        for lo, hi in chunks(start, end, step_s=step_s, max_points=self.settings.max_points):
            self.queries += 1
            try:
                answer = ask(
                    query,
                    start_time=lo,
                    end_time=hi,
                    step=step,
                    params=_millisecond_bounds(lo, hi),
                    timeout=math.ceil(self.settings.timeout_s),
                )
            except PrometheusUnavailable as exc:
                raise PrometheusUnavailable(exc.reason, query=query) from exc
            except Exception as exc:  # requests, urllib3 and the client's own errors all mean "not now"
                raise PrometheusUnavailable(f"{type(exc).__name__}: {exc}", query=query) from exc
            yield answer

    def metric_names(self, start: datetime, end: datetime, *, match: str) -> frozenset[str] | None:
        """The metric names of the series matching `match` with samples in [start, end] (`label_values`)."""
        return self.label_values("__name__", start, end, match=match)

    def label_values(
        self, label: str, start: datetime, end: datetime, *, match: str
    ) -> frozenset[str] | None:
        """The values of `label` on the series matching `match` with samples in [start, end] (Prometheus'
        label-values API: an index lookup, no series read; a store answers for each block overlapping the
        range), or None where the client has no such call."""
        ask = getattr(self.client, "get_label_values", None)
        if ask is None:
            return None
        params = {
            "start": f"{aware(start).timestamp():.3f}",
            "end": f"{aware(end).timestamp():.3f}",
            "match[]": match,
        }
        self.queries += 1
        what = f"{label} values of {match}"
        try:
            values = ask(label, params=params)
        except Exception as exc:  # requests, urllib3 and the client's own errors all mean "not now"
            raise PrometheusUnavailable(f"{type(exc).__name__}: {exc}", query=what) from exc
        if not isinstance(values, list):
            raise PrometheusUnavailable("the label values are not a list", query=what)
        return frozenset(str(v) for v in values)

    def read(self, start: datetime, end: datetime, *, hosts: Sequence[HostRef] = ()) -> pd.DataFrame:
        """Samples of every source metric on the grid start, start + step, ... ≤ end, for every GPU seen.

        With `hosts`, only those hosts' GPUs (a batch of a long read; still one query per metric).
        """
        start = aware(start)
        end = aware(end)
        step = self.settings.step_s
        grid_start = math.ceil(start.timestamp() / step) * step
        n_times = (
            math.floor((end.timestamp() - grid_start) / step) + 1 if end.timestamp() >= grid_start else 0
        )
        matchers = host_matchers(hosts)
        wanted = {h.node for h in hosts} or None
        gpus: dict[tuple[str, int, str], int] = {}
        cells: dict[str, range_answers.Cells] = {}
        with range_answers.collector_paused(), allocator.lowered(self.settings.mmap_threshold_bytes):
            for metric in self.settings.metrics:
                query = selector(metric, matchers)
                answer = self.range_samples(query, datetime.fromtimestamp(grid_start, UTC), end)
                cells[metric] = range_answers.parse(
                    answer, gpus, grid_start=grid_start, step=step, n_times=n_times, nodes=wanted
                )
                del answer
        return range_answers.assemble(gpus, cells, grid_start=grid_start, step=step, n_times=n_times)

    def hosts(self, start: datetime, end: datetime, *, metric: str = features.GPU_TEMP) -> list[HostRef]:
        """Every host with a series of `metric` in [start, end]: one cheap query (one point per host per
        coarse step), so a long range can be read in batches of hosts."""
        start, end = aware(start), aware(end)
        span = max(end.timestamp() - start.timestamp(), 0.0)
        step_s = max(self.settings.step_s, math.ceil(span / 500.0 / 60.0) * 60.0)
        by = ", ".join(features.HOST_COLUMNS)
        query = f"group by ({by}) (last_over_time({selector(metric)}[{step_s:g}s]))"
        found: set[HostRef] = set()
        for one in self.query_range(query, start, end, step_s=step_s):
            labels = one.get("metric", {}) if isinstance(one, Mapping) else {}
            ref = host_ref(labels) if isinstance(labels, Mapping) else None
            if ref is not None:
                found.add(ref)
        return sorted(found)


def aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)
