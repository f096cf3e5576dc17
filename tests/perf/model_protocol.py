"""The evaluation protocol, and the recipe of the shipped default model (issue 12 part 3).

`python -m tests.perf.model_protocol [--nodes 40] [--days 14] [--install models/]`:

1. simulate the fleets (cached in `--cache`): the training set is some personalities x seeds, the held-out
   set other seeds, with personalities never used in training among them — including `stress-10x`, ten
   times the background noise;
2. train on the training fleets only (`train.prepare_sources`, exporter field groups dropped per node at
   random so the model copes with fleets that lack them); calibrate and choose thresholds on separate
   validation fleets (`split.by_fleet`), whose other nodes are the card's holdout;
3. judge on every held-out fleet as a whole, and print one row per fleet: precision, recall on failures
   with precursors, median lead, false alarms per 1,000 node-days, trap GPUs flagged; per failure mode
   and trap kind in the JSON;
4. with `--install DIR`: save the model with a card that records what it was trained and judged on and
   the held-out figures (`training.protocol`, `metrics["held_out:<personality>:s<seed>"]`).

Personalities are the simulator's (`app.sim.fleet.personality`): `random` ones are drawn from broad priors
by their seed, the named ones each change one thing against `classic`. Nothing is timed except what the
card records (training seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from app.predict import dataset, evaluate, features, registry, split, train
from app.sim.fleet import personality
from tests.perf import backtest_acceptance

Fleet = tuple[str, int]  # (personality, seed)

# Training: the classic simulator, drawn personalities and the loud end of the link noise. Held out: seeds
# never trained on, and personalities never trained on (an exporter with the default field list, hot
# racks, weak and recovered precursors, ten times the background noise).
TRAIN: tuple[Fleet, ...] = (
    ("classic", 61),
    ("random", 62),
    ("random", 63),
    ("random", 64),
    ("noisy-links", 65),
    ("loud-3x", 68),
)
HELD_OUT: tuple[Fleet, ...] = (
    ("default-counters", 71),
    ("hot-racks", 72),
    ("weak-precursors", 73),
    ("random", 74),
    ("stress-10x", 75),
)
# Whole fleets for calibration and thresholds (most nodes) and the card's holdout (the others).
# Five fleets (~1,500 node-days at 40 nodes x 14 days): the act threshold's false-alarm allowance is a count
# over these node-days (`thresholds.allowed_false_alarms`), and three fleets made it hinge on one GPU.
VALIDATE: tuple[Fleet, ...] = (
    ("random", 66),
    ("random", 67),
    ("random", 76),
    ("loud-3x", 69),
    ("loud-3x", 77),
)
# A drawn personality with three times its background noise: the noise level itself is randomised in
# training, so ten times (`stress-10x`, held out) is an extrapolation of a direction the model has seen.
LOUD_NOISE = 3.0
STEP_S = 300.0
RATE_MULTIPLIER = 30.0
# The card's created_at: fixed, so the recipe is reproducible; it names the version, so a re-ship moves it.
NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)

# One OpenMP thread: on a shared 2-core machine busy-waiting threads make fitting many times slower.
# Small leaves: a failure mode brings a few hundred positive rows, and a leaf needs room for them.
RECIPE = train.TrainConfig(
    field_dropout=0.25,
    max_iter=200,
    min_samples_leaf=20,
    threads=1,
    split=split.SplitSpec(holdout_node_fraction=0.4),
)


def fleet_name(fleet: Fleet) -> str:
    return f"{fleet[0]}:s{fleet[1]}"


def simulated(cache: Path, fleet: Fleet, *, nodes: int, days: float) -> Path:
    """The fleet's dataset directory, simulated on first use."""
    name, seed = fleet
    directory = cache / f"{name}-n{nodes}-d{days:g}-s{seed}"
    if not (directory / "done").exists():
        fleet_personality = (
            dataclasses.replace(personality.draw(seed), name=name, noise=LOUD_NOISE)
            if name == "loud-3x"
            else personality.named(name, seed=seed)
        )
        personality.simulate(
            fleet_personality,
            directory,
            nodes=nodes,
            days=days,
            seed=seed,
            step_s=STEP_S,
            rate_multiplier=RATE_MULTIPLIER,
        )
        (directory / "done").touch()
    return directory


def sources(
    fleets: Sequence[Fleet], cache: Path, *, nodes: int, days: float, without: str | None = None
) -> Iterator[train.Source]:
    for fleet in fleets:
        directory = simulated(cache, fleet, nodes=nodes, days=days)
        frame = dataset.read_timeseries(directory)
        if without is not None:
            frame = blank(frame, without)
        yield train.Source(fleet_name(fleet), frame, dataset.read_truth(directory))


def blank(frame: pd.DataFrame, group: str) -> pd.DataFrame:
    """The frame as an exporter without this field group (`features.FIELD_GROUPS`) would show it."""
    fields = features.FIELD_GROUPS[group]
    columns = [c for c in frame.columns if features.ALIASES.get(c, c) in fields]
    return frame.drop(columns=columns)


def judge(
    model: registry.RiskModel,
    fleet: Fleet,
    cache: Path,
    *,
    nodes: int,
    days: float,
    without: str | None = None,
) -> evaluate.Metrics:
    config = train.TrainConfig(horizon_s=model.card.horizon_s, every_s=model.card.every_s)
    with train.Steps(show=False) as steps:
        prepared = train.prepare_sources(
            sources([fleet], cache, nodes=nodes, days=days, without=without),
            config,
            steps=steps,
            data_hash=lambda: "",
            names=(fleet_name(fleet),),
            whole=True,
        )
    data = prepared.part_of(split.Part.HOLDOUT)
    return evaluate.evaluate(model.decision_scores(data), data, threshold=model.card.act)


def row(name: str, m: dict[str, Any]) -> str:
    lead = m["lead_time_h"].get("median")
    return (
        f"{name:<24} {m['precision'] if m['precision'] is not None else float('nan'):>9.3f} "
        f"{m['event_recall_with_precursor'] or 0:>8.3f} {lead if lead is not None else float('nan'):>7.1f} "
        f"{m['false_alarms_per_1000_node_days'] or 0:>8.2f} {m['trap_gpus_flagged']:>4}/{m['trap_gpus']:<4} "
        + backtest_acceptance.by_trap(m)
    )


HEADER = f"{'fleet':<24} {'precision':>9} {'recall':>8} {'lead h':>7} {'FA/1kND':>8} {'traps':>9} false alarms by trap"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.model_protocol")
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--cache", type=Path, default=Path("out/protocol"))
    parser.add_argument("--install", type=Path, help="save the model here and make it current")
    parser.add_argument("--json", type=Path, help="write every held-out figure here")
    parser.add_argument(
        "--without",
        choices=sorted(features.FIELD_GROUPS),
        action="append",
        default=[],
        help="also judge every held-out fleet with this exporter field group removed (repeatable)",
    )
    parser.add_argument("--model", type=Path, help="judge this saved model instead of training one")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.model is not None:
        model = registry.load(args.model)
    else:
        with train.Steps(show=False) as steps, threadpool_limits(limits=RECIPE.threads):
            prepared = train.prepare_sources(
                sources((*TRAIN, *VALIDATE), args.cache, nodes=args.nodes, days=args.days),
                RECIPE,
                steps=steps,
                data_hash=lambda: "protocol-" + "-".join(fleet_name(f) for f in (*TRAIN, *VALIDATE)),
                names=tuple(fleet_name(f) for f in (*TRAIN, *VALIDATE)),
                tag_nodes=True,
                validation_sources=frozenset(fleet_name(f) for f in VALIDATE),
                # Sized up front, so the fleets stream one at a time whatever the down-sampling.
                scans=[
                    dataset.scan(simulated(args.cache, f, nodes=args.nodes, days=args.days))
                    for f in (*TRAIN, *VALIDATE)
                ],
            )
            model = train.fit(prepared, RECIPE, now=NOW, steps=steps, provenance=_provenance(args)).model
    trained_s = time.perf_counter() - started
    held: dict[str, dict[str, Any]] = {}
    extra: dict[str, dict[str, Any]] = {}
    with threadpool_limits(limits=RECIPE.threads):
        for fleet in HELD_OUT:
            held[f"held_out:{fleet_name(fleet)}"] = judge(
                model, fleet, args.cache, nodes=args.nodes, days=args.days
            ).as_dict()
            for group in args.without:
                extra[f"{fleet_name(fleet)} -{group}"] = judge(
                    model, fleet, args.cache, nodes=args.nodes, days=args.days, without=group
                ).as_dict()
    print(
        f"trained in {trained_s:.0f} s on {', '.join(fleet_name(f) for f in TRAIN)}; act={model.card.act:.3f}"
    )
    print(HEADER)
    print(row("validation", model.card.metrics["validation"]))
    print(row("holdout (train fleets)", model.card.metrics["holdout"]))
    for name, m in held.items():
        print(row(name.removeprefix("held_out:"), m))
    for name, m in extra.items():
        print(row(name, m))
    if args.json is not None:
        args.json.write_text(json.dumps({**held, **extra}, indent=2))
    if args.install is not None:
        card = model.card
        protocol = {
            "trained_on": [fleet_name(f) for f in TRAIN],
            "validated_on": [fleet_name(f) for f in VALIDATE],
            "judged_on": [fleet_name(f) for f in HELD_OUT],
            "fleet_size": {"nodes": args.nodes, "gpus_per_node": 8, "days": args.days},
            "personalities": "app.sim.fleet.personality (random: drawn from the priors by seed)",
            "train_seconds": round(trained_s, 1),
        }
        card = dataclasses.replace(
            card,
            training={**card.training, "protocol": protocol},
            metrics={**card.metrics, **held},
        )
        saved = registry.save(args.install, registry.RiskModel(card=card, estimator=model.estimator))
        registry.activate(args.install, saved.card.version)
        print(f"installed {saved.card.version} in {args.install}")
    return 0


def _provenance(args: argparse.Namespace) -> list[str]:
    return [
        f"python -m tests.perf.model_protocol --nodes {args.nodes} --days {args.days:g} (fleets simulated with "
        f"app.sim.fleet.personality.simulate, step {STEP_S:g} s, failures at {RATE_MULTIPLIER:g}x the "
        "published rate)",
        f"recipe: {json.dumps(dataclasses.asdict(RECIPE), default=str)}",
    ]


if __name__ == "__main__":
    sys.exit(main())
