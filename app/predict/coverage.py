"""Which of a model's source fields this fleet does not export: the warning `serve`, `sickbay score` and
`sickbay backtest` print, because a field that is absent is missing, not zero.

Which dcgm-exporter field feeds which feature is not written down twice: `lost_features` asks
`features.compute_features` itself, on a small synthetic frame with every `features.SOURCE_METRICS`
field, which features turn NaN when the absent fields are dropped (cached per set of fields). So it
follows features.py wherever it goes. Pure (numpy, pandas).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from app.predict import features

_GPUS, _ROWS, _STEP_S = 2, 13, 300.0  # a field present gives a value at once: an hour is enough


def _synthetic() -> pd.DataFrame:
    """Two GPUs of one node with every source field moving, so each feature has a value to lose."""
    n = _ROWS
    t = np.arange(n, dtype=np.float64) * _STEP_S
    parts = []
    for gpu in range(_GPUS):
        ramp = np.arange(n, dtype=np.float64) * (gpu + 1)
        frame = pd.DataFrame({"node": "n", "gpu": gpu, "uuid": f"GPU-{gpu}", "timestamp": t, "present": 1.0})
        for name in features.SOURCE_METRICS:
            frame[name] = ramp
        frame[features.GPU_TEMP] = 50.0 + 5.0 * np.sin(ramp / 7.0) + gpu
        frame[features.MEMORY_TEMP] = 60.0 + 5.0 * np.cos(ramp / 5.0) + gpu
        frame[features.GPU_UTIL] = 50.0 + 40.0 * np.sin(ramp / 11.0)
        frame[features.THROTTLE] = np.where(np.arange(n) % 3 == 0, 0x8 | 0x20 | 0x4, 0).astype(np.float64)
        frame[features.XID] = np.where(
            np.arange(n) % 5 == 0, 79.0, np.where(np.arange(n) % 3 == 0, 13.0, 0.0)
        )
        for flag in (features.REMAP_PENDING, features.REMAP_FAILURE, features.RETIRED_PENDING):
            frame[flag] = (np.arange(n) % 2).astype(np.float64)
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


@functools.cache
def _frame() -> pd.DataFrame:
    return _synthetic()


@functools.cache
def lost_features(absent: frozenset[str]) -> frozenset[str]:
    """The features that have no value when the fields `absent` are not exported (others stay)."""
    frame = _frame()
    full = _known(features.compute_features(frame, last_only=True))
    if not absent:
        return frozenset()
    without = _known(
        features.compute_features(frame.drop(columns=sorted(absent & set(frame.columns))), last_only=True)
    )
    return frozenset(full - without)


def _known(table: pd.DataFrame) -> set[str]:
    names = [c for c in table.columns if c not in features.KEY_COLUMNS]
    return {c for c in names if table[c].notna().any()}


def absent_fields(frame: pd.DataFrame | Iterable[str]) -> frozenset[str]:
    """The source fields a frame (or its column names) has no value for, under either DCGM name
    (`features.ALIASES`); a column without a single value is absent (Prometheus had no series)."""
    if isinstance(frame, pd.DataFrame):
        have = {c for c in frame.columns if frame[c].notna().any()}
    else:
        have = set(frame)
    canonical = {features.ALIASES.get(c, c) for c in have}
    return frozenset(f for f in features.SOURCE_METRICS if f not in canonical)


def missing_fields(frame: pd.DataFrame | Iterable[str], model_features: Iterable[str]) -> tuple[str, ...]:
    """Which of the model's source fields `frame` lacks: the absent fields without which one of the
    model's features has no value (a field with an exported alternative, such as the volatile ECC
    counter beside the aggregate one, is not reported), in `SOURCE_METRICS` order."""
    wanted = frozenset(model_features)
    absent = absent_fields(frame)
    lost = lost_features(absent) & wanted
    if not lost:
        return ()
    return tuple(
        f for f in features.SOURCE_METRICS if f in absent and (lost_features(absent - {f}) & wanted) != lost
    )


def warning(missing: Sequence[str], model_features: Iterable[str]) -> str | None:
    """One line naming the absent fields and how many of the model's features they leave NaN."""
    if not missing:
        return None
    wanted = set(model_features)
    lost = lost_features(frozenset(missing)) & wanted
    short = ", ".join(m.removeprefix(features.F) for m in missing)
    return (
        f"this fleet does not export {len(missing)} of the model's source fields ({short}): "
        f"{len(lost)} of its {len(wanted)} features are missing (NaN), not zero"
    )
