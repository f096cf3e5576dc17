"""What a training run is configured with: horizon, grid, thresholds' targets, estimator, split, dropout,
negative down-sampling."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.predict import labels, split

Calibration = Literal["isotonic", "sigmoid"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    horizon_s: float = labels.DEFAULT_HORIZON_S
    every_s: float = 1800.0
    target_precision: float = 0.9
    warn_precision: float = 0.5
    fa_budget: float = 1.0
    warn_fa_budget: float = 10.0
    sustain_s: float = 1800.0
    min_alarm_rows: int = 20
    split: split.SplitSpec = field(default_factory=split.SplitSpec)
    max_iter: int = 200
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    min_samples_leaf: int = 100
    l2_regularization: float = 1.0
    positive_weight: float | None = None
    calibration: Calibration = "sigmoid"
    censor_early: bool = True
    seed: int = 0
    primary_metric: str = "pr_auc"
    node_chunk: int = 25
    # Chance that a node of a training dataset loses each exporter field group (`features.FIELD_GROUPS`),
    # so the model learns to score fleets whose exporter leaves fields out; 0 keeps every field.
    field_dropout: float = 0.0
    threads: int | None = None
    # Share of training negatives kept (every positive is; kept negatives weigh 1 / rate: `sampling`);
    # None chooses it from the data's row count (`sampling.auto_rate`: 1 up to 4M feature rows); 1 keeps all.
    negative_rate: float | None = None

    def __post_init__(self) -> None:
        if self.negative_rate is not None and not 0.0 < self.negative_rate <= 1.0:
            raise ValueError(f"negative_rate must be in (0, 1], not {self.negative_rate}")
