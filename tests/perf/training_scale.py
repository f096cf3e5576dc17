"""Training at fleet scale (issue 15): a synthetic fleet of N feature rows, trained down-sampled, chunk by chunk.

The fleet: GPUs (8 per node) x 28 days on the 30-minute training grid, so N rows are N / 1344 GPUs. The
split is the real one (`split.assign` with the default `SplitSpec` over the fleet's span): about 35% of
rows train, 11% validate, 7% are the holdout (future of unseen nodes), the rest are unused (warm-up,
embargoes, holdout nodes' past). Labels: positive with probability `BASE_RATE` (1e-3, the order of a real
fleet's hardware-failure rows within 24 h). Feature rows: drawn from the benchmark's simulated pool (the
pool's training-node rows for training and validation, its holdout-node rows for the holdout, so the
holdout's GPUs are unseen here too) with 2% jitter — they stand in for `features.compute_features`.

Each size runs in its own process (its own peak RSS), in two streaming passes over chunks of whole nodes
(about a million rows each), so no matrix but the kept training rows is ever held:

1. training rows: every positive, and in `sampling.region` the share `rate` of negatives that
   `sampling.keep` picks (per GPU, evenly in time), weighted 1 / rate, into one `matrix.RowBuffer`;
   then `train.fit_estimator` (the shipped config) on them;
2. validation and holdout rows, regenerated from the same seeds, never down-sampled: the base model's
   scores only (`calibration.scores`); then `calibration.calibrate_scores` on every validation row,
   and the holdout's calibrated probabilities (`calibration.probabilities_from_scores`). The holdout is
   also scored with features drawn from the pool's training-node side ("same side"): the unseen pool
   nodes differ from the seen ones (a shift both models share), which moves the holdout's mean
   probability; on the same side, calibration itself shows.

The full-data model is the same run at rate 1, where it fits (default up to 4M rows): the claim is that the
down-sampled model's holdout PR-AUC and calibration (mean predicted vs observed rate) match it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text
from sklearn.metrics import average_precision_score  # type: ignore[import-untyped]
from threadpoolctl import threadpool_info, threadpool_limits  # type: ignore[import-untyped]

from app.predict import calibration, features, matrix, sampling, split, train

REPO = Path(__file__).resolve().parents[2]
DAYS = 28
GRID_S = 1800.0
INSTANTS = round(DAYS * 86400 / GRID_S)
GPUS_PER_NODE = 8
CHUNK_NODES = 96  # 768 GPUs x 1344 instants: about a million rows a chunk
BASE_RATE = 1e-3
JITTER = 0.02
SIZES = (1_000_000, 4_000_000, 20_000_000, 80_000_000)
QUICK_SIZES = (200_000,)
FULL_UP_TO = 4_000_000
COMPARE_RATE = 0.1
SAME_SIDE_CHUNKS = 8  # the same-side check scores the holdout of the first chunks only (~0.6M rows)
TARGET_80M_S, TARGET_80M_MIB = 600.0, 4096.0


@dataclass(frozen=True, slots=True)
class Pool:
    """Feature rows to draw from, by side (training nodes, holdout nodes) and class."""

    x: npt.NDArray[np.float32]
    index: dict[tuple[bool, int], npt.NDArray[np.int64]]

    separate: (
        bool  # whether the holdout draws from the pool's holdout nodes only (a small pool may lack them)
    )

    @classmethod
    def load(cls, path: Path) -> Pool:
        data = np.load(path)
        x, y, held = data["x"], data["y"], data["held"]
        index = {
            (side, label): np.flatnonzero((held == side) & (y == label))
            for side in (False, True)
            for label in (0, 1)
        }
        if not all(len(rows) for rows in index.values()):
            # Too small a pool to keep sides (a quick run's): every part draws from all of it.
            index = {(side, label): np.flatnonzero(y == label) for side in (False, True) for label in (0, 1)}
            return cls(x=x, index=index, separate=False)
        return cls(x=x, index=index, separate=True)

    def draw(self, y: npt.NDArray[np.int8], held: bool, rng: np.random.Generator) -> npt.NDArray[np.float32]:
        out = np.empty((len(y), self.x.shape[1]), dtype=np.float32)
        for label in (0, 1):
            rows = np.flatnonzero(y == label)
            source = self.index[(held, label)]
            out[rows] = self.x[source[rng.integers(0, len(source), len(rows))]]
        out *= 1.0 + JITTER * rng.standard_normal(out.shape, dtype=np.float32)
        return out


@dataclass(frozen=True, slots=True)
class Chunk:
    keys: pd.DataFrame
    part: npt.NDArray[np.int8]
    y: npt.NDArray[np.int8]
    rng: np.random.Generator


def fleet_gpus(rows: int) -> int:
    return max(GPUS_PER_NODE, round(rows / INSTANTS / GPUS_PER_NODE) * GPUS_PER_NODE)


def chunks(rows: int, spec: split.SplitSpec, *, seed: int) -> Iterator[Chunk]:
    """The fleet's rows, chunk of whole nodes by chunk, with their part and label (the same every pass)."""
    gpus = fleet_gpus(rows)
    edges = split.boundaries(np.array([0.0, (INSTANTS - 1) * GRID_S]), spec)
    t = np.arange(INSTANTS, dtype=np.float64) * GRID_S
    for first in range(0, gpus, CHUNK_NODES * GPUS_PER_NODE):
        ids = np.arange(first, min(gpus, first + CHUNK_NODES * GPUS_PER_NODE))
        names = np.array([f"node-{i // GPUS_PER_NODE:05d}" for i in ids], dtype=object)
        keys = pd.DataFrame(
            {
                "node": np.repeat(names, INSTANTS),
                "gpu": np.repeat(ids % GPUS_PER_NODE, INSTANTS),
                "uuid": np.repeat(np.array([f"GPU-{i:06d}" for i in ids], dtype=object), INSTANTS),
                "timestamp": np.tile(t, len(ids)),
            }
        )
        part, _ = split.assign(
            keys["node"].to_numpy(dtype=object), keys["timestamp"].to_numpy(), spec, edges=edges
        )
        rng = np.random.default_rng([seed, first])
        y = (rng.random(len(keys)) < BASE_RATE).astype(np.int8)
        yield Chunk(keys=keys, part=part, y=y, rng=rng)


def run(
    rows: int, rate: float, *, pool: Pool, max_iter: int, threads: int | None, seed: int
) -> dict[str, Any]:
    """One size at one rate, both passes; the figures as a dict."""
    spec = split.SplitSpec()
    span = (0.0, (INSTANTS - 1) * GRID_S)
    bounds = sampling.lower_bounds(*span, spec, every_s=None)
    config = replace(train.TrainConfig(), max_iter=max_iter, threads=threads)
    width = len(features.FEATURES)
    started = time.perf_counter()
    expected = round(rows * 0.36 * min(1.0, rate + BASE_RATE) * 1.1) + 1
    buffer, labels, weights = matrix.RowBuffer(width, capacity=expected), [], []
    fleet = train_rows = 0
    for chunk in chunks(rows, spec, seed=seed):
        fleet += len(chunk.y)
        is_train = chunk.part == split.Part.TRAIN
        train_rows += int(is_train.sum())
        x = pool.draw(chunk.y[is_train], False, chunk.rng)  # every training row's features, as computed
        keys, y = chunk.keys.loc[is_train], chunk.y[is_train]
        region = sampling.region(keys["node"], keys["timestamp"].to_numpy(), spec, bounds)
        candidate = region & (y != 1)
        kept = sampling.keep(keys, candidate, rate, seed=seed, salt="bench")
        buffer.append(x[kept])
        labels.append(y[kept])
        weights.append(np.where(candidate, 1.0 / rate, 1.0).astype(np.float32)[kept])
    x_train, y_train, w_train = buffer.finish(), np.concatenate(labels), np.concatenate(weights)
    generate_s = time.perf_counter() - started
    with threadpool_limits(limits=threads):
        used = max((info.get("num_threads", 1) for info in threadpool_info()), default=1)
        started = time.perf_counter()
        base = train.fit_estimator(x_train, y_train, config, sample_weight=w_train)
        fit_s = time.perf_counter() - started
        del x_train
        started = time.perf_counter()
        scored = score_pass(rows, base, pool=pool, spec=spec, seed=seed)
        score_s = time.perf_counter() - started
        started = time.perf_counter()
        model = calibration.calibrate_scores(
            base, scored["val_s"], scored["val_y"], config.calibration, example=scored["example"]
        )
        p = calibration.probabilities_from_scores(model, scored["hold_s"])
        p_same = calibration.probabilities_from_scores(model, scored["same_s"])
        calibrate_s = time.perf_counter() - started
    hold_y = scored["hold_y"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "rows": fleet,
        "rate": rate,
        "holdout_from_unseen_pool_nodes": pool.separate,
        "train_rows": train_rows,
        "kept_rows": len(y_train),
        "train_positives": int(y_train.sum()),
        "validation_rows": len(scored["val_y"]),
        "holdout_rows": len(hold_y),
        "holdout_positives": int(hold_y.sum()),
        "generate_s": generate_s,
        "fit_s": fit_s,
        "score_s": score_s,
        "calibrate_s": calibrate_s,
        "total_s": generate_s + fit_s + score_s + calibrate_s,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "threads": used,
        "peak_mib": usage.ru_maxrss / 1024,
        "pr_auc": float(average_precision_score(hold_y, p)),
        "mean_p": float(p.mean()),
        "mean_p_same_nodes": float(p_same.mean()),
        "observed_same_nodes": float(hold_y[: len(p_same)].mean()),
        "pr_auc_same_nodes": float(average_precision_score(hold_y[: len(p_same)], p_same)),
        "same_nodes_rows": len(p_same),
        "observed": float(hold_y.mean()),
    }


def score_pass(rows: int, base: Any, *, pool: Pool, spec: split.SplitSpec, seed: int) -> dict[str, Any]:
    """Pass 2: validation and holdout rows regenerated chunk by chunk; only their scores are kept."""
    val_s: list[npt.NDArray[np.float64]] = []
    hold_s: list[npt.NDArray[np.float64]] = []
    same_s: list[npt.NDArray[np.float64]] = []
    val_y: list[npt.NDArray[np.int8]] = []
    hold_y: list[npt.NDArray[np.int8]] = []
    example_x: list[npt.NDArray[np.float32]] = []
    example_y: list[npt.NDArray[np.int8]] = []
    for index, chunk in enumerate(chunks(rows, spec, seed=seed)):
        # The features are drawn afresh (same seeds whatever the rate: the full-data model is judged on the
        # very same rows); the parts and labels are pass 1's.
        for which, held, scores, ys in (
            (split.Part.VALIDATION, False, val_s, val_y),
            (split.Part.HOLDOUT, True, hold_s, hold_y),
        ):
            mine = chunk.part == which
            x = pool.draw(chunk.y[mine], held, chunk.rng)
            scores.append(calibration.scores(base, x))
            ys.append(chunk.y[mine])
            if which == split.Part.HOLDOUT and index < SAME_SIDE_CHUNKS:
                # The same rows drawn as training nodes' rows: calibration where nothing shifts.
                same_s.append(calibration.scores(base, pool.draw(chunk.y[mine], False, chunk.rng)))
            if which == split.Part.VALIDATION and sum(int((e == 1).sum()) for e in example_y) < 5:
                example_x.append(x)
                example_y.append(chunk.y[mine])
    ex_x, ex_y = np.concatenate(example_x), np.concatenate(example_y)
    return {
        "val_s": np.concatenate(val_s),
        "val_y": np.concatenate(val_y),
        "hold_s": np.concatenate(hold_s),
        "hold_y": np.concatenate(hold_y),
        "same_s": np.concatenate(same_s),
        "example": calibration.example_rows(ex_x, ex_y),
    }


def rate_for(rows: int, compare_rate: float) -> tuple[float, bool]:
    """The auto rate for a fleet of `rows` feature rows, or `compare_rate` where auto keeps everything
    (then forced, so the comparison with the full-data model means something)."""
    auto = sampling.auto_rate(rows)
    return (auto, False) if auto < 1.0 else (compare_rate, True)


def run_child(module: str, options: Sequence[str], *, args: argparse.Namespace, what: str) -> dict[str, Any]:
    """One training size in a process of its own (so its peak RSS is its own), with the run's
    `--max-iter` and `--threads`; returns the JSON line the child prints last."""
    command = [sys.executable, "-m", module, *options, "--max-iter", str(args.max_iter)]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training {what} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(rows: int, rate: float, *, pool: Path, args: argparse.Namespace) -> dict[str, Any]:
    options = ["--pool", str(pool), "--rows", str(rows), "--rate", str(rate)]
    result = run_child(
        "tests.perf.training_scale", options, args=args, what=f"{rows:,} rows at rate {rate:g}"
    )
    print(
        f"  fleet {rows:,} rows, rate {rate:g}: {result['total_s']:.1f}s, peak {result['peak_mib']:.0f} MiB, "
        f"holdout PR-AUC {result['pr_auc']:.3f}",
        file=sys.stderr,
    )
    return result


def measure_all(*, pool: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each fleet size down-sampled (auto rate, or `--compare-rate` where auto keeps all), and at full data
    where the size is at most `--full-up-to`."""
    out = []
    for rows in args.scale_rows:
        rate, forced = rate_for(rows, args.compare_rate)
        sampled = measure(rows, rate, pool=pool, args=args)
        full = measure(rows, 1.0, pool=pool, args=args) if rows <= args.full_up_to else None
        out.append({"rows": rows, "forced": forced, "sampled": sampled, "full": full})
    return out


def describe(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "days": DAYS,
        "grid_s": GRID_S,
        "gpus_per_node": GPUS_PER_NODE,
        "base_rate": BASE_RATE,
        "jitter": JITTER,
        "auto_keep_rows": sampling.AUTO_KEEP_ROWS,
        "compare_rate": args.compare_rate,
        "full_up_to": args.full_up_to,
        "target_80m": {"seconds": TARGET_80M_S, "mib": TARGET_80M_MIB},
    }


def render(results: list[dict[str, Any]], *, args: argparse.Namespace) -> Group:
    table = Table(title=f"Training at fleet scale: streamed, down-sampled, {args.max_iter} iterations")
    for column in (
        "fleet rows",
        "model",
        "rate",
        "train rows kept",
        "positives",
        "val / holdout rows",
        "fit s",
        "total s",
        "peak MiB",
        "holdout PR-AUC",
        "mean p / observed",
        "same-side PR-AUC",
        "same-side mean p / obs.",
    ):
        table.add_column(column, justify="right")
    for result in results:
        for label, r in (("down-sampled", result["sampled"]), ("full data", result["full"])):
            if r is None:
                continue
            rate = f"{r['rate']:.3g}" + (" (set)" if label == "down-sampled" and result["forced"] else "")
            table.add_row(
                f"{r['rows']:,}",
                label,
                "1" if label == "full data" else rate,
                f"{r['kept_rows']:,} of {r['train_rows']:,}",
                f"{r['train_positives']:,}",
                f"{r['validation_rows']:,} / {r['holdout_rows']:,}",
                f"{r['fit_s']:.1f}",
                f"{r['total_s']:.1f}",
                f"{r['peak_mib']:.0f}",
                f"{r['pr_auc']:.3f}",
                f"{r['mean_p'] / r['observed']:.2f}" if r["observed"] else "-",
                f"{r['pr_auc_same_nodes']:.3f}",
                f"{r['mean_p_same_nodes'] / r['observed_same_nodes']:.2f}"
                if r["observed_same_nodes"]
                else "-",
            )
    lines = [
        Text(
            f"{DAYS} days on the {GRID_S / 60:g}-min grid, {GPUS_PER_NODE} GPUs a node, base rate {BASE_RATE:g}, "
            "the default split; rows drawn from the pool with "
            f"{JITTER:.0%} jitter (holdout rows from its holdout nodes). Auto rate = min(1, "
            f"{sampling.AUTO_KEEP_ROWS:,} / rows); '(set)': --compare-rate, where auto keeps every row. "
            "Total s = generate + fit + score validation and holdout + calibrate. Same-side: the holdout's rows "
            f"(of the first {SAME_SIDE_CHUNKS} chunks) and labels with features drawn from the pool's training nodes, as the validation part's are "
            "(no shift between calibration and test: calibration at the true base rate shows as a ratio near 1)."
        )
    ]
    biggest = max(results, key=lambda result: result["rows"])["sampled"]
    if biggest["rows"] >= 80_000_000 * 0.99:
        ok = biggest["total_s"] < TARGET_80M_S and biggest["peak_mib"] < TARGET_80M_MIB
        verdict = "[green]met[/]" if ok else "[red]missed[/]"
        lines.append(
            Text.from_markup(
                f"{biggest['rows']:,} rows: [bold]{biggest['total_s']:.0f}s, {biggest['peak_mib']:.0f} MiB[/] on "
                f"{biggest['threads']} thread(s) (target < {TARGET_80M_S:.0f}s and {TARGET_80M_MIB:.0f} MiB: {verdict})"
            )
        )
    return Group(table, *lines)


def child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="training_scale")
    parser.add_argument("--pool", type=Path, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    result = run(
        args.rows,
        args.rate,
        pool=Pool.load(args.pool),
        max_iter=args.max_iter,
        threads=args.threads,
        seed=args.seed,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    child(sys.argv[1:])
