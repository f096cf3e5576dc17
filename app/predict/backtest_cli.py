"""`sickbay backtest`: replay a Prometheus range as the scoring service would have, judge it, price it.

`commands` declares the arguments; they are checked here before anything is read (exit 2 names the
problem: a bad duration or time, warn not below act, an unreadable `--truth`, policy or baseline file);
no model is exit 3, Prometheus unreachable exit 4, no GPU series in the range exit 1. The model and the rules baseline replay in one pass; the
table (`backtest_table`), the JSON and the HTML report show both. Warm-up is automatic (`--warmup`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from app.config import rules
from app.config.errors import ConfigError
from app.predict import (
    backtest,
    backtest_table,
    baseline,
    costs,
    coverage,
    dataset,
    features,
    history,
    hysteresis,
    prometheus,
    registry,
    report,
    train,
    truth_file,
)
from app.predict import cli_common as common
from app.predict.backtest_json import iso
from app.predict.features import series


@dataclass(frozen=True, slots=True)
class _Ladder:
    """What the service and the decision layer take from the policy file."""

    warn: float | None
    act: float | None
    hold: backtest.Hysteresis
    budget_fraction: float
    budget_nodes: int | None
    resend_h: float | None


def _ladder(path: Path) -> _Ladder:
    policy = rules.load_policy(path)
    prediction, budgets = policy.prediction, policy.budgets
    resend = prediction.resend.total_seconds()
    return _Ladder(
        warn=prediction.warn,
        act=prediction.act,
        hold=backtest.Hysteresis(clear_margin=prediction.clear_margin, clear_after=prediction.clear_after),
        budget_fraction=budgets.proactive_max_fraction,
        budget_nodes=budgets.proactive_max_nodes,
        resend_h=resend / 3600.0 if resend > 0 else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Inputs:
    start: float
    end: float
    step_s: float
    lookback_s: float
    timeout_s: float
    node_batch: int
    costs: costs.CostModel
    ladder: _Ladder
    truth: dataset.Truth | None
    xid_classes: dict[int, str] | None
    warmup_s: float
    warn: float | None
    act: float | None
    rules: baseline.Baseline | None


def _inputs(args: argparse.Namespace) -> _Inputs:
    """Everything the arguments say, checked; `common.Usage` (or a `ConfigError`) says what is wrong."""
    start = common.instant(args.start, name="--start")
    end = common.instant(args.end, name="--end")
    if end <= start:
        raise common.Usage("--end must be after --start")
    ladder = _ladder(args.policy)
    cost_model = costs.CostModel(
        job_gpus=costs.CostModel().job_gpus if args.job_gpus is None else args.job_gpus,
        checkpoint_interval_h=common.seconds(args.checkpoint_interval, name="--checkpoint-interval") / 3600.0,
        detect_h=common.seconds(args.detect_time, name="--detect-time") / 3600.0,
        restart_h=common.seconds(args.restart_time, name="--restart-time") / 3600.0,
        min_lead_h=common.seconds(args.min_lead, name="--min-lead") / 3600.0,
        proactive_max_fraction=1.0 if args.no_budget else ladder.budget_fraction,
        proactive_max_nodes=None if args.no_budget else ladder.budget_nodes,
        resend_h=ladder.resend_h,
    )
    truth = truth_file.read(args.truth) if args.truth else None
    warn = args.warn if args.warn is not None else ladder.warn
    act = args.act if args.act is not None else ladder.act
    if warn is not None and act is not None and not warn < act:
        raise common.Usage(f"warn ({warn:g}) must be below act ({act:g}): two distinct levels")
    warmup = series.W7D if args.warmup == "auto" else common.seconds(args.warmup, name="--warmup")
    return _Inputs(
        start=start,
        end=end,
        step_s=common.seconds(args.step, name="--step"),
        lookback_s=common.seconds(args.lookback, name="--lookback"),
        timeout_s=common.seconds(args.timeout, name="--timeout"),
        node_batch=backtest.DEFAULT_NODE_BATCH if args.node_batch is None else args.node_batch,
        costs=cost_model,
        ladder=ladder,
        truth=truth,
        xid_classes=None
        if truth
        else history.xid_classes(rules.load_catalog(args.xid_catalog), per_link=True),
        warmup_s=warmup,
        warn=warn,
        act=act,
        rules=None if args.no_baseline else baseline.load(args.baseline or baseline.DEFAULT_FILE),
    )


def _resolution(args: argparse.Namespace, model: registry.RiskModel, step_s: float) -> float:
    resolution = (
        common.seconds(args.resolution, name="--resolution")
        if args.resolution
        else (model.card.step_s or 300.0)
    )
    if step_s <= 0 or resolution <= 0 or round(step_s) % round(resolution):
        raise common.Usage(f"--step ({step_s:g}s) must be a multiple of the resolution ({resolution:g}s)")
    return resolution


def run_backtest(args: argparse.Namespace, *, client: prometheus.RangeClient | None = None) -> int:
    """Replay a Prometheus range as the scoring service would have, judge it, price it, report it."""
    try:
        inputs = _inputs(args)
    except (common.Usage, ConfigError, ValueError) as exc:
        print(f"sickbay backtest: {exc}", file=sys.stderr)
        return 2
    model = common.load_model(args.models, args.version, command="sickbay backtest")
    if model is None:
        return 3
    try:
        resolution = _resolution(args, model, inputs.step_s)
        _check_thresholds(inputs, model)
    except common.Usage as exc:
        print(f"sickbay backtest: {exc}", file=sys.stderr)
        return 2
    settings = prometheus.ReaderSettings(
        url=args.prometheus_url,
        step_s=resolution,
        lookback_s=inputs.lookback_s,
        timeout_s=inputs.timeout_s,
        retries=args.retries,
    )
    reader = prometheus.Reader(settings, client=client)
    try:
        result = _backtest(args, inputs, reader, model)
    except prometheus.PrometheusUnavailable as exc:
        print(f"sickbay backtest: cannot read {args.prometheus_url}: {exc.reason}", file=sys.stderr)
        return 4
    except backtest.NoData as exc:
        print(f"sickbay backtest: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sickbay backtest: cannot write {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    body = result.as_dict()
    if args.format == "json":
        print(json.dumps(body, indent=2))
    else:
        backtest_table.print_backtest(body)
    return 0


def _check_thresholds(inputs: _Inputs, model: registry.RiskModel) -> None:
    """Thresholds given (arguments, policy) must be two levels; a card whose warn is its act is said."""
    warn = model.card.warn if inputs.warn is None else inputs.warn
    act = model.card.act if inputs.act is None else inputs.act
    if warn < act:
        return
    if inputs.warn is None and inputs.act is None:
        _say(
            f"sickbay backtest: WARNING: the model card's warn ({warn:g}) is not below its act ({act:g}): "
            "no step can be at warn alone (--warn sets one)"
        )
        return
    raise common.Usage(f"warn ({warn:g}) must be below act ({act:g}): two distinct levels")


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def flagged_lines(result: backtest.BacktestResult) -> list[str]:
    """Every scoring step at warn or act, one JSON object a line, in time order."""
    scores = result.replay.scores
    flagged = scores.loc[scores["level"].to_numpy() > 0].sort_values(
        ["timestamp", "node", "gpu"], kind="stable"
    )
    return [
        json.dumps(
            {
                "node": str(node),
                "gpu": int(gpu),
                "uuid": str(uuid),
                "time": iso(float(t)),
                "risk": round(float(risk), 6),
                "level": hysteresis.LEVELS[int(level)],
            }
        )
        for node, gpu, uuid, t, risk, level in zip(
            flagged["node"].tolist(),
            flagged["gpu"].tolist(),
            flagged["uuid"].tolist(),
            flagged["timestamp"].tolist(),
            flagged["score"].tolist(),
            flagged["level"].tolist(),
            strict=True,
        )
    ]


def _backtest(
    args: argparse.Namespace, inputs: _Inputs, reader: prometheus.Reader, model: registry.RiskModel
) -> backtest.BacktestResult:
    ladder = inputs.ladder
    with train.Steps(show=not args.quiet) as steps:
        with steps.step("find GPU hosts"):
            hosts = backtest.find_hosts(
                reader, start=inputs.start, end=inputs.end, lookback_s=inputs.lookback_s
            )
        total = backtest.batch_count(len(hosts), inputs.node_batch)
        with steps.step(f"read and replay {len(hosts)} hosts", total=total) as advance:
            ranged = backtest.replay_range(
                reader,
                model,
                start=inputs.start,
                end=inputs.end,
                step_s=inputs.step_s,
                lookback_s=inputs.lookback_s,
                warn=inputs.warn,
                act=inputs.act,
                hold=ladder.hold,
                rules=inputs.rules,
                warmup_s=inputs.warmup_s,
                node_batch=inputs.node_batch,
                xid_classes=inputs.xid_classes,
                hosts=hosts,
                progress=lambda done, total: advance(),
            )
        if ranged.replay.start > ranged.asked_start:
            _say(
                f"sickbay backtest: warm-up: the history starts at {iso(ranged.replay.start - inputs.warmup_s)}, "
                f"so scoring starts at {iso(ranged.replay.start)}, {inputs.warmup_s / 86400:g} days later "
                f"(the features' longest window), not at --start"
            )
        missing = coverage.missing_fields(
            [f for f in features.SOURCE_METRICS if f not in ranged.absent], model.card.features
        )
        warning = coverage.warning(missing, model.card.features)
        if warning:
            _say(f"sickbay backtest: WARNING: {warning}")
        with steps.step("assess"):
            result = backtest.assess(
                ranged.replay, inputs.truth, failures=ranged.xid_failures, costs=inputs.costs
            )
        result = replace(
            result,
            extra={
                "prometheus_url": args.prometheus_url,
                "lookback_s": inputs.lookback_s,
                "resolution_s": reader.settings.step_s,
                "hosts": ranged.hosts,
                "batches": ranged.batches,
                "queries": ranged.queries,
                "truth": str(args.truth) if args.truth else None,
                "asked_start": iso(ranged.asked_start),
                "warmup_s": inputs.warmup_s,
                "missing_fields": list(missing),
                "missing_fields_warning": warning,
            },
        )
        if args.flags_out:
            args.flags_out.write_text(
                "".join(line + "\n" for line in flagged_lines(result)), encoding="utf-8"
            )
        if args.html:
            with steps.step("HTML report"):
                report.write_html(args.html, result)
    return result
