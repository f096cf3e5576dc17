"""Scoring's reads when the recording rules are installed: recorded long windows and a short raw window.

Each cycle asks Prometheus whether the rules' series exist (`count(gpu:…:count_over_time7d)`):

- yes (the *recorded* path): the last `recorded_features.SHORT_WINDOW_S` of raw samples (a `RecentWindow`,
  refreshed incrementally) and the recorded series' values at the two instants scoring reads (the last
  grid instant the rules have recorded, up to a step or two before now as their group's phase has it, and
  `sustain_s` before), one query per recorded series for the whole fleet. Memory grows with the GPUs,
  not with GPUs x look-back. Hosts with a GPU that is not regular (less than a full week of samples, a
  counter reset within it, no recorded values) are read raw over the look-back, in batches of hosts:
  their windows stop at a first row or a reset, which an instant vector cannot show;
- no (the *raw* path, the fallback): the whole look-back raw, as before the rules existed.

The path in use is logged when it changes (WARNING for raw: it is the path that does not scale) and is the
gauge `sickbay_predict_read_path{path=…}`; the hosts read raw on the recorded path are
`sickbay_predict_raw_hosts`. The backtest replays old history, where no rule ever ran: it reads raw.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Gauge

from app.predict import features, range_answers, recent_window, recorded_features, recorded_xid, score
from app.predict import recorded_rules as rr
from app.predict.prometheus import PrometheusUnavailable, Reader
from app.predict.promql import HostRef, host_ref

log = logging.getLogger(__name__)

RECORDED, RAW = "recorded", "raw"
_BY = ", ".join((*features.HOST_COLUMNS, "gpu", "UUID", "uuid"))
HOST_BATCH = 200  # hosts per raw read of the irregular ones: one query per metric per batch


@dataclass(frozen=True, slots=True)
class FeatureRead:
    """One cycle's read: the raw samples it saw (for the fields the fleet lacks) and the features table."""

    path: str
    frame: pd.DataFrame
    table: pd.DataFrame
    raw_hosts: int = 0


@dataclass(frozen=True, slots=True)
class PathMetrics:
    read_path: Gauge
    raw_hosts: Gauge

    @classmethod
    def create(cls, registry_: CollectorRegistry) -> PathMetrics:
        return cls(
            read_path=Gauge(
                "sickbay_predict_read_path",
                "1 for the way scoring reads history: recorded (rules installed) or raw (the whole look-back)",
                ["path"],
                registry=registry_,
            ),
            raw_hosts=Gauge(
                "sickbay_predict_raw_hosts",
                "Hosts read raw over the look-back on the recorded path (new, reset or gappy GPUs)",
                registry=registry_,
            ),
        )


@dataclass(slots=True)
class FeatureReader:
    """Picks the path each cycle and reads the features scoring needs (`read(now, tail_s)`)."""

    reader: Reader
    metrics: PathMetrics | None = None
    _raw: recent_window.RecentWindow | None = None
    _short: recent_window.RecentWindow | None = None
    _path: str | None = None
    _refs: dict[str, HostRef] = field(default_factory=dict)

    def read(self, now: datetime, tail_s: float) -> FeatureRead:
        path = RECORDED if self._rules_installed(now) else RAW
        if path != self._path:
            self._say(path)
        out = self._recorded(now, tail_s) if path == RECORDED else self._raw_read(now, tail_s)
        if self.metrics is not None:
            for name in (RECORDED, RAW):
                self.metrics.read_path.labels(path=name).set(1 if name == path else 0)
            self.metrics.raw_hosts.set(out.raw_hosts)
        return out

    def _say(self, path: str) -> None:
        self._path = path
        if path == RECORDED:
            self._raw = None  # its week of samples is not needed any more
            log.info("risk scoring reads the recording rules' long windows and %.1f h raw", _short_h())
        else:
            self._short = None
            log.warning(
                "risk scoring reads %.0f h of raw samples per cycle: the recording rules (group %s in "
                "rules/prometheus/sickbay-rules.yaml) are not installed, so memory grows with GPUs x look-back",
                self.reader.settings.lookback_s / 3600.0,
                rr.GROUP,
            )

    def _rules_installed(self, now: datetime) -> bool:
        if self.reader.settings.step_s != rr.STEP_S:
            return False  # the rules sum a 5-minute grid; another grid's features would differ
        at = _utc(now.timestamp())
        answer = self.reader.query_range(f"count({rr.SAMPLES})", at, at)
        return any(one.get("values") for one in answer if isinstance(one, Mapping))

    def _raw_read(self, now: datetime, tail_s: float) -> FeatureRead:
        if self._raw is None:
            self._raw = recent_window.RecentWindow(self.reader)
        frame = self._raw.refresh(now)
        table = features.compute_features(score.current_boards(frame), tail_s=tail_s)
        return FeatureRead(RAW, frame, table)

    def _recorded(self, now: datetime, tail_s: float) -> FeatureRead:
        settings = self.reader.settings
        step = settings.step_s
        if self._short is None:
            span = recorded_features.SHORT_WINDOW_S + math.ceil(tail_s / step) * step + step
            self._short = recent_window.RecentWindow(Reader(replace(settings, lookback_s=span)))
        frame = self._short.refresh(now)
        if frame.empty:
            return FeatureRead(RECORDED, frame, features.compute_features(frame))
        last = min(float(frame["timestamp"].max()), self._recorded_until(now))
        instants = sorted({last - math.floor(tail_s / step) * step, last})
        recorded = self._values(instants)
        irregular = _irregular(frame, recorded, instants)
        boards = score.current_boards(frame)
        regular = boards[~boards["node"].isin(irregular)]
        lookback_start = math.ceil((now.timestamp() - settings.lookback_s) / step) * step
        long = recorded_features.combine(regular, recorded, instants=instants, lookback_start=lookback_start)
        xid = recorded_xid.read(self.reader, instants, nodes=set(regular["node"].astype(str)))
        parts = [recorded_xid.merged(long, xid)]
        parts.extend(self._raw_hosts(sorted(irregular), now, tail_s, instants))
        table = pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)
        return FeatureRead(RECORDED, frame, table, raw_hosts=len(irregular))

    def _recorded_until(self, now: datetime) -> float:
        """The last grid instant the rules have recorded: the one before their latest evaluation."""
        answer = self.reader.query_range(f"max(timestamp({rr.SAMPLES}))", now, now)
        times = [float(v[1]) for one in answer if isinstance(one, Mapping) for v in one.get("values", [])]
        step = self.reader.settings.step_s
        return math.floor(max(times) / step) * step if times else math.inf  # none: the raw window's last

    def _values(self, instants: Sequence[float]) -> pd.DataFrame:
        """Every series `recorded_features` reads at the instants: `KEY_COLUMNS` and a column per record.

        The rules' value for grid instant `g` is written by the evaluation in `[g, g + step)` (whatever
        its phase), so each instant is read as the last value of `[g, g + step - 1ms]`."""
        step = instants[-1] - instants[0] or self.reader.settings.step_s
        ahead = self.reader.settings.step_s - 0.001
        gpus: dict[tuple[str, int, str], int] = {}
        cells: dict[str, range_answers.Cells] = {}
        with range_answers.collector_paused():
            for name in rr.READ:
                query = f"max by ({_BY}) (last_over_time({name}[{round(ahead * 1000)}ms]))"
                start, end = _utc(instants[0] + ahead), _utc(instants[-1] + ahead)
                answer = self.reader.query_range(query, start, end, step_s=step)
                self._remember_hosts(answer)
                try:
                    cells[name] = range_answers.parse(
                        answer, gpus, grid_start=instants[0] + ahead, step=step, n_times=len(instants)
                    )
                except range_answers.Malformed as exc:
                    raise PrometheusUnavailable(str(exc), query=query) from exc
        frame = range_answers.assemble(gpus, cells, grid_start=instants[0], step=step, n_times=len(instants))
        return frame.drop(columns="present")

    def _remember_hosts(self, answer: Sequence[Mapping[str, Any]]) -> None:
        for one in answer:
            labels = one.get("metric", {})
            ref = host_ref(labels) if isinstance(labels, Mapping) else None
            if ref is not None and ref.node not in self._refs:
                self._refs[ref.node] = ref

    def _raw_hosts(
        self, nodes: Sequence[str], now: datetime, tail_s: float, instants: Sequence[float]
    ) -> list[pd.DataFrame]:
        """The features of these hosts from their raw look-back, in batches of hosts."""
        if not nodes:
            return []
        settings = self.reader.settings
        refs = [self._refs.get(node) for node in nodes]
        if any(ref is None for ref in refs):
            start = _utc(now.timestamp() - recorded_features.SHORT_WINDOW_S)
            self._refs.update({ref.node: ref for ref in self.reader.hosts(start, now)})
        known = [self._refs[node] for node in nodes if node in self._refs]
        out: list[pd.DataFrame] = []
        for lo in range(0, len(known), HOST_BATCH):
            frame = self.reader.read(
                _utc(now.timestamp() - settings.lookback_s), now, hosts=known[lo : lo + HOST_BATCH]
            )
            table = features.compute_features(score.current_boards(frame), tail_s=tail_s)
            out.append(table[table["timestamp"].isin(instants)])
        return out


def _irregular(frame: pd.DataFrame, recorded: pd.DataFrame, instants: Sequence[float]) -> set[str]:
    """Hosts with a GPU in the short window lacking a full recorded week without resets at an instant."""
    keys = ["node", "gpu", "uuid"]
    latest = score.current_boards(frame)
    at = latest[latest["timestamp"].isin(instants)][[*keys, "timestamp"]].astype({"node": str, "uuid": str})
    if recorded.empty:
        return set(at["node"])
    values = recorded[[*keys, "timestamp", rr.SAMPLES, rr.RESETS]].astype({"node": str, "uuid": str})
    merged = at.merge(values, on=[*keys, "timestamp"], how="left")
    full = merged[rr.SAMPLES].to_numpy(dtype=np.float64) >= rr.FULL_WEEK
    calm = np.nan_to_num(merged[rr.RESETS].to_numpy(dtype=np.float64), nan=0.0) == 0
    return set(merged.loc[~(full & calm), "node"])


def _short_h() -> float:
    return recorded_features.SHORT_WINDOW_S / 3600.0


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
