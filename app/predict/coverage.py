"""Which of a model's source fields this fleet does not export: the warning `serve`, `sickbay score` and
`sickbay backtest` give, because a field that is absent is missing, not zero.

One implementation: `features.missing_fields` (the catalog of the fields each feature reads, with the
equivalent ECC counters) decides; this adds what the three callers need around it — column names as well
as frames, the fields no batch of a backtest had (`absent_fields`), and the warning's words. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from app.predict import features


def absent_fields(frame: pd.DataFrame) -> frozenset[str]:
    """The source fields a frame has no value for (`features.present_fields`' complement)."""
    return frozenset(features.SOURCE_METRICS) - features.present_fields(frame)


def missing_fields(frame: pd.DataFrame | Iterable[str], model_features: Iterable[str]) -> tuple[str, ...]:
    """Which of the model's source fields `frame` (or a list of the columns that have values) lacks, in
    `SOURCE_METRICS` order; a field with an exported equivalent is not missing."""
    if not isinstance(frame, pd.DataFrame):
        frame = pd.DataFrame({name: [0.0] for name in frame})
    return features.missing_fields(frame, tuple(model_features))


def warning(missing: Sequence[str], model_features: Iterable[str]) -> str | None:
    """One line naming the absent fields and how many of the model's features read them."""
    if not missing:
        return None
    wanted = set(model_features)
    gone = set(missing)
    reading = [n for n in wanted if gone & set(features.FEATURE_SOURCES.get(n, ()))]
    short = ", ".join(m.removeprefix("DCGM_FI_DEV_") for m in missing)
    return (
        f"this fleet does not export {len(missing)} of the model's source fields ({short}): "
        f"{len(reading)} of its {len(wanted)} features read them and are missing (NaN) where they do, "
        "never zero"
    )
