"""Fixtures for the predictor's tests: small simulated datasets and tiny synthetic models.

Datasets come from the fleet simulator (tests may import it; `app.predict` may not) and are made once
per test run, shared by the pytest-xdist workers (each worker is a session of its own, so a plain session
fixture would simulate the same seed once per worker). Failure rates are multiplied far above the
published rate so a few node-days hold enough failures to train and score on.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import CalibratedClassifierCV  # type: ignore[import-untyped]
from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]
from sklearn.frozen import FrozenEstimator  # type: ignore[import-untyped]
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from app.predict import evaluate, features, labels, registry
from app.sim.fleet import datasets
from app.sim.fleet.params import FailureRates, SimConfig

REPO = Path(__file__).resolve().parents[2]
SHIPPED_MODELS = REPO / "models"
DAY = 86400.0


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> Iterator[None]:
    """One OpenMP thread: busy-waiting threads on a shared, loaded CI machine are many times slower."""
    with threadpool_limits(limits=1):
        yield


def simulate(directory: Path, *, nodes: int, days: float, seed: int, rate_multiplier: float) -> Path:
    config = SimConfig(rates=FailureRates(rate_multiplier=rate_multiplier))
    datasets.write_dataset(
        directory,
        nodes=nodes,
        duration_s=days * DAY,
        step_s=300.0,
        seed=seed,
        config=config,
        formats=("parquet",),
    )
    return directory


def shared_dataset(
    factory: pytest.TempPathFactory, name: str, *, nodes: int, days: float, seed: int, rate_multiplier: float
) -> Path:
    """The dataset `name`, simulated by the first worker that needs it and read by the others.

    The workers of one xdist run share `PYTEST_XDIST_TESTRUNUID` and the parent of their base temp
    directories; an exclusive lock makes the others wait for the first one's dataset rather than redo it.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    root = factory.getbasetemp().parent / f"datasets-{run}" if run else factory.getbasetemp() / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    directory = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / "done").exists():
            simulate(directory, nodes=nodes, days=days, seed=seed, rate_multiplier=rate_multiplier)
            (directory / "done").touch()
    return directory


@pytest.fixture(scope="session")
def train_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 nodes x 6 days, seed 7, failures at 150x the published rate."""
    return shared_dataset(tmp_path_factory, "train-s7", nodes=16, days=6, seed=7, rate_multiplier=150)


@pytest.fixture(scope="session")
def heldout_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seed the shipped model never saw: 60 nodes x 6 days, failures at 40x (and traps as usual)."""
    return shared_dataset(tmp_path_factory, "heldout-s101", nodes=60, days=6, seed=101, rate_multiplier=40)


ModelFactory = Callable[..., registry.RiskModel]


def synthetic_xy(n: int, *, seed: int, signal: float) -> tuple[np.ndarray, np.ndarray]:
    """Features where the first column drives the label by `signal` (0: pure noise)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(features.FEATURES))).astype(np.float32)
    logit = signal * x[:, 0] - 3.0 + rng.normal(scale=0.5, size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    return x, y


@pytest.fixture
def make_model() -> ModelFactory:
    """A small calibrated model on synthetic data, with a card that passes every check once saved."""

    def make(
        *, version: str = "v1", signal: float = 3.0, seed: int = 0, act: float = 0.5
    ) -> registry.RiskModel:
        x, y = synthetic_xy(4000, seed=seed, signal=signal)
        base = HistGradientBoostingClassifier(max_iter=15, random_state=seed).fit(x[:3000], y[:3000])
        model = CalibratedClassifierCV(FrozenEstimator(base), method="isotonic").fit(x[3000:], y[3000:])
        card = registry.ModelCard(
            version=version,
            created_at=datetime(2025, 3, 3, tzinfo=UTC).isoformat(),
            features=features.FEATURES,
            thresholds={"warn": act / 2, "act": act},
            horizon_s=DAY,
            data_hash="synthetic",
            feature_medians={name: 0.0 for name in features.FEATURES},
            sustain_s=0.0,
        )
        return registry.RiskModel(card=card, estimator=model)

    return make


def synthetic_holdout(n: int = 3000, *, seed: int = 99, signal: float = 3.0) -> evaluate.EvalSet:
    """Rows of one GPU each (so every positive row is its own alarm), labelled by the synthetic rule."""
    x, y = synthetic_xy(n, seed=seed, signal=signal)
    keys = pd.DataFrame(
        {"node": [f"n{i}" for i in range(n)], "gpu": 0, "uuid": "", "timestamp": np.full(n, 1_740_960_000.0)}
    )
    status = y.astype(np.int8)
    lab = labels.Labels(
        label=y,
        status=status,
        time_to_failure_s=np.where(y == 1, 3600.0, np.inf),
        failure_id=np.array([f"F{i}" if v else None for i, v in enumerate(y)], dtype=object),
    )
    empty = pd.DataFrame(columns=["id", "node", "gpu", "failure_time", "precursor_start", "fault_class"])
    return evaluate.EvalSet(
        keys=keys, x=x, labels=lab, failures=empty, trap_kind=np.full(n, "", dtype=object), horizon_s=DAY
    )


@pytest.fixture
def holdout() -> evaluate.EvalSet:
    return synthetic_holdout()


def with_card(model: registry.RiskModel, **changes: object) -> registry.RiskModel:
    return registry.RiskModel(card=dataclasses.replace(model.card, **changes), estimator=model.estimator)
