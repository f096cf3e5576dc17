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
        start = _aware(start)
        end = _aware(end)
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
        start, end = _aware(start), _aware(end)
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


def _aware(t: datetime) -> datetime:
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
    return _grid_frame(keys, np.tile(times, n_gpus), names=list(cells), values=values, present=present)


def _grid_frame(
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


class RecentWindow:
    """The last `lookback` of samples, refreshed incrementally: each `refresh(now)` reads only new steps.

    The window is a full grid: every GPU seen has a row at every instant (present=0 where it has no sample),
    GPU after GPU, instants in order. A refresh drops the instants that left the look-back and appends the
    new ones by array copies (`_extend_grid`), never re-matching the whole window row by row; a read that
    is not such a grid (a `Reader` subclass's) is merged in by `_fill_grid`, the general way, instead.
    """

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self._frame: pd.DataFrame | None = None
        self._until: float | None = None
        self._times: npt.NDArray[np.float64] | None = None  # the window's instants, while it is a grid

    def refresh(self, now: datetime) -> pd.DataFrame:
        settings = self.reader.settings
        now_s = _aware(now).timestamp()
        oldest = now_s - settings.lookback_s
        if self._frame is None or self._until is None or self._until < oldest:
            frame = self.reader.read(datetime.fromtimestamp(oldest, UTC), _aware(now))
            times = _grid_times(frame)
            if times is None:
                frame = _fill_grid(frame)
                times = _grid_times(frame)
        else:
            start = datetime.fromtimestamp(self._until + settings.step_s, UTC)
            new = self.reader.read(start, _aware(now)) if start <= _aware(now) else self._frame.iloc[0:0]
            extended = (
                None if self._times is None else _extend_grid(self._frame, self._times, new, oldest=oldest)
            )
            if extended is None:
                frame = pd.concat([self._frame, new], ignore_index=True)
                frame = _fill_grid(frame[frame["timestamp"] >= oldest])
                times = _grid_times(frame)
            else:
                frame, times = extended
        if len(frame):
            self._until = float(frame["timestamp"].max())
        self._frame = frame.reset_index(drop=True)
        self._times = times
        return self._frame


_KEYS = ("node", "gpu", "uuid")


def _fill_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """Every GPU seen gets a row at every instant (present=0 where it has none): a gap is a feature."""
    if frame.empty:
        return frame
    gpus = frame[list(_KEYS)].drop_duplicates()
    times = pd.DataFrame({"timestamp": np.unique(frame["timestamp"].to_numpy())})
    full = gpus.merge(times, how="cross")
    merged = full.merge(frame, on=[*_KEYS, "timestamp"], how="left")
    merged["present"] = merged["present"].fillna(0).astype(np.int64)
    return merged


def _grid_times(frame: pd.DataFrame) -> npt.NDArray[np.float64] | None:
    """The instants of `frame` if it is a full grid as `_fill_grid` makes one — rows GPU after GPU, each GPU
    once, all at the same increasing instants, then the sample columns (float) and `present` (int) — else
    None. `Reader.read` returns such grids."""
    n = len(frame)
    columns = list(frame.columns)
    if n == 0 or columns[:4] != [*_KEYS, "timestamp"] or columns[-1] != "present":
        return None
    if frame["present"].dtype != np.int64 or frame["timestamp"].dtype != np.float64:
        return None
    if any(frame[name].dtype != np.float64 for name in columns[4:-1]):
        return None
    t = frame["timestamp"].to_numpy()
    backwards = np.flatnonzero(t[1:] <= t[:-1])
    k = int(backwards[0]) + 1 if len(backwards) else n
    if n % k or not np.array_equal(t.reshape(-1, k), np.broadcast_to(t[:k], (n // k, k))):
        return None
    for key in _KEYS:
        values = frame[key].to_numpy().reshape(-1, k)
        if not (values == values[:, :1]).all():
            return None
    if frame[list(_KEYS)].iloc[::k].duplicated().any():
        return None
    return t[:k].copy()


def _extend_grid(
    window: pd.DataFrame, times: npt.NDArray[np.float64], new: pd.DataFrame, *, oldest: float
) -> tuple[pd.DataFrame, npt.NDArray[np.float64]] | None:
    """`window` (a grid at `times`) less the instants before `oldest`, with `new` (a read of later instants)
    appended, and its instants: what `_fill_grid` of both makes, by array copies. GPUs first seen in `new`
    come last, missing (present=0) at the older instants; GPUs absent from `new` are missing at the new.
    None when `new` is not a grid of the same columns after the window's last instant."""
    first = int(np.searchsorted(times, oldest))  # the instants before it leave the window
    if not len(new):
        if first == 0:
            return window, times
        new_times = times[:0]
    else:
        grid = _grid_times(new)
        if grid is None or grid[0] <= times[-1] or not new.dtypes.equals(window.dtypes):
            return None
        new_times = grid
    k_old, k_new = len(times), len(new_times)
    n_old, n_new = len(window) // k_old, len(new) // k_new if k_new else 0
    instants = np.concatenate([times[first:], new_times])
    k_kept = k_old - first
    old_gpus = window[list(_KEYS)].iloc[::k_old]
    new_gpus = new[list(_KEYS)].iloc[::k_new] if k_new else old_gpus.iloc[:0]
    row_of = {gpu: i for i, gpu in enumerate(old_gpus.itertuples(index=False, name=None))}
    rows = np.empty(n_new, dtype=np.int64)
    added: list[int] = []
    for j, gpu in enumerate(new_gpus.itertuples(index=False, name=None)):
        row = row_of.get(gpu)
        if row is None:
            row = row_of[gpu] = n_old + len(added)
            added.append(j)
        rows[j] = row
    gpus = pd.concat([old_gpus, new_gpus.iloc[added]], ignore_index=True)
    n_gpus = len(gpus)

    def extended(column: str, out: npt.NDArray[Any], missing: float) -> None:
        block = out.reshape(n_gpus, len(instants))
        block[:n_old, :k_kept] = window[column].to_numpy().reshape(n_old, k_old)[:, first:]
        block[n_old:, :k_kept] = missing
        block[:, k_kept:] = missing
        if k_new:
            block[rows, k_kept:] = new[column].to_numpy().reshape(n_new, k_new)

    names = list(window.columns[4:-1])
    values = np.empty((len(names), n_gpus * len(instants)))
    for name, out in zip(names, values, strict=True):
        extended(name, out, np.nan)
    present = np.empty(n_gpus * len(instants), dtype=np.int64)
    extended("present", present, 0)
    keys = {key: gpus[key].repeat(len(instants)).array for key in _KEYS}
    timestamps = np.tile(instants, n_gpus)
    return _grid_frame(keys, timestamps, names=names, values=values, present=present), instants
