"""Command lines for the predictor: `train`, `evaluate`, `score`, `backtest` (what `sickbay <cmd>` runs).

Each command is a pair: `add_<cmd>_arguments(parser)` and `run_<cmd>(args) -> exit code`, so `app.cli`
can mount them as subcommands; `python -m app.predict <cmd> ...` works on its own. Output: JSON on stdout
(`--json`, or `--format json` for backtest) or a rich table; progress and logs on stderr.

Exit codes: 0 done, 1 nothing to work on (no GPU series in the range), 2 bad arguments or unreadable
inputs, 3 no usable model, 4 Prometheus unreachable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.config import rules
from app.config.durations import parse_duration
from app.config.errors import ConfigError
from app.config.settings import RULES_DIR
from app.predict import (
    backtest,
    costs,
    dataset,
    features,
    history,
    prometheus,
    registry,
    report,
    score,
    split,
    train,
)

add_train_arguments = train.add_arguments
run_train = train.run


# -- evaluate -------------------------------------------------------------------------------------------


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="dataset directory")
    parser.add_argument(
        "--models", type=Path, default=Path("models"), help="models directory (default models/)"
    )
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument(
        "--warmup-hours", type=float, default=24.0, help="data skipped at the start (default 24)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run_evaluate(args: argparse.Namespace) -> int:
    """Metrics of a model over whole datasets (every GPU counts as unseen)."""
    model = _load(args.models, args.version)
    if model is None:
        return 3
    config = train.TrainConfig(
        horizon_s=model.card.horizon_s,
        every_s=model.card.every_s,
        sustain_s=model.card.sustain_s,
        split=split.SplitSpec(warmup_s=args.warmup_hours * 3600.0),
    )
    with train.Steps(show=not args.quiet) as steps:
        metrics = train.evaluate_on(model, args.dataset, config, steps=steps)
    body = {"version": model.card.version, "datasets": [str(d) for d in args.dataset], **metrics.as_dict()}
    print(json.dumps(body, indent=2))
    return 0


# -- score ----------------------------------------------------------------------------------------------


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=Path, help="score a dataset directory at --at (default: its end)")
    source.add_argument("--prometheus", metavar="URL", help="score the fleet now from Prometheus")
    parser.add_argument(
        "--models", type=Path, default=Path("models"), help="models directory (default models/)"
    )
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument("--at", help="ISO-8601 time to score a dataset at (default: its last sample)")
    parser.add_argument("--top", type=int, default=20, help="rows to show (default 20)")
    parser.add_argument("--gpus", action="store_true", help="show GPUs, not nodes")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--lookback-hours", type=float, default=168.0, help="history read (default 168)")


def run_score(args: argparse.Namespace) -> int:
    model = _load(args.models, args.version)
    if model is None:
        return 3
    lookback = args.lookback_hours * 3600.0
    if args.prometheus:
        now = datetime.now(UTC)
        settings = prometheus.ReaderSettings(
            url=args.prometheus, step_s=model.card.step_s or 300.0, lookback_s=lookback
        )
        try:
            frame = prometheus.RecentWindow(prometheus.Reader(settings)).refresh(now)
        except prometheus.PrometheusUnavailable as exc:
            print(f"sickbay score: {exc}", file=sys.stderr)
            return 4
    else:
        frame = dataset.read_timeseries(args.dataset)
        stamps = features.timestamps(frame)
        end = float(stamps.max()) if args.at is None else _parse_time(args.at)
        frame = frame.loc[(stamps > end - lookback) & (stamps <= end)]
        now = datetime.fromtimestamp(end, UTC)
    scores = score.score_frame(frame, model, now=now, explain_all=False)
    risks = scores.gpus if args.gpus else scores.nodes
    shown = risks[: args.top]
    if args.json:
        print(
            json.dumps(
                {
                    "at": now.isoformat(),
                    "model_version": scores.model_version,
                    "risks": [_risk(r) for r in shown],
                },
                indent=2,
            )
        )
        return 0
    table = Table(title=f"risk at {now:%Y-%m-%d %H:%M}Z (model {scores.model_version})")
    for column in ("node", "gpu", "score", "level", "what drove it"):
        table.add_column(column)
    for risk in shown:
        drivers = ", ".join(f"{name} {weight:+.2f}" for name, weight in risk.drivers)
        table.add_row(risk.node, str(risk.gpu), f"{risk.score:.3f}", risk.level.value, drivers)
    Console().print(table)
    return 0


def _parse_time(text: str) -> float:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _risk(risk: Any) -> dict[str, Any]:
    return {
        "node": risk.node,
        "gpu": risk.gpu,
        "score": risk.score,
        "level": risk.level.value,
        "drivers": [list(d) for d in risk.drivers],
    }


def _load(models: Path, version: str | None) -> registry.RiskModel | None:
    try:
        return registry.load(models / version) if version else registry.load_current(models)
    except registry.ModelUnavailable as exc:
        print(f"sickbay: {exc}", file=sys.stderr)
        return None


# -- backtest -------------------------------------------------------------------------------------------


def add_backtest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url", required=True, metavar="URL", help="Prometheus (or its HTTP API)")
    parser.add_argument(
        "--start", required=True, help="ISO-8601 start of the replayed range (UTC if no zone)"
    )
    parser.add_argument("--end", required=True, help="ISO-8601 end of the replayed range")
    parser.add_argument("--step", default="30m", help="scoring interval replayed (default 30m)")
    parser.add_argument("--lookback", default="7d", help="history read before --start (default 7d)")
    parser.add_argument(
        "--resolution", help="sample step read from Prometheus (default: the model card's, else 5m)"
    )
    parser.add_argument(
        "--models", type=Path, default=Path("models"), help="models directory (default models/)"
    )
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument(
        "--truth",
        type=Path,
        help="ground truth: a truth.json or a dataset directory (default: failures from the XID gauge)",
    )
    parser.add_argument(
        "--xid-catalog",
        type=Path,
        default=RULES_DIR / "xid-catalog.yaml",
        help="XID classes for failures read off the XID gauge (default rules/xid-catalog.yaml)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        default=RULES_DIR / "policy.yaml",
        help="thresholds, hysteresis and proactive budget as the service uses them (default rules/policy.yaml)",
    )
    parser.add_argument("--warn", type=float, help="warn threshold (default: the policy's, else the card's)")
    parser.add_argument("--act", type=float, help="act threshold (default: the policy's, else the card's)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write an HTML report here")
    cost = parser.add_argument_group("costs (see app/predict/costs.py)")
    defaults = costs.CostModel()
    cost.add_argument("--job-gpus", type=int, default=defaults.job_gpus, help="GPUs a failure stops (8)")
    cost.add_argument("--checkpoint-interval", default="1h", help="workload checkpoint interval (1h)")
    cost.add_argument("--detect-time", default="15m", help="time to notice a failure (15m)")
    cost.add_argument("--restart-time", default="15m", help="time to restart from a checkpoint (15m)")
    cost.add_argument("--min-lead", default="1h", help="warning needed for a planned restart (1h)")
    cost.add_argument(
        "--no-budget", action="store_true", help="act on every alarm (ignore the policy's proactive budget)"
    )
    parser.add_argument(
        "--node-batch", type=int, default=backtest.DEFAULT_NODE_BATCH, help="hosts per read (25)"
    )
    parser.add_argument("--timeout", default="60s", help="per-query timeout (60s)")
    parser.add_argument("--retries", type=int, default=3, help="retries per query (3)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


class _Usage(Exception):
    """A bad argument or an unreadable input: exit code 2."""


def _seconds(text: str, *, name: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError:
        raise _Usage(f"{name}: expected a duration like 30m, 5m, 1h or 7d, got {text!r}") from None


def _instant(text: str, *, name: str) -> float:
    try:
        return _parse_time(text)
    except ValueError:
        raise _Usage(f"{name}: expected an ISO-8601 time, got {text!r}") from None


def _truth(path: Path) -> dataset.Truth:
    try:
        if path.is_dir():
            return dataset.read_truth(path)
        return dataset.truth_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Usage(f"--truth {path}: {exc}") from None


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
    costs: costs.CostModel
    ladder: _Ladder
    truth: dataset.Truth | None
    xid_classes: dict[int, str] | None


def _inputs(args: argparse.Namespace) -> _Inputs:
    """Everything the arguments say, checked; `_Usage` (or a `ConfigError`) says what is wrong."""
    start = _instant(args.start, name="--start")
    end = _instant(args.end, name="--end")
    if end <= start:
        raise _Usage("--end must be after --start")
    ladder = _ladder(args.policy)
    cost_model = costs.CostModel(
        job_gpus=args.job_gpus,
        checkpoint_interval_h=_seconds(args.checkpoint_interval, name="--checkpoint-interval") / 3600.0,
        detect_h=_seconds(args.detect_time, name="--detect-time") / 3600.0,
        restart_h=_seconds(args.restart_time, name="--restart-time") / 3600.0,
        min_lead_h=_seconds(args.min_lead, name="--min-lead") / 3600.0,
        proactive_max_fraction=1.0 if args.no_budget else ladder.budget_fraction,
        proactive_max_nodes=None if args.no_budget else ladder.budget_nodes,
        resend_h=ladder.resend_h,
    )
    truth = _truth(args.truth) if args.truth else None
    return _Inputs(
        start=start,
        end=end,
        step_s=_seconds(args.step, name="--step"),
        lookback_s=_seconds(args.lookback, name="--lookback"),
        timeout_s=_seconds(args.timeout, name="--timeout"),
        costs=cost_model,
        ladder=ladder,
        truth=truth,
        xid_classes=None
        if truth
        else history.xid_classes(rules.load_catalog(args.xid_catalog), per_link=True),
    )


def _resolution(args: argparse.Namespace, model: registry.RiskModel, step_s: float) -> float:
    resolution = (
        _seconds(args.resolution, name="--resolution") if args.resolution else (model.card.step_s or 300.0)
    )
    if step_s <= 0 or resolution <= 0 or round(step_s) % round(resolution):
        raise _Usage(f"--step ({step_s:g}s) must be a multiple of the resolution ({resolution:g}s)")
    return resolution


def run_backtest(args: argparse.Namespace, *, client: prometheus.RangeClient | None = None) -> int:
    """Replay a Prometheus range as the scoring service would have, judge it, price it, report it."""
    try:
        inputs = _inputs(args)
    except (_Usage, ConfigError, ValueError) as exc:
        print(f"sickbay backtest: {exc}", file=sys.stderr)
        return 2
    model = _load(args.models, args.version)
    if model is None:
        return 3
    try:
        resolution = _resolution(args, model, inputs.step_s)
    except _Usage as exc:
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
        print(f"sickbay backtest: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    body = result.as_dict()
    if args.format == "json":
        print(json.dumps(body, indent=2))
    else:
        _print_backtest(body)
    return 0


def _backtest(
    args: argparse.Namespace, inputs: _Inputs, reader: prometheus.Reader, model: registry.RiskModel
) -> backtest.BacktestResult:
    ladder = inputs.ladder
    with train.Steps(show=not args.quiet) as steps:
        with steps.step("find GPU hosts"):
            hosts = backtest.find_hosts(
                reader, start=inputs.start, end=inputs.end, lookback_s=inputs.lookback_s
            )
        total = backtest.batch_count(len(hosts), args.node_batch)
        with steps.step(f"read and replay {len(hosts)} hosts", total=total) as advance:
            ranged = backtest.replay_range(
                reader,
                model,
                start=inputs.start,
                end=inputs.end,
                step_s=inputs.step_s,
                lookback_s=inputs.lookback_s,
                warn=args.warn if args.warn is not None else ladder.warn,
                act=args.act if args.act is not None else ladder.act,
                hold=ladder.hold,
                node_batch=args.node_batch,
                xid_classes=inputs.xid_classes,
                hosts=hosts,
                progress=lambda done, total: advance(),
            )
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
            },
        )
        if args.html:
            with steps.step("HTML report"):
                report.write_html(args.html, result)
    return result


def _print_backtest(body: dict[str, Any]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=180)
    summary, span, model = body["summary"], body["range"], body["model"]
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    money = body["costs"]["all_failures"]
    figures = Table(title=f"backtest {span['start']} → {span['end']}")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    rows = [
        ("model (warn / act)", f"{model['version']} ({model['warn']:.3f} / {model['act']:.3f})"),
        ("ground truth", body["ground_truth"]),
        (
            "nodes / GPUs / node-days",
            f"{body['fleet']['nodes']} / {body['fleet']['gpus']} / {summary['node_days']:.0f}",
        ),
        ("alarms (by outcome)", f"{summary['alarms']} {summary['alarms_by_outcome']}"),
        ("precision (alarms)", _fmt(summary["precision"])),
        ("recall, failures with precursors", _fmt(summary["recall_with_precursor"])),
        ("recall, all failures", _fmt(summary["recall"])),
        (
            "lead time h: median / p10 / p90",
            " / ".join(_fmt(lead[k], ".1f") for k in ("median", "p10", "p90")),
        ),
        ("false alarms per 1,000 node-days", _fmt(summary["false_alarms_per_1000_node_days"], ".2f")),
        ("trap GPUs flagged", f"{summary['traps']['flagged']} of {summary['traps']['gpus']}"),
        ("GPU-h lost: reactive → ladder", f"{money['reactive_gpu_h']:.1f} → {money['ladder_gpu_h']:.1f}"),
        (
            "saved (net of other alarms' restarts)",
            f"{_pct(money['reduction'])} ({_pct(money['net_reduction'])})",
        ),
        (
            "capacity held at act",
            f"{money['capacity_gpu_h']:.0f} GPU-h ({_pct(money['capacity_fraction'])}); "
            f"peak {money['peak_nodes_held']} of {money['max_nodes_at_act']} nodes; "
            f"holds delayed {money['holds_delayed']}, refused {money['holds_refused']}",
        ),
    ]
    for name, value in rows:
        figures.add_row(name, value)
    console.print(figures)
    alarms = Table(title="when each GPU would have been flagged (act)")
    for column in (
        "node",
        "gpu",
        "first flag",
        "last flag",
        "peak",
        "outcome",
        "acted",
        "trap",
        "lead h",
        "drivers",
    ):
        alarms.add_column(column)
    for a in body["alarms"]:
        drivers = ", ".join(f"{name} {weight:+.2f}" for name, weight in a["drivers"][:2])
        alarms.add_row(
            a["node"],
            str(a["gpu"]),
            a["first_flag"],
            a["last_flag"],
            _fmt(a["peak"]),
            a["outcome"],
            "yes" if a["acted"] else "no",
            a["trap"] or "",
            _fmt(a["lead_h"], ".1f"),
            drivers,
        )
    console.print(alarms)
    missed = [f for f in body["failures"] if not f["caught"]]
    if missed:
        table = Table(title="hardware failures not caught")
        for column in ("id", "node", "gpu", "mode", "class", "failure", "precursor from"):
            table.add_column(column)
        for f in missed:
            table.add_row(
                f["id"],
                f["node"],
                str(f["gpu"]),
                f["mode"] or "",
                f["fault_class"],
                f["failure_time"],
                f["precursor_start"] or "—",
            )
        console.print(table)


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None else f"{value:{spec}}"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


# -- models ---------------------------------------------------------------------------------------------


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models", type=Path, default=Path("models"), help="models directory (default models/)"
    )
    parser.add_argument(
        "--rollback", action="store_true", help="make the previous model current again (atomic)"
    )


def run_models(args: argparse.Namespace) -> int:
    """The versions in a models directory (current and previous marked), or a rollback."""
    try:
        if args.rollback:
            version = registry.rollback(args.models)
            print(f"sickbay models: {version} is current again (restart or wait for the next reload)")
            return 0
        pointer = registry.read_pointer(args.models)
    except registry.ModelUnavailable as exc:
        print(f"sickbay models: {exc}", file=sys.stderr)
        return 3
    table = Table(title=f"models in {args.models}")
    for column in ("version", "role", "created", "act", "holdout precision", "recall", "PR-AUC"):
        table.add_column(column)
    for directory in sorted(p for p in args.models.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            card = registry.read_card(directory)
        except registry.ModelUnavailable:
            continue
        role = "current" if card.version == pointer["current"] else ""
        role = role or ("previous" if card.version == pointer["previous"] else "")
        holdout = card.metrics.get("holdout", {})
        table.add_row(
            card.version,
            role,
            card.created_at,
            f"{card.act:.3f}",
            _figure(holdout.get("precision")),
            _figure(holdout.get("recall")),
            _figure(holdout.get("pr_auc")),
        )
    Console().print(table)
    return 0


def _figure(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


# -- python -m app.predict ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.predict", description="GPU failure prediction")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    for name, add, run, help_ in (
        ("train", add_train_arguments, run_train, "train a model on datasets and install it"),
        ("evaluate", add_evaluate_arguments, run_evaluate, "measure a model on datasets"),
        ("score", add_score_arguments, run_score, "score a fleet (dataset or Prometheus)"),
        ("backtest", add_backtest_arguments, run_backtest, "replay a Prometheus range and judge the alarms"),
        ("models", add_models_arguments, run_models, "list the installed models, or roll back"),
    ):
        command = sub.add_parser(name, help=help_)
        add(command)
        command.set_defaults(run=run)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    code: int = args.run(args)
    return code
