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

import gc
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import features

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
    metrics: tuple[str, ...] = features.SOURCE_METRICS


def connect(settings: ReaderSettings) -> RangeClient:
    """A `PrometheusConnect` with timeouts and retries (urllib3's, with backoff, on 429 and 5xx)."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 - only when a reader connects
    from urllib3.util.retry import Retry  # noqa: PLC0415

    retry = Retry(
        total=settings.retries,
        backoff_factor=settings.backoff_s,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "POST"}),
        raise_on_status=False,
    )
    client: RangeClient = PrometheusConnect(
        url=settings.url,
        headers=dict(settings.headers) or None,
        disable_ssl=not settings.verify_tls,
        retry=retry,
        timeout=settings.timeout_s,
    )
    return client


def selector(metric: str, matchers: Sequence[str] = ()) -> str:
    """The PromQL selector for a source metric and its DCGM 4.6 name, if it has one.

    With `matchers` (label matchers such as `Hostname=~"a|b"`), the series that match any of them: one
    selector per matcher joined with `or` — still one query, whatever the number of hosts.
    """
    names = [metric, *(old for old, new in features.ALIASES.items() if new == metric)]
    if not matchers:
        return metric if len(names) == 1 else '{__name__=~"' + "|".join(names) + '"}'
    if len(names) == 1:
        return " or ".join(f"{metric}{{{m}}}" for m in matchers)
    name = '__name__=~"' + "|".join(names) + '"'
    return " or ".join(f"{{{name}, {m}}}" for m in matchers)


def host_matchers(hosts: Iterable[HostRef]) -> list[str]:
    """Label matchers selecting these hosts' series: one regex matcher per host label spelling."""
    by_label: dict[str, list[str]] = {}
    for host in hosts:
        values = by_label.setdefault(host.label, [])
        if host.value not in values:
            values.append(host.value)
    return [
        f'{label}=~"{_string("|".join(_regex(v) for v in values))}"' for label, values in by_label.items()
    ]


def _regex(value: str) -> str:
    """`value` as a literal in an RE2 regular expression."""
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in value)


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _string(text: str) -> str:
    """`text` inside a double-quoted PromQL string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True, slots=True, order=True)
class HostRef:
    """A host as the series name it: the node name features use, and the label (and raw value) naming it."""

    node: str
    label: str
    value: str


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


@dataclass(slots=True)
class _Gpu:
    node: str
    gpu: int
    uuid: str


class Reader:
    """Range reads of every source metric into one wide frame (one row per GPU per step)."""

    def __init__(self, settings: ReaderSettings, *, client: RangeClient | None = None) -> None:
        if settings.max_points > MAX_POINTS_PER_SERIES:
            raise ValueError(f"max_points above Prometheus' limit of {MAX_POINTS_PER_SERIES}")
        self.settings = settings
        self._client = client
        self.queries = 0

    @property
    def client(self) -> RangeClient:
        if self._client is None:
            self._client = connect(self.settings)
        return self._client

    def _range(
        self, query: str, start: datetime, end: datetime, *, step_s: float | None = None
    ) -> list[dict[str, Any]]:
        step_s = self.settings.step_s if step_s is None else step_s
        step = f"{step_s:g}s"
        out: list[dict[str, Any]] = []
        for lo, hi in chunks(start, end, step_s=step_s, max_points=self.settings.max_points):
            self.queries += 1
            try:
                result = self.client.custom_query_range(
                    query, start_time=lo, end_time=hi, step=step, timeout=math.ceil(self.settings.timeout_s)
                )
            except Exception as exc:  # requests, urllib3 and the client's own errors all mean "not now"
                raise PrometheusUnavailable(f"{type(exc).__name__}: {exc}", query=query) from exc
            if not isinstance(result, list):
                raise PrometheusUnavailable("the response is not a list of series", query=query)
            out.extend(result)
        return out

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
        cells: dict[str, _Cells] = {}
        with _collector_paused():
            for metric in self.settings.metrics:
                query = selector(metric, matchers)
                series = self._range(query, datetime.fromtimestamp(grid_start, UTC), end)
                try:
                    cells[metric] = _parse(
                        series, gpus, grid_start=grid_start, step=step, n_times=n_times, nodes=wanted
                    )
                except _Malformed as exc:
                    raise PrometheusUnavailable(str(exc), query=query) from exc
                del series
        return _assemble(gpus, cells, grid_start=grid_start, step=step, n_times=n_times)

    def hosts(self, start: datetime, end: datetime, *, metric: str = features.GPU_TEMP) -> list[HostRef]:
        """Every host with a series of `metric` in [start, end]: one cheap query (one point per host per
        coarse step), so a long range can be read in batches of hosts."""
        start, end = aware(start), aware(end)
        span = max(end.timestamp() - start.timestamp(), 0.0)
        step_s = max(self.settings.step_s, math.ceil(span / 500.0 / 60.0) * 60.0)
        by = ", ".join(features.HOST_COLUMNS)
        query = f"group by ({by}) (last_over_time({selector(metric)}[{step_s:g}s]))"
        found: set[HostRef] = set()
        for one in self._range(query, start, end, step_s=step_s):
            labels = one.get("metric", {}) if isinstance(one, Mapping) else {}
            ref = host_ref(labels) if isinstance(labels, Mapping) else None
            if ref is not None:
                found.add(ref)
        return sorted(found)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk read. Parsing a range answer allocates millions
    of small lists, and the collector would rescan all of them again and again (a read runs several
    times slower); reference counting still frees them, and the collector runs again afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def host_ref(labels: Mapping[str, str]) -> HostRef | None:
    """The host a series' labels name, as `gpu_identity` reads it, with the label that names it."""
    label = next((name for name in features.HOST_COLUMNS if labels.get(name)), None)
    if label is None:
        return None
    value = labels[label]
    node = value.rsplit(":", 1)[0] if label == "instance" and ":" in value else value
    return HostRef(node=node, label=label, value=value)


def gpu_identity(labels: Mapping[str, str]) -> tuple[str, int, str] | None:
    """(node, gpu, uuid) from a series' labels, accepting every host spelling; None without host or gpu."""
    host = next((labels[name] for name in features.HOST_COLUMNS if labels.get(name)), None)
    gpu = labels.get("gpu")
    if host is None or gpu is None or not gpu.isdigit():
        return None
    if host == labels.get("instance") and "node" not in labels:
        host = host.rsplit(":", 1)[0] if ":" in host else host
    return host, int(gpu), labels.get("UUID") or labels.get("uuid") or ""


@dataclass(frozen=True, slots=True)
class _Cells:
    """One metric's samples of a read, as parallel arrays: the GPU's index, the grid slot, the value."""

    index: npt.NDArray[np.int64]
    slot: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]


class _Malformed(ValueError):
    """A range answer whose samples are not [time, value] pairs."""


def _parse(
    series: Iterable[Mapping[str, Any]],
    gpus: dict[tuple[str, int, str], int],
    *,
    grid_start: float,
    step: float,
    n_times: int,
    nodes: set[str] | None = None,
) -> _Cells:
    """Every sample of one query's answer on the grid, in one vectorised pass over all its series.

    Python touches each series once (its labels) and each sample once (flattening); conversion and slotting
    are numpy's. Values are Prometheus' strings ("NaN" and "+Inf" included), or numbers; one that is neither
    reads as NaN. Samples off the grid's range are dropped; GPUs are numbered in `gpus` as first seen.
    """
    indices: list[int] = []
    counts: list[int] = []
    samples: list[Any] = []
    for one in series:
        labels = one.get("metric", {})
        values = one.get("values", [])
        identity = gpu_identity(labels) if isinstance(labels, Mapping) else None
        if identity is None or not values or (nodes is not None and identity[0] not in nodes):
            continue
        indices.append(gpus.setdefault(identity, len(gpus)))
        counts.append(len(values))
        samples.extend(values)
    flat = list(chain.from_iterable(samples))
    if len(flat) != 2 * len(samples):
        raise _Malformed("a sample of the answer is not a [time, value] pair")
    pairs = np.array(flat, dtype=object)
    del flat
    t = _floats(pairs[0::2], strict=True)
    v = _floats(pairs[1::2], strict=False)
    slot = np.rint((t - grid_start) / step).astype(np.int64)
    index = np.repeat(np.array(indices, dtype=np.int64), counts)
    ok = (slot >= 0) & (slot < n_times)
    return _Cells(index=index[ok], slot=slot[ok], value=v[ok])


def _floats(items: npt.NDArray[np.object_], *, strict: bool) -> npt.NDArray[np.float64]:
    """Numbers and numeric strings as float64, exactly as `float()` reads each (numpy calls it per item).

    Not strict: what `float()` refuses reads as NaN, item by item (only then, so the usual case stays fast).
    """
    try:
        return items.astype(np.float64)
    except (TypeError, ValueError) as exc:
        if strict:
            raise _Malformed(f"a sample time is not a number: {exc}") from exc
        return np.fromiter((_number(x) for x in items), dtype=np.float64, count=len(items))


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def _assemble(
    gpus: Mapping[tuple[str, int, str], int],
    cells: Mapping[str, _Cells],
    *,
    grid_start: float,
    step: float,
    n_times: int,
) -> pd.DataFrame:
    n_gpus = len(gpus)
    identities = sorted(gpus, key=gpus.__getitem__)
    times = grid_start + step * np.arange(n_times, dtype=np.float64)
    keys: dict[str, Any] = {
        "node": np.repeat(np.array([g[0] for g in identities], dtype=object), n_times),
        "gpu": np.repeat(np.array([g[1] for g in identities], dtype=np.int64), n_times),
        "uuid": np.repeat(np.array([g[2] for g in identities], dtype=object), n_times),
    }
    values = np.full((len(cells), n_gpus * n_times), np.nan)
    for column, cell in zip(values, cells.values(), strict=True):
        # Several series per GPU (pod labels change, both DCGM names): keep the largest value (fmax: a NaN
        # loses to a number).
        np.fmax.at(column, cell.index * n_times + cell.slot, cell.value)
    present = (~np.isnan(values)).any(axis=0).astype(np.int64)
    return grid_frame(keys, np.tile(times, n_gpus), names=list(cells), values=values, present=present)


def grid_frame(
    keys: Mapping[str, Any],
    timestamps: npt.NDArray[np.float64],
    *,
    names: Sequence[str],
    values: npt.NDArray[np.float64],
    present: npt.NDArray[np.int64],
) -> pd.DataFrame:
    """The frame: `keys`, timestamp, a column per name (a row of `values`), present. The samples are not
    copied: pandas keeps float columns as one (columns x rows) block, which `values` already is."""
    frame = pd.DataFrame(values.T, columns=list(names), copy=False)
    for position, (key, column) in enumerate(keys.items()):
        frame.insert(position, key, column)
    frame.insert(len(keys), "timestamp", timestamps)
    frame["present"] = present
    return frame
