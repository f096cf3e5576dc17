"""The time and node split never leaks: the holdout is later in time and on nodes training never saw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.predict import split
from app.predict.split import Part

DAY = 86400.0


def grid(nodes: int = 60, days: int = 20, every_h: float = 1.0) -> pd.DataFrame:
    times = np.arange(0, days * DAY, every_h * 3600.0)
    return pd.DataFrame(
        {
            "node": np.repeat([f"gpu-node-{i:03d}" for i in range(nodes)], len(times)),
            "timestamp": np.tile(times, nodes),
        }
    )


def test_holdout_nodes_never_appear_in_train_or_validation() -> None:
    rows = grid()
    part, _ = split.assign(rows["node"].to_numpy(), rows["timestamp"].to_numpy(), split.SplitSpec())
    seen = set(rows.loc[np.isin(part, [Part.TRAIN, Part.VALIDATION]), "node"])
    held = set(rows.loc[part == Part.HOLDOUT, "node"])
    assert held
    assert seen
    assert not held & seen


def test_periods_are_ordered_with_an_embargo_between_them() -> None:
    spec = split.SplitSpec(embargo_s=DAY, warmup_s=DAY)
    rows = grid()
    t = rows["timestamp"].to_numpy()
    part, edges = split.assign(rows["node"].to_numpy(), t, spec)
    train, validation, holdout = t[part == Part.TRAIN], t[part == Part.VALIDATION], t[part == Part.HOLDOUT]
    assert train.min() >= edges.start + spec.warmup_s
    # A training label looks a horizon ahead: it must stop a horizon before validation starts.
    assert train.max() + spec.embargo_s <= validation.min()
    assert validation.max() + spec.embargo_s <= holdout.min()
    assert edges.start < edges.train_end < edges.validation_end < edges.end


def test_node_hash_is_stable_and_close_to_the_fraction() -> None:
    nodes = np.array([f"node-{i}" for i in range(2000)], dtype=object)
    first = split.holdout_nodes(nodes, fraction=0.3, salt="s")
    assert (first == split.holdout_nodes(nodes[::-1], fraction=0.3, salt="s")[::-1]).all()
    assert 0.25 < first.mean() < 0.35
    # Another salt draws another holdout.
    assert (first != split.holdout_nodes(nodes, fraction=0.3, salt="other")).any()


def test_a_node_is_on_one_side_whatever_else_is_in_the_data() -> None:
    alone = split.holdout_nodes(
        np.array(["gpu-node-007"], dtype=object), fraction=0.3, salt="sickbay-split-v1"
    )
    rows = grid(nodes=20)
    among = split.holdout_nodes(rows["node"].to_numpy(), fraction=0.3, salt="sickbay-split-v1")
    assert among[rows["node"].to_numpy() == "gpu-node-007"].all() == bool(alone[0])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"train_fraction": 0.8, "validation_fraction": 0.3},
        {"train_fraction": 0.0},
        {"holdout_node_fraction": 1.0},
    ],
)
def test_bad_specs_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="fraction"):
        split.SplitSpec(**kwargs)


def test_split_by_fleet_keeps_every_fleet_on_one_side() -> None:
    a, b = grid(nodes=20, days=5), grid(nodes=20, days=5)
    a["node"] = "train-fleet:" + a["node"]
    b["node"] = "validation-fleet:" + b["node"]
    rows = pd.concat([a, b], ignore_index=True)
    validating = rows["node"].str.startswith("validation-fleet:").to_numpy()
    part, _ = split.by_fleet(
        rows["node"].to_numpy(), rows["timestamp"].to_numpy(), validating, split.SplitSpec()
    )
    warm = rows["timestamp"].to_numpy() >= DAY
    assert set(part[~validating & warm]) == {Part.TRAIN}
    assert set(part[validating & warm]) == {Part.VALIDATION, Part.HOLDOUT}
    assert set(part[~warm]) == {Part.NONE}
    held = set(rows.loc[part == Part.HOLDOUT, "node"])
    assert held.isdisjoint(rows.loc[part == Part.VALIDATION, "node"])
