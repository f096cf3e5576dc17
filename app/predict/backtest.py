"""Backtest: replay a stretch of history as if the scoring service had been running, and judge it.

Three steps, each usable alone (the first two re-exported here from their modules):

1. `replay_range.read_range` / `replay_range` read DCGM samples from Prometheus in batches of hosts.
2. `replay.replay` (pure) scores them at every step as the service would have, with the service's own
   hysteresis (`hysteresis`), the rules baseline beside the model in the same pass (`baseline`).
3. `assess` (pure, this module; the per-alarm rules in `backtest_judge`) judges the alarms against ground
   truth — a simulator's `truth.json` (`dataset.read_truth`: failures with precursor starts, repairs, trap
   GPUs) or failures read back from the samples (`history.from_samples`: XID gauge changes and GPUs that
   fell off the bus; precursors unknown, repairs taken from the counter resets the replay saw) — and
   prices them (`costs`), running the alarms through the proactive ladder (`proactive_replay`: node
   holds, and the serve path's budget check).
   The baseline's replay is judged the same way (`BacktestResult.baseline`), side by side.

An alarm's outcome, decided at its first flag t0 on a GPU slot (node + index), with h the model horizon:
- `after-failure`: the slot failed before t0 and is not repaired (+ 1 h to settle): remediation owns it;
  neither true nor false, and it takes no capacity (the node is out either way);
- `true`: a hardware failure (reset-gpu, reboot-node, replace) hits the slot after t0 and before the
  alarm ends (one step after its last flag: the level is seen to drop then) or t0 + h, whichever is later;
- `early`: t0 falls in the known precursor of a later hardware failure of the slot (a real warning, more
  than a horizon ahead);
- `other`: a non-hardware failure (e.g. XID 94, contained ECC) follows within that window, or its known
  precursor is under way: the GPU degrades, but no hardware fault follows — as `evaluate` excludes them;
- `false`: anything else. The alarm also names the trap its GPU is (stable high SBE, noisy NVLink, hot
  rack, a buggy job's XIDs) when it is one.

Precision is true / (true + false) over alarms. A failure counts for recall and lead time when a whole
horizon of scoring precedes it (failure time > start + h, as `evaluate` has it); it is caught when a true
alarm covers it, and its lead time is the failure time minus that alarm's first flag. Costs count every
hardware failure in (start, end]. False alarms per 1,000 node-days use nodes x range days.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from app.predict import (
    backtest_judge,
    backtest_summary,
    dataset,
    evaluate,
    history,
    labels,
    proactive_replay,
    promotion,
)
from app.predict import costs as costing
from app.predict.backtest_json import alarm_dict as _alarm_dict
from app.predict.backtest_json import failure_dict as _failure_dict
from app.predict.backtest_json import iso as _iso
from app.predict.backtest_json import jsonable as _jsonable
from app.predict.hysteresis import (
    LEVEL_ACT,
    LEVEL_NONE,
    LEVEL_WARN,
    LEVELS,
    Hysteresis,
    hold_levels,
    levels_of,
)
from app.predict.replay import (
    ALARM_COLUMNS,
    DEFAULT_NODE_BATCH,
    SCORE_COLUMNS,
    Replay,
    concat,
    records,
    replay,
)
from app.predict.replay_range import (
    DEFAULT_LOOKBACK_S,
    DEFAULT_STEP_S,
    NoData,
    RangeReplay,
    batch_count,
    find_hosts,
    read_range,
    renumber,
    replay_range,
)

__all__ = [
    "ALARM_COLUMNS",
    "DEFAULT_LOOKBACK_S",
    "DEFAULT_NODE_BATCH",
    "DEFAULT_STEP_S",
    "LEVELS",
    "LEVEL_ACT",
    "LEVEL_NONE",
    "LEVEL_WARN",
    "OUTCOMES",
    "SCORE_COLUMNS",
    "BacktestResult",
    "Hysteresis",
    "NoData",
    "RangeReplay",
    "Replay",
    "assess",
    "batch_count",
    "concat",
    "find_hosts",
    "hold_levels",
    "levels_of",
    "read_range",
    "records",
    "renumber",
    "replay",
    "replay_range",
]

DAY = 86400.0
OUTCOMES = ("true", "early", "other", "false", "after-failure")
TruthSource = Literal["truth", "xid", "none"]
_COMMON = (
    "precision is true / (true + false) alarms; early alarms (a known precursor under way, the failure "
    "more than a horizon ahead), other alarms (a non-hardware failure follows) and alarms after a failure "
    "count as neither",
    "recall and lead time count failures with a whole horizon of scoring before them; costs count every "
    "hardware failure in the range",
)
NOTES: Mapping[str, tuple[str, ...]] = {
    "truth": _COMMON,
    "xid": (
        *_COMMON,
        "ground truth read back from the samples: changes of the XID gauge to a hardware-class XID "
        "(per-link NVLink XIDs included) and GPUs that fell off the bus; precursors, non-hardware failures "
        "and traps are unknown, so an alarm more than a horizon ahead of its failure counts as false",
        "repairs are the counter resets the replay saw (reboots, GPU resets, new boards)",
    ),
    "none": ("no ground truth: every alarm not after a failure counts as false",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestResult:
    """The verdict on a replay: alarms with outcomes, failures with catches, metrics, costs."""

    replay: Replay
    source: TruthSource
    alarms: pd.DataFrame
    failures: pd.DataFrame
    summary: dict[str, Any]
    costs: costing.CostModel
    priced: proactive_replay.Pricing
    unbudgeted: proactive_replay.Pricing | None
    row_metrics: evaluate.Metrics
    extra: dict[str, Any] = field(default_factory=dict)
    # The rules baseline judged on the same truth, replayed in the same pass (`Replay.baseline`).
    baseline: BacktestResult | None = None

    def as_dict(self) -> dict[str, Any]:
        """The whole result as JSON-ready values (times ISO-8601 UTC, hours rounded, NaN as null)."""
        r = self.replay
        gpus = r.gpus_per_node()
        days = (r.end - r.start) / DAY
        body: dict[str, Any] = {
            "range": {
                "start": _iso(r.start),
                "end": _iso(r.end),
                "step_s": r.step_s,
                "days": round(days, 4),
                "samples_from": _iso(r.samples_from),
            },
            "model": {
                "version": r.model_version,
                "warn": round(r.warn, 6),
                "act": round(r.act, 6),
                "sustain_s": r.sustain_s,
                "horizon_s": r.horizon_s,
                "clear_margin": r.hold.clear_margin,
                "clear_after_steps": r.hold.clear_after,
                "flagged_steps": _flagged_steps(r),
            },
            "ground_truth": self.source,
            "notes": list(NOTES[self.source]),
            "fleet": {
                "nodes": len(gpus),
                "gpus": int(sum(gpus.values())),
                "node_days": round(len(gpus) * days, 4),
                "gpu_hours": round(sum(gpus.values()) * days * 24.0, 4),
            },
            "summary": _jsonable(self.summary),
            "costs": {
                "assumptions": self.costs.assumptions(),
                **self.priced.as_dict(),
                "without_budget": None if self.unbudgeted is None else self.unbudgeted.as_dict(),
            },
            "alarms": [_alarm_dict(a) for a in records(self.alarms)],
            "failures": [_failure_dict(f) for f in records(self.failures)],
            "row_metrics": self.row_metrics.as_dict(),
        }
        if self.baseline is not None:
            body["baseline"] = self.baseline_section()
        if self.extra:
            body["source"] = _jsonable(self.extra)
        return body

    def versus_baseline(self) -> promotion.Gate | None:
        """The promotion gate's verdict on this run's figures (`promotion.beats_baseline`)."""
        if self.baseline is None:
            return None
        return promotion.beats_baseline(
            promotion.Figures.of_summary(self.summary),
            promotion.Figures.of_summary(self.baseline.summary),
            name=self.baseline.replay.model_version,
        )

    def baseline_section(self) -> dict[str, Any]:
        """The baseline's summary (the model's keys), costs and alarms, and whether the model beats it."""
        assert self.baseline is not None
        base = self.baseline
        gate = self.versus_baseline()
        return {
            "version": base.replay.model_version,
            "rules_skipped": list(self.replay.baseline_skipped),
            "summary": _jsonable(base.summary),
            "costs": base.priced.as_dict(),
            "alarms": [_alarm_dict(a) for a in records(base.alarms)],
            "model_beats_baseline": None if gate is None else gate.record(),
        }


def assess(
    replay: Replay,
    truth: dataset.Truth | None,
    *,
    failures: pd.DataFrame | None,
    costs: costing.CostModel,
) -> BacktestResult:
    """Judge a replay against `truth` (preferred) or `failures` (e.g. from the XID gauge; repairs are then
    the counter resets the replay saw). With neither, every alarm not after a failure is false."""
    if truth is not None:
        fails, repairs, traps = truth.failures, truth.repairs, truth.traps
        source: TruthSource = "truth"
    else:
        fails = failures if failures is not None else history.empty()
        repairs = replay.resets
        traps = pd.DataFrame(columns=list(dataset.TRAP_COLUMNS))
        source = "xid" if failures is not None else "none"
    fails = backtest_judge.normalised_failures(fails)
    keys = replay.scores[["node", "gpu", "uuid", "timestamp"]]
    status = labels.label_rows(keys, fails, repairs=repairs, horizon_s=replay.horizon_s)
    trap_kind = dataset.trap_kinds(traps, keys)
    alarms = backtest_judge.judge_alarms(replay, fails, status.status, trap_kind)
    caught = backtest_judge.judge_failures(replay, fails, alarms, known_precursors=source == "truth")
    alarms = backtest_judge.mark_catches(alarms, caught)
    row_metrics = evaluate.evaluate(
        replay.scores["score"].to_numpy(dtype=np.float64),
        evaluate.EvalSet(
            keys=keys,
            x=np.zeros((len(keys), 0), dtype=np.float32),
            labels=status,
            failures=fails,
            trap_kind=trap_kind,
            horizon_s=replay.horizon_s,
        ),
        threshold=replay.act,
    )
    known = source == "truth"
    alarms, caught, priced = proactive_replay.price(
        replay, alarms, caught, fails, costs=costs, known_precursors=known
    )
    unbudgeted: proactive_replay.Pricing | None = None
    off = replace(costs, proactive_max_fraction=1.0, proactive_max_nodes=None, resend_h=None)
    if costs.node_limit(replay.nodes) < off.node_limit(replay.nodes):
        unbudgeted = proactive_replay.price(replay, alarms, caught, fails, costs=off, known_precursors=known)[
            2
        ]
    rules_result = None
    if replay.baseline is not None:
        rules_result = assess(replay.baseline, truth, failures=failures, costs=costs)
    return BacktestResult(
        replay=replay,
        source=source,
        alarms=alarms,
        failures=caught,
        summary=backtest_summary.summarise(replay, alarms, caught, trap_kind, keys, known_precursors=known),
        costs=costs,
        priced=priced,
        unbudgeted=unbudgeted,
        row_metrics=row_metrics,
        baseline=rules_result,
    )


def _flagged_steps(r: Replay) -> dict[str, int]:
    """Scoring steps at warn and at act (a GPU per step): the two levels, counted apart."""
    levels = r.scores["level"].to_numpy()
    return {"warn": int((levels == LEVEL_WARN).sum()), "act": int((levels == LEVEL_ACT).sum())}
