"""Per-GPU features at each instant, from a time-indexed frame of dcgm-exporter fields.

Pure: numpy and pandas only — no I/O, no clock, no asyncio — so training, scoring and backtests compute
exactly the same numbers from the same frame. The input is one row per GPU per instant (the simulator's
`timeseries` table, or what `predict.prometheus` reads), with a host column (`node`, `Hostname`,
`hostname`, `kubernetes_node` or `instance`), `gpu`, optionally `uuid`/`UUID` and `present`, a time
(`timestamp` in Unix seconds, or `time`), and DCGM fields under their pre-4.6 names (4.6 aliases are
renamed on the way in). A field that is missing from the frame gives NaN features, never zeros.

How it stays fast: rows are sorted once by (GPU, time); every windowed quantity is a difference of prefix
sums between a row and the first row of its window, found with one `searchsorted` per window length over a
key that keeps GPUs apart. 1M rows take a few seconds on one core.

Semantics worth knowing:
- Counters are reset-aware: a value lower than the previous one is a reset (reboot, exporter restart), and
  the increase over that step is the new value, as PromQL's `increase` counts it.
- `DCGM_FI_DEV_XID_ERRORS` holds the LAST XID, not a count: an event is a change of the value to a
  non-zero XID. The same XID twice in a row is invisible (a limit of the gauge, not of this code).
- A GPU identity is (node, gpu index, uuid): a replaced board starts a new series.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Index = npt.NDArray[np.int64]

HOUR = 3600.0
DAY = 86400.0
W1H, W6H, W24H, W7D = HOUR, 6 * HOUR, DAY, 7 * DAY
# Hours since the last counter reset are capped at the longest window, so a series that starts at the
# beginning of a training set and one that starts at the beginning of a scoring look-back look alike.
MAX_HOURS_SINCE_RESET = W7D / HOUR
# DCGM's "blank" values (e.g. MEMORY_TEMP 9223372036854775794 when unsupported) are missing values.
DCGM_BLANK_MIN = 9.0e18

KEY_COLUMNS: tuple[str, ...] = ("node", "gpu", "uuid", "timestamp")
HOST_COLUMNS: tuple[str, ...] = ("node", "Hostname", "hostname", "kubernetes_node", "instance")

F = "DCGM_FI_DEV_"
SBE_VOL = F + "ECC_SBE_VOL_TOTAL"
SBE_AGG = F + "ECC_SBE_AGG_TOTAL"
DBE_VOL = F + "ECC_DBE_VOL_TOTAL"
DBE_AGG = F + "ECC_DBE_AGG_TOTAL"
ROWS_CORRECTABLE = F + "CORRECTABLE_REMAPPED_ROWS"
ROWS_UNCORRECTABLE = F + "UNCORRECTABLE_REMAPPED_ROWS"
REMAP_PENDING = F + "ROW_REMAP_PENDING"
REMAP_FAILURE = F + "ROW_REMAP_FAILURE"
RETIRED_PENDING = F + "RETIRED_PENDING"
RETIRED_SBE = F + "RETIRED_SBE"
RETIRED_DBE = F + "RETIRED_DBE"
GPU_TEMP = F + "GPU_TEMP"
MEMORY_TEMP = F + "MEMORY_TEMP"
GPU_UTIL = F + "GPU_UTIL"
THROTTLE = F + "CLOCK_THROTTLE_REASONS"
THERMAL_VIOLATION = F + "THERMAL_VIOLATION"
POWER_VIOLATION = F + "POWER_VIOLATION"
PCIE_REPLAY = F + "PCIE_REPLAY_COUNTER"
NVLINK_CRC_FLIT = F + "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
NVLINK_CRC_DATA = F + "NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
NVLINK_REPLAY = F + "NVLINK_REPLAY_ERROR_COUNT_TOTAL"
NVLINK_RECOVERY = F + "NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
XID = F + "XID_ERRORS"
ENERGY = F + "TOTAL_ENERGY_CONSUMPTION"

# Every dcgm-exporter field the features read: one PromQL query each per scoring cycle.
SOURCE_METRICS: tuple[str, ...] = (
    SBE_VOL,
    SBE_AGG,
    DBE_VOL,
    DBE_AGG,
    ROWS_CORRECTABLE,
    ROWS_UNCORRECTABLE,
    REMAP_PENDING,
    REMAP_FAILURE,
    RETIRED_PENDING,
    RETIRED_SBE,
    RETIRED_DBE,
    GPU_TEMP,
    MEMORY_TEMP,
    GPU_UTIL,
    THROTTLE,
    THERMAL_VIOLATION,
    POWER_VIOLATION,
    PCIE_REPLAY,
    NVLINK_CRC_FLIT,
    NVLINK_CRC_DATA,
    NVLINK_REPLAY,
    NVLINK_RECOVERY,
    XID,
    ENERGY,
)

# DCGM 4.6 names (left) of the fields above (right); the exporter names a metric after its counters file,
# so either may appear. The same list as the rule bundle's; UNCORRECTABLE's new name is by symmetry.
ALIASES: Mapping[str, str] = {
    F + "XID_ERROR": XID,
    F + "PCIE_REPLAY_TOTAL": PCIE_REPLAY,
    F + "ROW_REMAP_FAILED": REMAP_FAILURE,
    F + "PAGE_RETIRED_PENDING": RETIRED_PENDING,
    F + "NVLINK_CRC_FLIT_ERROR_TOTAL": NVLINK_CRC_FLIT,
    F + "NVLINK_CRC_DATA_ERROR_TOTAL": NVLINK_CRC_DATA,
    F + "CLOCKS_EVENT_REASONS": THROTTLE,
    F + "GPU_TEMP_CELSIUS": GPU_TEMP,
    F + "ROW_REMAP_CORRECTABLE_TOTAL": ROWS_CORRECTABLE,
    F + "ROW_REMAP_UNCORRECTABLE_TOTAL": ROWS_UNCORRECTABLE,
}

# Counters that restart at zero on a reboot: a decrease in any of them marks a reset.
VOLATILE_COUNTERS: tuple[str, ...] = (
    ENERGY,
    SBE_VOL,
    DBE_VOL,
    PCIE_REPLAY,
    NVLINK_CRC_FLIT,
    NVLINK_CRC_DATA,
    THERMAL_VIOLATION,
    POWER_VIOLATION,
)

THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80

# XID classes as ARCHITECTURE.md's defaults have them, grouped for features. The features must not move
# when an operator overrides the catalog (the model was trained on these groups), so they are constants.
XID_IGNORE = frozenset({38, 43, 63, 92, 121, 157, 160})
XID_WORKLOAD = frozenset({8, 13, 31, 32, 68, 69, 94})
XID_HARDWARE = frozenset(
    {46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 79, 151, 54, 48, 45, 74, 154}
    | set(range(144, 151))
)

FEATURES: tuple[str, ...] = (
    # memory: single-bit ECC rate (per hour) and its acceleration (log ratios of rates)
    "sbe_rate_1h",
    "sbe_rate_6h",
    "sbe_rate_24h",
    "sbe_accel_1h_6h",
    "sbe_accel_6h_24h",
    "dbe_increase_24h",
    # memory: row remapper and page retirement
    "correctable_remapped_rows",
    "uncorrectable_remapped_rows",
    "correctable_remapped_rows_growth_24h",
    "uncorrectable_remapped_rows_growth_24h",
    "row_remap_pending",
    "row_remap_failure",
    "retired_pages_pending",
    "retired_pages",
    # thermal: against the GPU's own 7-day baseline and against its peers on the node (never absolute:
    # how hot a GPU runs depends on its rack and its job, and a model fed absolute readings learns that)
    "gpu_temp_vs_baseline_c",
    "mem_temp_vs_baseline_c",
    "mem_gpu_temp_gap_vs_baseline_c",
    "mem_temp_rise_6h_c",
    "gpu_temp_vs_peers_c",
    "mem_temp_vs_peers_c",
    "util_mean_1h",
    # throttling: share of samples with the reason bits set, share of time in violation counters
    "thermal_throttle_share_1h",
    "thermal_throttle_share_6h",
    "hw_slowdown_share_1h",
    "power_throttle_share_6h",
    "thermal_violation_share_1h",
    "power_violation_share_1h",
    # PCIe replays (per minute), their burstiness (log of the index of dispersion) and spread
    "pcie_replay_rate_1h",
    "pcie_replay_rate_24h",
    "pcie_replay_burstiness_6h",
    "pcie_replay_active_share_6h",
    # NVLink errors (CRC per second, flit + data)
    "nvlink_crc_rate_1h",
    "nvlink_crc_rate_24h",
    "nvlink_crc_accel_1h_24h",
    "nvlink_replay_rate_6h",
    "nvlink_recovery_increase_24h",
    # XID history: changes of the last-XID gauge, by class
    "xid_ignore_events_24h",
    "xid_workload_events_24h",
    "xid_hardware_events_7d",
    # data quality and uptime
    "missing_share_1h",
    "missing_share_24h",
    "hours_since_reset",
)


# -- the sorted view ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Series:
    """All GPUs' rows sorted by (GPU, time), with helpers that never cross from one GPU to the next.

    Windows are (t - window, t]. With `since_reset`, a window also stops at the GPU's last counter reset
    (`reset_row`), so error rates after a reboot or GPU reset — the usual remediation — count errors since
    then only, and a repaired GPU is not judged on the errors that got it repaired.

    Inputs to the window helpers are per row (all rows); their results are per *output* row (`out`): prefix
    sums run over every sample, but only the rows asked for are computed further — scoring asks for the
    last half hour of a week, training for one row in six.
    """

    group: Index
    t: Array
    key: Array
    first: Index
    reset_row: Index
    out: Index
    _starts: dict[tuple[float, bool], Index] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])

    @property
    def t_out(self) -> Array:
        return self.t[self.out]

    def start(self, window: float, *, since_reset: bool = False) -> Index:
        """Index of the first row of each output row's window within its GPU."""
        cache = (window, since_reset)
        if cache not in self._starts:
            found = np.searchsorted(self.key, self.key[self.out] - window, side="right").astype(np.int64)
            floor = self.reset_row if since_reset else self.first
            self._starts[cache] = np.maximum(found, floor[self.out])
        return self._starts[cache]

    def wsum(self, values: Array, window: float, *, since_reset: bool = False) -> Array:
        """Sum of `values` (no NaN, one per row) over each output row's window."""
        prefix = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
        return prefix[self.out + 1] - prefix[self.start(window, since_reset=since_reset)]

    def wcount(self, mask: Mask, window: float, *, since_reset: bool = False) -> Array:
        return self.wsum(mask.astype(np.float64), window, since_reset=since_reset)

    def wmean(self, values: Array, window: float) -> Array:
        valid = ~np.isnan(values)
        total = self.wsum(np.where(valid, values, 0.0), window)
        count = self.wcount(valid, window)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / count, np.nan)

    def span(self, window: float, *, since_reset: bool = False) -> Array:
        """Seconds covered by the increments summed over each output row's window."""
        start = self.start(window, since_reset=since_reset)
        before = np.maximum(start - 1, self.first[self.out])
        return self.t_out - self.t[before]

    def ffill(self, values: Array) -> Array:
        """Last non-NaN value up to each row, within its GPU (NaN before the first); all rows."""
        positions = np.where(np.isnan(values), -1, np.arange(self.size))
        last = np.maximum.accumulate(positions) if self.size else positions
        ok = last >= self.first
        return np.where(ok, values[np.maximum(last, 0)], np.nan)

    def last_value(self, values: Array) -> Array:
        """`ffill` at the output rows."""
        return self.ffill(values)[self.out]

    def previous(self, values: Array) -> Array:
        """The value on the row before, within the GPU (NaN on a GPU's first row); all rows."""
        out = np.empty_like(values)
        if self.size:
            out[0] = np.nan
            out[1:] = values[:-1]
        out[np.arange(self.size) == self.first] = np.nan
        return out

    def with_resets(self, resets: Mask) -> None:
        """Record where counters reset: each row's last reset (or its GPU's first row) at or before it."""
        starts = resets | (np.arange(self.size) == self.first)
        positions = np.where(starts, np.arange(self.size), -1)
        self.reset_row = np.maximum.accumulate(positions).astype(np.int64) if self.size else self.first
        self._starts = {k: v for k, v in self._starts.items() if not k[1]}

    def keep(self, mask: Mask) -> None:
        """Compute results for these rows only."""
        self.out = np.flatnonzero(mask).astype(np.int64)
        self._starts = {}


def _series(group: Index, t: Array) -> _Series:
    everything = np.arange(group.size, dtype=np.int64)
    if group.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Series(group=empty, t=t, key=t, first=empty, reset_row=empty, out=empty)
    tmin = float(t.min())
    stride = float(t.max() - tmin) + 2 * W7D + 1.0
    key = group.astype(np.float64) * stride + (t - tmin)
    first = np.searchsorted(group, group, side="left").astype(np.int64)
    return _Series(group=group, t=t, key=key, first=first, reset_row=first, out=everything)


# -- input normalisation --------------------------------------------------------------------------------


def host_column(frame: pd.DataFrame) -> str | None:
    """The column naming the host: the first of `HOST_COLUMNS` the frame has."""
    return next((name for name in HOST_COLUMNS if name in frame.columns), None)


@dataclass(frozen=True, slots=True)
class Normalised:
    """A frame's rows sorted by GPU then time: identity columns, fields as float arrays, presence."""

    keys: pd.DataFrame
    node_codes: Index
    group: Index
    fields: dict[str, Array]
    present: Mask | None

    def __len__(self) -> int:
        return len(self.keys)


def normalise(frame: pd.DataFrame) -> Normalised:
    """Rename aliases, derive `node`/`uuid`/`timestamp`, blank DCGM sentinels, sort by GPU then time."""
    renamed = frame.rename(columns={old: new for old, new in ALIASES.items() if new not in frame.columns})
    host = host_column(renamed)
    if host is None:
        raise ValueError(f"the frame has no host column (one of {', '.join(HOST_COLUMNS)})")
    if "gpu" not in renamed.columns:
        raise ValueError("the frame has no `gpu` column")
    node = renamed[host].astype(str)
    if host == "instance":
        node = node.str.replace(r":\d+$", "", regex=True)
    node_codes, node_names = pd.factorize(node, sort=True)
    gpu = pd.to_numeric(renamed["gpu"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    uuid_col = "uuid" if "uuid" in renamed.columns else "UUID" if "UUID" in renamed.columns else None
    uuids = renamed[uuid_col].fillna("").astype(str) if uuid_col else pd.Series("", index=renamed.index)
    uuid_codes, uuid_names = pd.factorize(uuids, sort=True)
    t = timestamps(renamed)
    order = np.lexsort((t, uuid_codes, gpu, node_codes))
    node_codes, gpu, uuid_codes, t = node_codes[order], gpu[order], uuid_codes[order], t[order]
    change = np.ones(len(order), dtype=bool)
    if len(order):
        change[1:] = (
            (node_codes[1:] != node_codes[:-1]) | (gpu[1:] != gpu[:-1]) | (uuid_codes[1:] != uuid_codes[:-1])
        )
    group = np.cumsum(change, dtype=np.int64) - 1
    keys = pd.DataFrame(
        {
            "node": pd.Categorical.from_codes(node_codes, categories=pd.Index(node_names, dtype=object)),
            "gpu": gpu,
            "uuid": pd.Categorical.from_codes(uuid_codes, categories=pd.Index(uuid_names, dtype=object)),
            "timestamp": t,
        }
    )
    fields: dict[str, Array] = {}
    for name in SOURCE_METRICS:
        if name in renamed.columns:
            values = pd.to_numeric(renamed[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            values = values[order]
            values[values >= DCGM_BLANK_MIN] = np.nan
            if not np.isnan(values).all():
                fields[name] = values
    present: Mask | None = None
    if "present" in renamed.columns:
        present = pd.to_numeric(renamed["present"], errors="coerce").fillna(0).to_numpy()[order] > 0
    return Normalised(
        keys=keys, node_codes=node_codes.astype(np.int64), group=group, fields=fields, present=present
    )


def timestamps(frame: pd.DataFrame) -> Array:
    """Unix seconds of each row, from `timestamp` or an ISO/datetime `time` column."""
    if "timestamp" in frame.columns:
        return pd.to_numeric(frame["timestamp"], errors="coerce").to_numpy(dtype=np.float64)
    if "time" in frame.columns:
        stamps = pd.to_datetime(frame["time"], utc=True, format="ISO8601")
        return stamps.astype("int64").to_numpy(dtype=np.float64) / _unit_per_second(stamps)
    raise ValueError("the frame has no `timestamp` (Unix seconds) or `time` column")


def _unit_per_second(stamps: pd.Series) -> float:
    unit = np.datetime_data(stamps.dt.tz_localize(None).to_numpy().dtype)[0]
    return {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]


# -- building blocks ------------------------------------------------------------------------------------


def _column(df: Normalised, name: str) -> Array | None:
    return df.fields.get(name)


def _nan(n: int) -> Array:
    return np.full(n, np.nan)


@dataclass(frozen=True, slots=True)
class _Counter:
    """A counter's reset-aware increments per row, and where it reset."""

    increments: Array
    resets: Mask
    valid: Mask


def _counter(s: _Series, values: Array) -> _Counter:
    filled = s.ffill(values)
    before = s.previous(filled)
    valid = ~np.isnan(values)
    both = valid & ~np.isnan(before)
    with np.errstate(invalid="ignore"):
        dropped = both & (values < before)
        increments = np.where(both, np.where(dropped, values, values - before), 0.0)
    return _Counter(increments=increments, resets=dropped, valid=valid)


def _rate(s: _Series, counter: _Counter, window: float, per_s: float) -> Array:
    """Increase per `per_s` seconds over the window since the last reset; NaN without a sample or span."""
    total = s.wsum(counter.increments, window, since_reset=True)
    span = s.span(window, since_reset=True)
    seen = s.wcount(counter.valid, window, since_reset=True) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen & (span > 0), total / span * per_s, np.nan)


def _increase(s: _Series, counter: _Counter, window: float) -> Array:
    seen = s.wcount(counter.valid, window, since_reset=True) > 0
    return np.where(seen, s.wsum(counter.increments, window, since_reset=True), np.nan)


def _share(s: _Series, flags: Mask, valid: Mask, window: float, *, since_reset: bool = False) -> Array:
    count = s.wcount(valid, window, since_reset=since_reset)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, s.wcount(flags & valid, window, since_reset=since_reset) / count, np.nan)


def _log_ratio(a: Array, b: Array) -> Array:
    return np.log1p(a) - np.log1p(b)


def _sum_optional(*parts: Array | None) -> Array | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    total = present[0].copy()
    for part in present[1:]:
        total = np.where(np.isnan(total), part, np.where(np.isnan(part), total, total + part))
    return total


# -- the features ---------------------------------------------------------------------------------------


def compute_features(
    frame: pd.DataFrame,
    *,
    every_s: float | None = None,
    last_only: bool = False,
    tail_s: float | None = None,
) -> pd.DataFrame:
    """Features for the rows of `frame`: `KEY_COLUMNS` then `FEATURES`, sorted by GPU then time.

    Which rows come back (windows always use every sample): all; with `every_s`, one row per GPU per
    bucket of that many seconds (the first in each), for training on a coarser grid than the samples;
    with `last_only`, each GPU's last row; with `tail_s`, each GPU's rows of its last `tail_s` seconds
    (scoring, when an alarm must be sustained).
    """
    df = normalise(frame)
    s = _series(df.group, df.keys["timestamp"].to_numpy(dtype=np.float64))
    s.with_resets(_resets(df, s, len(df)))
    keep = _keep(s, every_s=every_s, last_only=last_only, tail_s=tail_s)
    if keep is not None:
        s.keep(keep)
    n = len(s.out)
    out: dict[str, Array] = {}
    out.update(_memory(df, s, n))
    out.update(_thermal(df, s, n))
    out.update(_throttle(df, s, n))
    out.update(_links(df, s, n))
    out.update(_xids(df, s, n))
    out.update(_quality(df, s, n))
    result = df.keys.iloc[s.out].reset_index(drop=True)
    for name in FEATURES:
        result[name] = out[name].astype(np.float32)
    return result


def _keep(s: _Series, *, every_s: float | None, last_only: bool, tail_s: float | None) -> Mask | None:
    if last_only or tail_s is not None:
        last = np.ones(s.size, dtype=bool)
        if s.size:
            last[:-1] = s.group[1:] != s.group[:-1]
        if last_only:
            return last
        last_index = np.flip(np.minimum.accumulate(np.flip(np.where(last, np.arange(s.size), s.size))))
        return np.asarray(s.t >= s.t[last_index] - float(tail_s or 0.0), dtype=bool)
    if every_s is None:
        return None
    bucket = np.floor(s.t / every_s)
    before = s.previous(bucket)
    return np.asarray(np.isnan(before) | (bucket != before), dtype=bool)


def _memory(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    out: dict[str, Array] = {}
    sbe_values = _column(df, SBE_AGG)
    if sbe_values is None:
        sbe_values = _column(df, SBE_VOL)
    if sbe_values is not None:
        sbe = _counter(s, sbe_values)
        r1, r6, r24 = (_rate(s, sbe, w, HOUR) for w in (W1H, W6H, W24H))
        out |= {"sbe_rate_1h": r1, "sbe_rate_6h": r6, "sbe_rate_24h": r24}
        out |= {"sbe_accel_1h_6h": _log_ratio(r1, r6), "sbe_accel_6h_24h": _log_ratio(r6, r24)}
    dbe_values = _column(df, DBE_AGG)
    if dbe_values is None:
        dbe_values = _column(df, DBE_VOL)
    if dbe_values is not None:
        out["dbe_increase_24h"] = _increase(s, _counter(s, dbe_values), W24H)
    for name, prefix in ((ROWS_CORRECTABLE, "correctable"), (ROWS_UNCORRECTABLE, "uncorrectable")):
        values = _column(df, name)
        if values is not None:
            out[f"{prefix}_remapped_rows"] = s.last_value(values)
            out[f"{prefix}_remapped_rows_growth_24h"] = _increase(s, _counter(s, values), W24H)
    for name, feature in (
        (REMAP_PENDING, "row_remap_pending"),
        (REMAP_FAILURE, "row_remap_failure"),
        (RETIRED_PENDING, "retired_pages_pending"),
    ):
        values = _column(df, name)
        if values is not None:
            out[feature] = s.last_value(values)
    retired = _sum_optional(_column(df, RETIRED_SBE), _column(df, RETIRED_DBE))
    if retired is not None:
        out["retired_pages"] = s.last_value(retired)
    return _complete(out, n, prefix_of=("sbe_", "dbe_", "correctable_", "uncorrectable_", "row_", "retired_"))


def _thermal(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    """Temperatures as residuals: a reading minus what the GPU's own 7-day temperature-vs-utilisation line
    predicts at the same utilisation. A busy GPU is hot and an idle one cool for no fault of theirs; a
    GPU running hotter than itself at the same load is the signal. Peers compare residuals too."""
    out: dict[str, Array] = {}
    gpu = _column(df, GPU_TEMP)
    mem = _column(df, MEMORY_TEMP)
    util = _column(df, GPU_UTIL)
    if gpu is not None:
        gpu_1h = _residual(s, gpu, util, W1H)
        out["gpu_temp_vs_baseline_c"] = gpu_1h
        out["gpu_temp_vs_peers_c"] = gpu_1h - _peer_median(df, s, gpu_1h)
    if mem is not None:
        mem_1h = _residual(s, mem, util, W1H)
        out["mem_temp_vs_baseline_c"] = mem_1h
        out["mem_temp_rise_6h_c"] = mem_1h - _residual(s, mem, util, W6H)
        out["mem_temp_vs_peers_c"] = mem_1h - _peer_median(df, s, mem_1h)
    if gpu is not None and mem is not None:
        out["mem_gpu_temp_gap_vs_baseline_c"] = _residual(s, mem - gpu, util, W1H)
    if util is not None:
        out["util_mean_1h"] = s.wmean(util, W1H)
    return _complete(out, n, prefix_of=("gpu_temp", "mem_", "util_"))


def _residual(s: _Series, temp: Array, util: Array | None, window: float) -> Array:
    """Mean temperature over `window` minus the 7-day least-squares line (temperature on utilisation)
    evaluated at the window's mean utilisation; without utilisation (or with too little spread in it),
    minus the 7-day mean."""
    mean_t7 = s.wmean(temp, W7D)
    mean_w = s.wmean(temp, window)
    if util is None:
        return mean_w - mean_t7
    valid = ~np.isnan(temp) & ~np.isnan(util)
    u = np.where(valid, util, 0.0)
    t = np.where(valid, temp, 0.0)
    count = s.wcount(valid, W7D)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = s.wsum(u, W7D) / count
        mt = s.wsum(t, W7D) / count
        var_u = s.wsum(u * u, W7D) / count - mu * mu
        cov = s.wsum(u * t, W7D) / count - mu * mt
        slope = np.where(var_u > 1.0, cov / var_u, 0.0)
        u_w = s.wsum(u, window) / s.wcount(valid, window)
        expected = np.where(count > 0, mt + slope * (u_w - mu), mean_t7)
    return np.where(np.isnan(u_w), mean_w - mean_t7, mean_w - expected)


def _peer_median(df: Normalised, s: _Series, values: Array) -> Array:
    """The median of the same value over the GPUs of the node at the same instant."""
    instants, _ = pd.factorize(s.t_out)
    key = df.node_codes[s.out] * (int(instants.max(initial=0)) + 1) + instants
    median = pd.Series(values).groupby(key, sort=False).transform("median")
    return median.to_numpy(dtype=np.float64)


def _throttle(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    out: dict[str, Array] = {}
    reasons = _column(df, THROTTLE)
    if reasons is not None:
        valid = ~np.isnan(reasons)
        bits = np.where(valid, reasons, 0).astype(np.int64)
        thermal = (bits & (THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL)) != 0
        hardware = (bits & (THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL | THROTTLE_HW_POWER_BRAKE)) != 0
        power = (bits & THROTTLE_SW_POWER_CAP) != 0
        out["thermal_throttle_share_1h"] = _share(s, thermal, valid, W1H)
        out["thermal_throttle_share_6h"] = _share(s, thermal, valid, W6H)
        out["hw_slowdown_share_1h"] = _share(s, hardware, valid, W1H)
        out["power_throttle_share_6h"] = _share(s, power, valid, W6H)
    for name, feature in (
        (THERMAL_VIOLATION, "thermal_violation_share_1h"),
        (POWER_VIOLATION, "power_violation_share_1h"),
    ):
        values = _column(df, name)
        if values is not None:
            # The counters are microseconds throttled; per second of wall time that is a share.
            out[feature] = np.clip(_rate(s, _counter(s, values), W1H, 1e-6), 0.0, 1.0)
    return _complete(out, n, prefix_of=("thermal_", "hw_", "power_"))


def _links(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    out: dict[str, Array] = {}
    replay = _column(df, PCIE_REPLAY)
    if replay is not None:
        counter = _counter(s, replay)
        out["pcie_replay_rate_1h"] = _rate(s, counter, W1H, 60.0)
        out["pcie_replay_rate_24h"] = _rate(s, counter, W24H, 60.0)
        out["pcie_replay_burstiness_6h"] = _dispersion(s, counter, W6H)
        out["pcie_replay_active_share_6h"] = _share(
            s, counter.increments > 0, counter.valid, W6H, since_reset=True
        )
    crc = _sum_optional(_column(df, NVLINK_CRC_FLIT), _column(df, NVLINK_CRC_DATA))
    if crc is not None:
        counter = _counter(s, crc)
        r1, r24 = _rate(s, counter, W1H, 1.0), _rate(s, counter, W24H, 1.0)
        out |= {"nvlink_crc_rate_1h": r1, "nvlink_crc_rate_24h": r24}
        out["nvlink_crc_accel_1h_24h"] = _log_ratio(r1, r24)
    nv_replay = _column(df, NVLINK_REPLAY)
    if nv_replay is not None:
        out["nvlink_replay_rate_6h"] = _rate(s, _counter(s, nv_replay), W6H, 1.0)
    recovery = _column(df, NVLINK_RECOVERY)
    if recovery is not None:
        out["nvlink_recovery_increase_24h"] = _increase(s, _counter(s, recovery), W24H)
    return _complete(out, n, prefix_of=("pcie_", "nvlink_"))


def _dispersion(s: _Series, counter: _Counter, window: float) -> Array:
    """log1p of the index of dispersion (variance / mean) of per-sample increments: 0 for none, ~0.7 for
    a Poisson trickle, large when the same number of errors comes in bursts."""
    x = np.where(counter.valid, counter.increments, 0.0)
    count = s.wcount(counter.valid, window, since_reset=True)
    total = s.wsum(x, window, since_reset=True)
    squares = s.wsum(x * x, window, since_reset=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        index = np.where(mean > 0, variance / mean, 0.0)
    return np.where(count > 1, np.log1p(index), np.nan)


def _xids(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    values = _column(df, XID)
    if values is None:
        return {name: _nan(n) for name in FEATURES if name.startswith("xid_")}
    before = s.previous(s.ffill(values))
    valid = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        changed = valid & ~np.isnan(before) & (values != before) & (values != 0)
    codes = np.where(changed, values, 0).astype(np.int64)
    ignore = changed & np.isin(codes, list(XID_IGNORE))
    hardware = changed & np.isin(codes, list(XID_HARDWARE))
    workload = changed & ~ignore & ~hardware
    seen24 = s.wcount(valid, W24H) > 0
    seen7d = s.wcount(valid, W7D) > 0
    return {
        "xid_ignore_events_24h": np.where(seen24, s.wcount(ignore, W24H), np.nan),
        "xid_workload_events_24h": np.where(seen24, s.wcount(workload, W24H), np.nan),
        "xid_hardware_events_7d": np.where(seen7d, s.wcount(hardware, W7D), np.nan),
    }


def _quality(df: Normalised, s: _Series, n: int) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if df.present is not None:
        present = df.present
    else:
        present = np.zeros(s.size, dtype=bool)
        for values in df.fields.values():
            present |= ~np.isnan(values)
    rows = np.ones(s.size, dtype=bool)
    out["missing_share_1h"] = _share(s, ~present, rows, W1H)
    out["missing_share_24h"] = _share(s, ~present, rows, W24H)
    if any(name in df.fields for name in VOLATILE_COUNTERS):
        hours = (s.t_out - s.t[s.reset_row[s.out]]) / HOUR
        out["hours_since_reset"] = np.minimum(hours, MAX_HOURS_SINCE_RESET)
    return _complete(out, n, prefix_of=("missing_", "hours_"))


def _resets(df: Normalised, s: _Series, n: int) -> Mask:
    """Rows where any volatile counter went down: a reboot or GPU reset happened since the row before."""
    resets = np.zeros(n, dtype=bool)
    for name in VOLATILE_COUNTERS:
        values = _column(df, name)
        if values is not None:
            resets |= _counter(s, values).resets
    return resets


def _complete(out: dict[str, Array], n: int, *, prefix_of: tuple[str, ...]) -> dict[str, Array]:
    """Fill the features of this group that a missing field left out with NaN."""
    for name in FEATURES:
        if name.startswith(prefix_of) and name not in out:
            out[name] = _nan(n)
    return out
