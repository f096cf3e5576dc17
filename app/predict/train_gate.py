"""`sickbay train` with the promotion gate: a new model becomes current only if it beats the rules baseline.

`train_cli.run` does the training (`commands` declares the arguments, `--baseline` and `--force` among
them); this wraps it:

- `--dataset`: the model is trained and saved, then scored with the baseline
  (`rules/prediction-baseline.yaml`, `--baseline`) on the same holdout rows (`promotion.against_baseline`,
  the gate retraining uses too). It is made current only if it passes; otherwise it stays saved, NOT
  current, and the command says why with both figures and exits 6. `--force` (an operator's call)
  activates it anyway; `--no-activate` skips the gate (nothing is promoted).
- `--from-prometheus`: the service's retraining run once (`retrain.retrain`), gate included; `--force`
  promotes the challenger even when it loses. `--out` defaults to the installed models directory.

The holdout is prepared a second time for the gate (the same seed and split as training): the price of
leaving the training module alone.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from app.config.errors import ConfigError
from app.predict import baseline, commands, evaluate, promotion, registry, split, train, train_cli

REFUSED = 6  # exit code: trained and saved, but the gate kept it from becoming current


def run(args: argparse.Namespace, *, now: datetime | None = None) -> int:
    try:
        rules_baseline = baseline.load(args.baseline or baseline.DEFAULT_FILE)
    except ConfigError as exc:
        print(f"sickbay train: {exc}", file=sys.stderr)
        return 2
    if args.from_prometheus:
        return train_cli.run_from_prometheus(
            args,
            now=now,
            rules_baseline=rules_baseline,
            force=args.force,
            models_dir=commands.installed_models_dir(),
        )
    if args.out is None or args.no_activate or args.force:
        return train_cli.run(args, now=now)
    before = _versions(args.out)
    code = train_cli.run(argparse.Namespace(**{**vars(args), "no_activate": True}), now=now)
    if code != 0:
        return code
    added = sorted(_versions(args.out) - before)
    if len(added) != 1:
        print(f"sickbay train: cannot tell which version was saved in {args.out}", file=sys.stderr)
        return 2
    model = registry.load(args.out / added[0])
    config = train_cli.config_from(args)
    with train.Steps(show=not args.quiet) as steps:
        holdout = train.prepare(args.dataset, config, steps=steps).part_of(split.Part.HOLDOUT)
    gate = gate_model(model, holdout, rules_baseline)
    print(f"sickbay train: {model.card.version} {gate.reason}", file=sys.stderr)
    if not gate.passed:
        print(
            f"sickbay train: {model.card.version} is saved in {args.out} but NOT current "
            "(--force to make it current anyway)",
            file=sys.stderr,
        )
        return REFUSED
    registry.activate(args.out, model.card.version)
    return 0


def gate_model(
    model: registry.RiskModel, holdout: evaluate.EvalSet, rules_baseline: baseline.Baseline
) -> promotion.Gate:
    """The gate for one model on its holdout (`promotion.against_baseline` at the model's act)."""
    metrics = evaluate.evaluate(model.decision_scores(holdout), holdout, threshold=model.card.act)
    return promotion.against_baseline(metrics, holdout, rules_baseline, feature_names=model.card.features)


def _versions(models_dir: Path) -> set[str]:
    if not models_dir.is_dir():
        return set()
    return {p.name for p in models_dir.iterdir() if p.is_dir() and (p / registry.CARD_FILE).is_file()}
