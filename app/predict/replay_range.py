"""Reading a Prometheus range for a backtest, in batches of hosts, and replaying each batch as it comes.

`read_range` reads DCGM samples for [start - lookback, end] (the service reads a look-back before
scoring; features need up to 7 days). `replay_range` does it in batches of hosts — one query per metric
per batch, never one per node — and replays each batch (`replay.replay`) before reading the next, so
memory stays bounded by a batch, not by the fleet (1,600 GPUs x 21 days at 5 min is ~10M rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from app.predict import baseline, coverage, features, history, prometheus, promql
from app.predict.hysteresis import Hysteresis
from app.predict.model_card import RiskModel
from app.predict.replay import DEFAULT_NODE_BATCH, Replay, concat, replay

DAY = 86400.0
DEFAULT_STEP_S = 1800.0
DEFAULT_LOOKBACK_S = 7 * DAY


def read_range(
    reader: prometheus.Reader,
    start: float,
    end: float,
    *,
    lookback_s: float,
    hosts: Sequence[promql.HostRef] = (),
) -> pd.DataFrame:
    """Samples of every source metric from `start - lookback_s` to `end` (Unix seconds), on the reader's
    step; all hosts, or only `hosts` (one batch).

    Instants before the first sample of any GPU are dropped: a look-back that reaches back before the
    history (a fresh Prometheus, a backfill) would otherwise read as days in which every GPU was missing.
    """
    frame = reader.read(_utc(start - lookback_s), _utc(end), hosts=hosts)
    present = frame["present"].to_numpy() > 0 if "present" in frame.columns else np.zeros(0, dtype=bool)
    if not present.any():
        return frame
    first = float(frame["timestamp"].to_numpy()[present].min())
    return frame.loc[frame["timestamp"].to_numpy() >= first].reset_index(drop=True)


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@dataclass(frozen=True, slots=True)
class RangeReplay:
    """A replay read from Prometheus, with the hardware failures the XID gauge showed (when asked)."""

    replay: Replay
    xid_failures: pd.DataFrame | None
    hosts: int
    batches: int
    queries: int
    # The start asked for, and the start scored: later when the history before it is shorter than the
    # warm-up (`warmup_start`).
    asked_start: float = float("nan")
    # Source fields no batch had a value for (`coverage.absent_fields`, all batches together).
    absent: frozenset[str] = frozenset()


class NoData(Exception):
    """Prometheus has no DCGM series in the range."""


def replay_range(
    reader: prometheus.Reader,
    model: RiskModel,
    *,
    start: float,
    end: float,
    step_s: float = DEFAULT_STEP_S,
    lookback_s: float = DEFAULT_LOOKBACK_S,
    warn: float | None = None,
    act: float | None = None,
    hold: Hysteresis | None = None,
    node_batch: int = DEFAULT_NODE_BATCH,
    rules: baseline.Baseline | None = None,
    warmup_s: float = 0.0,
    xid_classes: Mapping[int, str] | None = None,
    hosts: Sequence[promql.HostRef] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RangeReplay:
    """Find the hosts with DCGM series (one query; or take `hosts`), then read and replay them
    `node_batch` at a time.

    Warm-up: scoring starts at `warmup_start` — no earlier than `warmup_s` (at most the look-back) after
    the first sample of the first batch, so the features' windows are full when the first step is judged
    even when the history starts at `start` (a backfilled or fresh Prometheus). `progress(done, total)` is called after each batch. With `xid_classes`, hardware failures are also
    read off each batch's samples: XID gauge changes and vanished GPUs (`history.from_samples`). Raises `prometheus.PrometheusUnavailable`
    when Prometheus cannot be read, `NoData` when it has no GPU series in the range.
    """
    if hosts is None:
        hosts = find_hosts(reader, start=start, end=end, lookback_s=lookback_s)
    if not hosts:
        raise NoData(f"no {features.GPU_TEMP} series between {_utc(start - lookback_s)} and {_utc(end)}")
    batches = [hosts[i : i + max(1, node_batch)] for i in range(0, len(hosts), max(1, node_batch))]
    parts: list[Replay] = []
    failures: list[pd.DataFrame] = []
    absent: frozenset[str] | None = None
    asked = start
    for done, batch in enumerate(batches, 1):
        frame = read_range(reader, asked, end, lookback_s=lookback_s, hosts=batch)
        if done == 1:
            # The look-back already holds the history the windows need unless the data starts later.
            warmup_s = min(warmup_s, lookback_s)
            start = warmup_start(frame, asked, warmup_s)
            if start >= end:
                raise NoData(
                    f"the history starts at {_utc(start - warmup_s)}: with a warm-up of {warmup_s / DAY:g} "
                    f"days nothing before {_utc(end)} can be scored (a longer range, or --warmup 0)"
                )
        missing = coverage.absent_fields(frame)
        absent = missing if absent is None else absent & missing
        parts.append(
            replay(
                frame, model, start=start, end=end, step_s=step_s, warn=warn, act=act, hold=hold, rules=rules
            )
        )
        if xid_classes is not None:
            failures.append(history.from_samples(frame, xid_classes))
        del frame
        if progress is not None:
            progress(done, len(batches))
    return RangeReplay(
        replay=concat(parts),
        xid_failures=renumber(failures, prefix="X") if xid_classes is not None else None,
        hosts=len(hosts),
        batches=len(batches),
        queries=reader.queries,
        asked_start=asked,
        absent=absent or frozenset(),
    )


def warmup_start(frame: pd.DataFrame, start: float, warmup_s: float) -> float:
    """The first instant to score: `start`, or `warmup_s` after the frame's first sample if that is later
    (on the scoring grid the replay rounds up to)."""
    if warmup_s <= 0 or frame.empty:
        return start
    first = float(np.nanmin(features.timestamps(frame)))
    return max(start, first + warmup_s)


def find_hosts(
    reader: prometheus.Reader, *, start: float, end: float, lookback_s: float
) -> list[promql.HostRef]:
    """The hosts with GPU series in [start - lookback_s, end] (one query)."""
    return reader.hosts(_utc(start - lookback_s), _utc(end))


def batch_count(hosts: int, node_batch: int) -> int:
    return math.ceil(hosts / max(1, node_batch))


def renumber(tables: Iterable[pd.DataFrame], *, prefix: str) -> pd.DataFrame:
    """Failure tables of separate batches as one, with ids unique again."""
    parts = [t for t in tables if not t.empty]
    if not parts:
        return history.empty()
    out = pd.concat(parts, ignore_index=True).sort_values(["failure_time", "node", "gpu"], kind="stable")
    out = out.reset_index(drop=True)
    out["id"] = [f"{prefix}{i + 1:05d}" for i in range(len(out))]
    return out
