"""The sorted view every feature is computed on, and the windowed building blocks over it.

Rows are sorted once by (GPU, time); every windowed quantity is a difference of prefix sums between a row
and the first row of its window, found with one `searchsorted` per window length over a key that keeps
GPUs apart. 1M rows take a few seconds on one core.

Counters are reset-aware: a value lower than the previous one is a reset (reboot, exporter restart), and
the increase over that step is the new value, as PromQL's `increase` counts it.
"""

from __future__ import annotations

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


@dataclass(slots=True)
class Series:
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
    node_codes: Index
    _starts: dict[tuple[float, bool, bool], Index] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])

    @property
    def t_out(self) -> Array:
        return self.t[self.out]

    def start(self, window: float, *, since_reset: bool = False, every_row: bool = False) -> Index:
        """Index of the first row of each output row's (with `every_row`: each row's) window in its GPU."""
        cache = (window, since_reset, every_row)
        if cache not in self._starts:
            rows = slice(None) if every_row else self.out
            found = np.searchsorted(self.key, self.key[rows] - window, side="right").astype(np.int64)
            floor = self.reset_row if since_reset else self.first
            self._starts[cache] = np.maximum(found, floor[rows])
        return self._starts[cache]

    def wsum(self, values: Array, window: float, *, since_reset: bool = False) -> Array:
        """Sum of `values` (no NaN, one per row) over each output row's window."""
        prefix = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
        return prefix[self.out + 1] - prefix[self.start(window, since_reset=since_reset)]

    def wsum_every_row(self, values: Array, window: float, *, since_reset: bool = False) -> Array:
        """`wsum` at every row, not only the output rows (for a quantity windowed twice)."""
        prefix = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
        rows = np.arange(self.size) + 1
        return prefix[rows] - prefix[self.start(window, since_reset=since_reset, every_row=True)]

    def wcount(self, mask: Mask, window: float, *, since_reset: bool = False) -> Array:
        return self.wsum(mask.astype(np.float64), window, since_reset=since_reset)

    def wmean(self, values: Array, window: float) -> Array:
        valid = ~np.isnan(values)
        total = self.wsum(np.where(valid, values, 0.0), window)
        count = self.wcount(valid, window)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / count, np.nan)

    def span(self, window: float, samples: SampleTimes, *, since_reset: bool = False) -> Array:
        """Seconds covered by the increments summed over each output row's window: from the last sample
        before the window (the first increment in it reaches back there) or, when there is none, from the
        first sample in it, to the last sample. Rows without a sample cover nothing: a reader's grid carries
        such rows wherever Prometheus has no sample — before a fleet's or a new GPU's first week — and
        counting their time diluted a 7-day rate over 26 h of history by 6.5x, so a chronic-SBE GPU read as
        1.7 e-folds above its own baseline and scored at `act` (the demo's live stack, 2026-12-01).
        """
        start = self.start(window, since_reset=since_reset)
        before = np.maximum(start - 1, self.first[self.out])
        anchor = np.where(start > self.first[self.out], samples.last[before], np.nan)
        anchor = np.where(np.isnan(anchor), samples.next[start], anchor)
        return samples.last[self.out] - anchor

    def ffill(self, values: Array) -> Array:
        """Last non-NaN value up to each row, within its GPU (NaN before the first); all rows."""
        positions = np.where(np.isnan(values), -1, np.arange(self.size))
        last = np.maximum.accumulate(positions) if self.size else positions
        ok = last >= self.first
        return np.where(ok, values[np.maximum(last, 0)], np.nan)

    def bfill(self, values: Array) -> Array:
        """Next non-NaN value at or after each row, within its GPU (NaN after the last); all rows."""
        n = self.size
        positions = np.where(np.isnan(values), n, np.arange(n))
        nxt = np.minimum.accumulate(positions[::-1])[::-1] if n else positions
        safe = np.minimum(nxt, max(n - 1, 0))
        ok = (nxt < n) & (self.group[safe] == self.group) if n else nxt < n
        return np.where(ok, values[safe], np.nan)

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

    def peer_median(self, values: Array) -> Array:
        """The median of an output-row value over the GPUs of the same node at the same instant."""
        instants, _ = pd.factorize(self.t_out)
        key = self.node_codes[self.out] * (int(instants.max(initial=0)) + 1) + instants
        median = pd.Series(values).groupby(key, sort=False).transform("median")
        return median.to_numpy(dtype=np.float64)


def series(group: Index, t: Array, node_codes: Index) -> Series:
    everything = np.arange(group.size, dtype=np.int64)
    if group.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Series(group=empty, t=t, key=t, first=empty, reset_row=empty, out=empty, node_codes=node_codes)
    tmin = float(t.min())
    stride = float(t.max() - tmin) + 2 * W7D + 1.0
    key = group.astype(np.float64) * stride + (t - tmin)
    first = np.searchsorted(group, group, side="left").astype(np.int64)
    return Series(
        group=group, t=t, key=key, first=first, reset_row=first, out=everything, node_codes=node_codes
    )


# -- counters and windows -------------------------------------------------------------------------------


def nan(n: int) -> Array:
    return np.full(n, np.nan)


@dataclass(frozen=True, slots=True)
class SampleTimes:
    """Per row, within its GPU: the time of the latest sample at or before it (NaN before the first) and of
    the first sample at or after it (NaN after the last) — what a rate's span is measured between."""

    last: Array
    next: Array


def sample_times(s: Series, valid: Mask) -> SampleTimes:
    times = np.where(valid, s.t, np.nan)
    return SampleTimes(last=s.ffill(times), next=s.bfill(times))


@dataclass(frozen=True, slots=True)
class Counter:
    """A counter's reset-aware increments per row, where it reset, and when it was sampled."""

    increments: Array
    resets: Mask
    valid: Mask
    samples: SampleTimes


def counter(s: Series, values: Array) -> Counter:
    filled = s.ffill(values)
    before = s.previous(filled)
    valid = ~np.isnan(values)
    both = valid & ~np.isnan(before)
    with np.errstate(invalid="ignore"):
        dropped = both & (values < before)
        increments = np.where(both, np.where(dropped, values, values - before), 0.0)
    return Counter(increments=increments, resets=dropped, valid=valid, samples=sample_times(s, valid))


def rate(s: Series, c: Counter, window: float, per_s: float) -> Array:
    """Increase per `per_s` seconds over the window since the last reset; NaN without a sample or span."""
    total = s.wsum(c.increments, window, since_reset=True)
    span = s.span(window, c.samples, since_reset=True)
    seen = s.wcount(c.valid, window, since_reset=True) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen & (span > 0), total / span * per_s, np.nan)


def increase(s: Series, c: Counter, window: float) -> Array:
    seen = s.wcount(c.valid, window, since_reset=True) > 0
    return np.where(seen, s.wsum(c.increments, window, since_reset=True), np.nan)


def share(s: Series, flags: Mask, valid: Mask, window: float, *, since_reset: bool = False) -> Array:
    count = s.wcount(valid, window, since_reset=since_reset)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, s.wcount(flags & valid, window, since_reset=since_reset) / count, np.nan)


def persistence(s: Series, c: Counter, *, bucket: float, window: float) -> Array:
    """Share of the window's time whose trailing `bucket` saw the counter rise — about the share of hours
    with events when `bucket` is an hour. Independent of the sample interval and of how many errors each
    event brought: one burst a day reads 1/24 whether it held 3 replays or 3,000."""
    active = s.wsum_every_row(c.increments, bucket, since_reset=True) > 0
    return share(s, active, c.valid, window)


def episodes(s: Series, c: Counter, window: float) -> Array:
    """Distinct episodes in the window: runs of consecutive samples with increments, counted at their first."""
    rising = c.increments > 0
    before = s.previous(rising.astype(np.float64))
    starts = rising & ~(before > 0)
    seen = s.wcount(c.valid, window) > 0
    return np.where(seen, s.wcount(starts, window), np.nan)


# Beyond this many standard deviations a count is surprising enough; the bound keeps the feature's range
# the same from one fleet to the next whatever the rates (a failing part reaches it within hours).
SURPRISE_CLIP = 10.0


def surprise(s: Series, c: Counter, recent: float, baseline: float) -> Array:
    """How many standard deviations the count of the last `recent` seconds sits above what the part's own
    rate over the rest of its `baseline` window predicts, both since the last reset, clipped to
    +-`SURPRISE_CLIP`.

    Counts, not rates: a steady Poisson rate reads ~N(0, 1) at any level, so a chronic single-bit rate of
    100/h whose 6 h count runs 20% high by chance is not change, while 20 errors on a silent part are
    (a log ratio of rates with a floor read the former as change and, below the floor, missed the latter).
    Anscombe's transform stabilises a Poisson count's variance at 1/4 whatever its mean, and the baseline
    count carries its own noise, scaled by r, the ratio of the two spans:

        z = 2 (sqrt(n + 3/8) - sqrt(r m + 3/8)) / sqrt(1 + r)

    with n the recent count and m the baseline's count before it: exactly 0 when n = r m, 0 for a part
    silent throughout. NaN without a sample in the recent window or without baseline time before it (a
    part that reset within `recent` has no history to compare with)."""
    total = s.wsum(c.increments, baseline, since_reset=True)
    n = s.wsum(c.increments, recent, since_reset=True)
    span = s.span(recent, c.samples, since_reset=True)
    before = s.span(baseline, c.samples, since_reset=True) - span
    seen = s.wcount(c.valid, recent, since_reset=True) > 0
    return poisson_surprise(n, total, span, before, ok=seen & (span > 0) & (before > 0))


def poisson_surprise(n: Array, total: Array, span: Array, before: Array, *, ok: Mask) -> Array:
    """`surprise`'s z from its parts: the recent count `n` of `span` seconds, the baseline window's `total`
    count, the baseline time `before` the recent span; NaN where not `ok`. Apart so the recorded path,
    whose totals come from recording rules, takes the same statistic."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(ok, span / np.where(ok, before, 1.0), 0.0)
        m = np.maximum(total - n, 0.0)
        z = 2.0 * (np.sqrt(np.maximum(n, 0.0) + 0.375) - np.sqrt(r * m + 0.375)) / np.sqrt(1.0 + r)
    return np.where(ok, np.clip(z, -SURPRISE_CLIP, SURPRISE_CLIP), np.nan)


def relative(a: Array, b: Array, floor: float) -> Array:
    """log((a + floor) / (b + floor)): change against a baseline or peers, in e-folds; `floor` is the rate
    below which differences are noise (one event per hour or so), so silent parts compare as equal."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(a + floor) - np.log(b + floor)


def sum_optional(*parts: Array | None) -> Array | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    total = present[0].copy()
    for part in present[1:]:
        total = np.where(np.isnan(total), part, np.where(np.isnan(part), total, total + part))
    return total
