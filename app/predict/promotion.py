"""Promotion: a challenger replaces the current model only if it beats the rules baseline AND the current
model on the same holdout; the comparison goes into the challenger's card (`metrics["promotion"]`).

`beats_baseline` is THE gate, pure, used by every path that promotes: `sickbay train` (`train_gate`),
`sickbay train --from-prometheus` and scheduled retraining (`retrain.retrain` → `promote_if_better`).
A model beats the baseline when its alarm precision is higher at an equal or better recall (hardware
failures caught) and an equal or lower false-alarm rate (per 1,000 node-days). The refusal says which
figure fell short, with both values. The backtest reports the same figures for both side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from app.predict import baseline, evaluate, registry
from app.predict.model_card import PRIMARY_METRICS, RiskModel


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What the gate compares: alarm precision, recall of hardware failures, false alarms per 1,000
    node-days (None: undefined — no alarms, no failures, no node-days)."""

    precision: float | None
    recall: float | None
    false_alarms_per_1000_node_days: float | None

    @classmethod
    def of_metrics(cls, m: evaluate.Metrics) -> Figures:
        """From holdout metrics: alarm precision (true / (true + false) alarms), event recall."""
        judged = m.true_alarms + m.false_alarms
        return cls(
            precision=m.true_alarms / judged if judged else None,
            recall=_finite(m.event_recall),
            false_alarms_per_1000_node_days=_finite(m.false_alarms_per_1000_node_days),
        )

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any]) -> Figures:
        """From a backtest summary (`backtest.assess`): recall of failures with precursors when known."""
        recall = summary.get("recall_with_precursor")
        return cls(
            precision=summary.get("precision"),
            recall=summary.get("recall") if recall is None else recall,
            false_alarms_per_1000_node_days=summary.get("false_alarms_per_1000_node_days"),
        )

    def as_dict(self) -> dict[str, float | None]:
        return {
            "precision": _rounded(self.precision),
            "recall": _rounded(self.recall),
            "false_alarms_per_1000_node_days": _rounded(self.false_alarms_per_1000_node_days),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    passed: bool
    reason: str
    model: Figures
    baseline: Figures
    rules: str = ""

    def record(self) -> dict[str, Any]:
        return {
            "rules": self.rules,
            "passed": self.passed,
            "reason": self.reason,
            "model": self.model.as_dict(),
            "baseline": self.baseline.as_dict(),
        }


def beats_baseline(model: Figures, rules: Figures, *, name: str = "the rules baseline") -> Gate:
    """Does the model beat the baseline: higher precision, recall and false-alarm rate no worse?

    Undefined figures count as the worst: a model with no alarms has no precision to beat anything with;
    a baseline with none has precision 0. No failures to catch (recall undefined on both) is a tie.
    """
    p_model, p_rules = _or(model.precision, 0.0), _or(rules.precision, 0.0)
    r_model, r_rules = _or(model.recall, 0.0), _or(rules.recall, 0.0)
    inf = float("inf")
    f_model = _or(model.false_alarms_per_1000_node_days, inf if model.precision is None else 0.0)
    f_rules = _or(rules.false_alarms_per_1000_node_days, 0.0)
    problems: list[str] = []
    if model.precision is None:
        problems.append("the model raised no alarm on the holdout, so it has no precision")
    elif not p_model > p_rules:
        problems.append(f"precision {p_model:.3f} does not beat the baseline's {p_rules:.3f}")
    if r_model < r_rules:
        problems.append(f"recall {r_model:.3f} is below the baseline's {r_rules:.3f}")
    if f_model > f_rules:
        problems.append(f"false alarms per 1,000 node-days {f_model:.2f} exceed the baseline's {f_rules:.2f}")
    figures = (
        f"model precision {_show(model.precision)}, recall {_show(model.recall)}, "
        f"false alarms/1,000 node-days {_show(model.false_alarms_per_1000_node_days, '.2f')}; "
        f"baseline {_show(rules.precision)}, {_show(rules.recall)}, "
        f"{_show(rules.false_alarms_per_1000_node_days, '.2f')}"
    )
    if problems:
        reason = f"does not beat {name}: " + "; ".join(problems) + f" ({figures})"
        return Gate(passed=False, reason=reason, model=model, baseline=rules, rules=name)
    return Gate(passed=True, reason=f"beats {name} ({figures})", model=model, baseline=rules, rules=name)


def against_baseline(
    metrics: evaluate.Metrics,
    holdout: evaluate.EvalSet,
    rules: baseline.Baseline,
    *,
    feature_names: Sequence[str],
) -> Gate:
    """The gate for a model whose holdout metrics are `metrics`, against `rules` on the same rows."""
    fired = baseline.holdout_scores(rules, holdout, feature_names)
    base = evaluate.evaluate(fired.score, holdout, threshold=baseline.THRESHOLD)
    return beats_baseline(Figures.of_metrics(metrics), Figures.of_metrics(base), name=rules.version)


def _current_view(current: RiskModel | None, holdout: evaluate.EvalSet) -> dict[str, Any] | None:
    if current is None:
        return None
    return _summary(evaluate.evaluate(current.decision_scores(holdout), holdout, threshold=current.card.act))


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def _show(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else f"{value:{spec}}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Promotion:
    """The verdict on a challenger: both models' metrics on the same holdout, and why."""

    promoted: bool
    reason: str
    metric: str
    challenger: dict[str, Any]
    current: dict[str, Any] | None
    version: str | None = None
    challenger_version: str = ""
    current_version: str | None = None
    min_gain: float = 0.0
    holdout: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # `Gate.record()`: the rules baseline on the same holdout
    forced: bool = False

    def record(self) -> dict[str, Any]:
        """What the challenger's card keeps under `metrics["promotion"]`: both models, side by side."""
        return {
            "promoted": self.promoted,
            "reason": self.reason,
            "metric": self.metric,
            "min_gain": self.min_gain,
            "holdout": dict(self.holdout),
            "challenger": {"version": self.challenger_version, **self.challenger},
            "current": None if self.current is None else {"version": self.current_version, **self.current},
            "baseline": self.baseline,
            "forced": self.forced,
        }


def judge(
    challenger: RiskModel,
    current: RiskModel | None,
    holdout: evaluate.EvalSet,
    *,
    min_gain: float = 0.0,
    rules: baseline.Baseline | None = None,
    force: bool = False,
) -> Promotion:
    """Score the challenger, the current model and the rules baseline on the same holdout and say whether
    the challenger should replace the current one.

    First it must beat the baseline (`beats_baseline`; skipped without `rules`). Then, better than the
    current model means: a higher value of the primary metric (the current card's, else the
    challenger's) by more than `min_gain`, AND no more false alarms, each at its own act threshold.
    `force` (an operator's call) promotes whatever the verdict, and the record says it was forced.
    Writes nothing.
    """
    metric = (current.card if current is not None else challenger.card).primary_metric
    if metric not in PRIMARY_METRICS:
        raise ValueError(f"unknown primary metric {metric!r}")
    new = evaluate.evaluate(challenger.decision_scores(holdout), holdout, threshold=challenger.card.act)
    common: dict[str, Any] = {
        "metric": metric,
        "challenger": _summary(new),
        "challenger_version": challenger.card.version,
        "min_gain": min_gain,
        "holdout": _holdout_view(new),
    }
    verdict = _judge(challenger, current, holdout, new, common, min_gain=min_gain, metric=metric, rules=rules)
    if force and not verdict.promoted:
        return replace(
            verdict, promoted=True, forced=True, reason=f"forced by the operator; {verdict.reason}"
        )
    return verdict


def _judge(
    challenger: RiskModel,
    current: RiskModel | None,
    holdout: evaluate.EvalSet,
    new: evaluate.Metrics,
    common: dict[str, Any],
    *,
    min_gain: float,
    metric: str,
    rules: baseline.Baseline | None,
) -> Promotion:
    if rules is not None:
        gate = against_baseline(new, holdout, rules, feature_names=challenger.card.features)
        common["baseline"] = gate.record()
        if not gate.passed:
            if current is not None:
                common["current_version"] = current.card.version
            return Promotion(
                promoted=False, reason=gate.reason, current=_current_view(current, holdout), **common
            )
    if current is None:
        # Nothing to beat, but a model that misses its own precision target would act on false alarms:
        # rules-only is the safer state to stay in.
        target = challenger.card.target_precision
        precision = new.precision if np.isfinite(new.precision) else 0.0
        if precision < target:
            reason = (
                f"no current model, and the challenger's holdout precision {precision:.3f} is below its "
                f"target {target:.2f}"
            )
            return Promotion(promoted=False, reason=reason, current=None, **common)
        reason = (
            f"no current model; the challenger's holdout precision {precision:.3f} meets its target "
            f"{target:.2f}"
        )
        return Promotion(promoted=True, reason=reason, current=None, **common)
    old = evaluate.evaluate(current.decision_scores(holdout), holdout, threshold=current.card.act)
    common.update(current=_summary(old), current_version=current.card.version)
    new_value, old_value = _metric(new, metric), _metric(old, metric)
    if not new_value > old_value + min_gain:
        reason = f"{metric} {new_value:.4f} does not beat the current {old_value:.4f} (+{min_gain})"
        return Promotion(promoted=False, reason=reason, **common)
    if new.false_alarms > old.false_alarms:
        reason = f"{metric} improves, but false alarms rise from {old.false_alarms} to {new.false_alarms}"
        return Promotion(promoted=False, reason=reason, **common)
    reason = f"{metric} {new_value:.4f} > {old_value:.4f} with {new.false_alarms} ≤ {old.false_alarms} false alarms"
    return Promotion(promoted=True, reason=reason, **common)


def with_promotion(model: RiskModel, verdict: Promotion) -> RiskModel:
    """The model with the verdict recorded in its card (`metrics["promotion"]`), so the card shows both."""
    card = replace(model.card, metrics={**model.card.metrics, "promotion": verdict.record()})
    return RiskModel(card=card, estimator=model.estimator, path=model.path)


def promote_if_better(
    challenger: RiskModel,
    current: RiskModel | None,
    holdout: evaluate.EvalSet,
    *,
    models_dir: Path,
    min_gain: float = 0.0,
    rules: baseline.Baseline | None = None,
    force: bool = False,
) -> Promotion:
    """Score both models on the same holdout; install the challenger only if it is better (`judge`).

    Promotion is `install` (atomic; the old current becomes `previous`) of the challenger with the
    comparison recorded in its card. A rejected challenger is not written: the caller decides.
    """
    verdict = judge(challenger, current, holdout, min_gain=min_gain, rules=rules, force=force)
    if not verdict.promoted:
        return verdict
    saved = registry.install(models_dir, with_promotion(challenger, verdict))
    return replace(verdict, version=saved.card.version)


def _metric(metrics: evaluate.Metrics, name: str) -> float:
    value = float(getattr(metrics, name))
    return value if np.isfinite(value) else float("-inf")


def _summary(metrics: evaluate.Metrics) -> dict[str, Any]:
    body = metrics.as_dict()
    keys = (
        "threshold",
        "precision",
        "recall",
        "pr_auc",
        "false_alarms",
        "event_recall_with_precursor",
        "trap_gpus_flagged",
    )
    return {k: body[k] for k in keys}


def _holdout_view(metrics: evaluate.Metrics) -> dict[str, Any]:
    body = metrics.as_dict()
    return {k: body[k] for k in ("rows", "positives", "node_days", "failures")}
