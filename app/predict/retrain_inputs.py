"""What a retraining run trains on: the failures that label it (the XID gauge merged with the journal's),
settings that label like the current model, whether the rows suffice, and the names the new card records
of its data (a hash of it, the source's URL without credentials). Pure functions over frames and cards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from app.predict import history, labels, registry, split, train

MIN_CALIBRATION_ROWS = 5  # train.calibrate needs this many positive and negative validation rows


def config_for(current: registry.RiskModel | None) -> train.TrainConfig:
    """Training settings that label like the current model does (its horizon, grid and sustain)."""
    if current is None:
        return train.TrainConfig()
    card = current.card
    return train.TrainConfig(
        horizon_s=card.horizon_s,
        every_s=card.every_s,
        sustain_s=card.sustain_s,
        target_precision=card.target_precision,
        primary_metric=card.primary_metric,
        split=split.SplitSpec(embargo_s=card.horizon_s),
    )


def thin_data(prepared: train.Prepared) -> str | None:
    """Why these rows cannot train and compare a model, or None when they can."""
    problems: list[str] = []
    for part, name in (
        (split.Part.TRAIN, "training"),
        (split.Part.VALIDATION, "validation"),
        (split.Part.HOLDOUT, "holdout"),
    ):
        lab = prepared.part_of(part).labels
        y = lab.label[lab.usable]
        positives, negatives = int(y.sum()), int((y == 0).sum())
        needed = MIN_CALIBRATION_ROWS if part is split.Part.VALIDATION else 1
        if positives < needed or negatives < needed:
            problems.append(f"the {name} part has {positives} positive and {negatives} negative rows")
    if not problems:
        return None
    return "; ".join(problems) + " (a longer window or more failures needed)"


def label_failures(
    frame: pd.DataFrame,
    from_journal: pd.DataFrame | None,
    xid_classes: Mapping[int, str],
    *,
    start: datetime,
    end: datetime,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The failures table for labels (XID gauge + journal, one row per failure) and how many came whence."""
    from_xid = history.from_xid_series(frame, xid_classes)
    journal = from_journal if from_journal is not None else history.empty()
    failures = history.merge(from_xid, journal)
    counts = {
        "xid": len(from_xid),
        "journal": len(journal),
        "merged": len(failures),
        "window": _in_window(failures, start.timestamp(), end.timestamp()),
    }
    return failures, counts


def _in_window(failures: pd.DataFrame, start: float, end: float) -> int:
    if failures.empty:
        return 0
    t = pd.to_numeric(failures["failure_time"]).to_numpy(dtype=np.float64)
    hardware = failures["fault_class"].astype(str).isin(labels.HARDWARE_CLASSES).to_numpy()
    return int(np.sum(hardware & (t >= start) & (t <= end)))


def data_hash(frame: pd.DataFrame, failures: pd.DataFrame) -> str:
    """sha256 over the samples and the failures read, so a model names the data it learned from."""
    digest = hashlib.sha256()
    for table in (frame, failures):
        digest.update(",".join(map(str, table.columns)).encode())
        digest.update(pd.util.hash_pandas_object(table, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def redact(url: str) -> str:
    """The URL without credentials, path or query: what a card may record about where data came from."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if parts.scheme else url.rsplit("@", maxsplit=1)[-1]
