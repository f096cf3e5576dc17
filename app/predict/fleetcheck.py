"""The fleet's own backtest, for leaving shadow: how the current model would have done on this fleet.

Replays the last `history_s` of the fleet's Prometheus exactly as `sickbay backtest` does
(`backtest.replay_range`: batches of hosts, the service's hysteresis) and judges its alarms against the
fleet's own failures — the labels retraining uses: hardware-class XID changes of the XID gauge and GPUs
that fell off the bus (`history.from_samples`, read off each batch) merged with the journal's hardware
faults (`retrain.journal_failures`, read by the caller) by `history.merge`. No simulator truth exists in
production, so precursors and traps are unknown: an alarm not followed by a hardware failure within the
horizon counts as false, which is the honest side to err on before letting a model taint nodes.

`check` is blocking (HTTP, pandas, scikit-learn): the service runs it in a worker thread. Raises
`prometheus.PrometheusUnavailable` and `backtest.NoData` as `replay_range` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from app.predict import backtest, costs, history, prometheus
from app.predict.registry import RiskModel

DAY = 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetCheck:
    """The figures the shadow decision reads, and the summary they came from (journaled with them)."""

    model_version: str
    start: float
    end: float
    nodes: int
    history_days: float  # days of the range the fleet has samples for
    node_days: float  # nodes x history_days: what the false-alarm rate is per
    alarms: int
    false_alarms: int
    failures: int
    caught: int
    precision: float | None
    recall: float | None

    @property
    def false_alarm_rate(self) -> float | None:
        return self.false_alarms * 1000.0 / self.node_days if self.node_days > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_version": self.model_version,
            "start": _iso(self.start),
            "end": _iso(self.end),
            "nodes": self.nodes,
            "history_days": round(self.history_days, 3),
            "node_days": round(self.node_days, 2),
            "alarms": self.alarms,
            "false_alarms": self.false_alarms,
            "false_alarms_per_1000_node_days": None
            if self.false_alarm_rate is None
            else round(self.false_alarm_rate, 3),
            "failures": self.failures,
            "caught": self.caught,
            "precision": self.precision,
            "recall": self.recall,
        }


def check(
    reader: prometheus.Reader,
    model: RiskModel,
    *,
    end: float,
    history_s: float,
    xid_classes: Mapping[int, str],
    journal_failures: pd.DataFrame | None,
    cost_model: costs.CostModel,
    hold: backtest.Hysteresis,
    warn: float | None = None,
    act: float | None = None,
    step_s: float = backtest.DEFAULT_STEP_S,
    lookback_s: float = backtest.DEFAULT_LOOKBACK_S,
    node_batch: int = backtest.DEFAULT_NODE_BATCH,
) -> FleetCheck:
    """Backtest `model` over [end - history_s, end] of the fleet `reader` reads."""
    start = math.floor((end - history_s) / step_s) * step_s  # steps on the grid Prometheus reads on
    ranged = backtest.replay_range(
        reader,
        model,
        start=start,
        end=end,
        step_s=step_s,
        lookback_s=lookback_s,
        warn=warn,
        act=act,
        hold=hold,
        node_batch=node_batch,
        xid_classes=xid_classes,
    )
    return judge(ranged.replay, ranged.xid_failures, journal_failures, cost_model=cost_model)


def judge(
    replay: backtest.Replay,
    from_samples: pd.DataFrame | None,
    from_journal: pd.DataFrame | None,
    *,
    cost_model: costs.CostModel,
) -> FleetCheck:
    """Judge a replay against the fleet's own failures (pure; `check` without the reading)."""
    failures = history.merge(
        from_samples if from_samples is not None else history.empty(),
        from_journal if from_journal is not None else history.empty(),
    )
    result = backtest.assess(replay, None, failures=failures, costs=cost_model)
    summary = result.summary
    first = replay.samples_from if math.isfinite(replay.samples_from) else replay.end
    history_days = max(0.0, (replay.end - max(replay.start, first)) / DAY)
    nodes = replay.nodes
    return FleetCheck(
        model_version=replay.model_version,
        start=replay.start,
        end=replay.end,
        nodes=nodes,
        history_days=history_days,
        node_days=nodes * history_days,
        alarms=int(summary["alarms"]),
        false_alarms=int(summary["false_alarms"]),
        failures=int(summary["failures_scored"]),
        caught=int(summary["failures_caught"]),
        precision=summary["precision"],
        recall=summary["recall"],
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
