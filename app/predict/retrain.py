"""Retraining: a challenger trained on recent Prometheus history, promoted only if it beats the current model.

`retrain` is the one path both `sickbay train --from-prometheus` and the service's weekly job
(`app.retraining`) run:

1. read [now - window, now] from Prometheus (`prometheus.Reader`: one range query per metric for all
   GPUs, cut into chunks under Prometheus' point limit);
2. label it: hardware failures from changes of the XID gauge (`history.from_xid_series`, classes from the
   operator's XID catalog) merged with the journal's hardware faults (`journal_failures`, read by the
   caller); the journal records no repairs, so a failed slot stays excluded to the end of the window; no
   traps (nothing in production says which GPUs only look sick);
3. prepare and fit a challenger (`train.prepare_sources`, `train.fit`) — without an explicit config, with
   the current card's horizon, grid, sustain, target precision and primary metric, so both models are
   judged against one definition of a positive;
4. score the challenger AND the current model on the challenger's holdout — the same `EvalSet`: the last
   part of the window on nodes the challenger never trained on — and promote the challenger only if it
   beats the rules baseline on those rows (`promotion.beats_baseline`) and its primary metric is higher
   than the current model's without more false alarms (`promotion.promote_if_better`: an atomic swap that
   keeps the old model as `previous`, for `registry.rollback`);
5. the comparison is written into the challenger's card (`metrics["promotion"]`: both versions, both
   metrics, the baseline's figures, the verdict and its reason). A rejected challenger is saved too, NOT activated, so an operator
   can inspect it; `registry.prune` then keeps only the newest few versions besides current and previous.

Two expected troubles are outcomes, never exceptions, and change nothing in the models directory:
Prometheus unreachable (`Status.PROMETHEUS_UNAVAILABLE`) and too little data (`Status.TOO_LITTLE_DATA`:
no series, too few failures, or a split part without the positives fitting and comparing need).

Blocking (HTTP, pandas, scikit-learn): the service calls it from a worker thread. `journal_failures`
reads the service's SQLite journal read-only; it is the only journal I/O here, kept at the edge.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from app.predict import baseline, dataset, history, labels, prometheus, promotion, registry, split, train

log = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 28 * 86400.0
DEFAULT_MIN_FAILURES = 5
DEFAULT_KEEP = 3  # versions kept besides current and previous (rejected challengers, older models)
MIN_CALIBRATION_ROWS = 5  # train.calibrate needs this many positive and negative validation rows


class Status(StrEnum):
    PROMOTED = "promoted"
    KEPT = "kept"
    PROMETHEUS_UNAVAILABLE = "prometheus-unavailable"
    TOO_LITTLE_DATA = "too-little-data"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrainOutcome:
    """What one retraining run did, and why; `as_dict` is what the CLI prints and the service logs."""

    status: Status
    reason: str
    at: datetime
    window_start: datetime
    window_end: datetime
    current: str | None = None
    previous: str | None = None
    challenger: str | None = None
    promotion: dict[str, Any] | None = None
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    raw_rows: int = 0
    pruned: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def promoted(self) -> bool:
        return self.status is Status.PROMOTED

    @property
    def skipped(self) -> bool:
        return self.status in (Status.PROMETHEUS_UNAVAILABLE, Status.TOO_LITTLE_DATA)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "at": _iso(self.at),
            "window": {"start": _iso(self.window_start), "end": _iso(self.window_end)},
            "current": self.current,
            "previous": self.previous,
            "challenger": self.challenger,
            "promotion": self.promotion,
            "failures": dict(self.failures),
            "raw_rows": self.raw_rows,
            "pruned": list(self.pruned),
            "seconds": self.seconds,
        }


class JournalUnreadable(Exception):
    """The journal file could not be read (missing, not SQLite, no faults table)."""


def retrain(
    *,
    reader: prometheus.Reader,
    models_dir: Path,
    window_s: float = DEFAULT_WINDOW_S,
    now: datetime,
    failures_from_journal: pd.DataFrame | None,
    xid_classes: Mapping[int, str],
    config: train.TrainConfig | None = None,
    steps: train.Steps | None = None,
    threads: int | None = None,
    min_failures: int = DEFAULT_MIN_FAILURES,
    min_gain: float = 0.0,
    keep: int = DEFAULT_KEEP,
    rules: baseline.Baseline | None = None,
    gate: bool = True,
    force: bool = False,
) -> RetrainOutcome:
    """Train a challenger on [now - window_s, now] and promote it only if it beats the rules baseline (the
    shipped `rules/prediction-baseline.yaml` unless `rules` is given; `gate=False` skips it, for tests of
    the rest) and the current model; `force` (an operator's) promotes it regardless, recorded as forced."""
    started = time.perf_counter()
    end = now.astimezone(UTC)
    start = end - timedelta(seconds=window_s)
    run = _Run(at=end, start=start, end=end, started=started)
    try:
        frame = reader.read(start, end)
    except prometheus.PrometheusUnavailable as exc:
        log.warning("retraining skipped, the current model stays: %s", exc)
        return run.outcome(Status.PROMETHEUS_UNAVAILABLE, str(exc), models_dir)
    run.raw_rows = len(frame)
    if frame.empty:
        reason = f"Prometheus has no DCGM series between {_iso(start)} and {_iso(end)}"
        return run.skip(reason, models_dir)

    failures, run.failures = label_failures(frame, failures_from_journal, xid_classes, start=start, end=end)
    if run.failures["window"] < min_failures:
        reason = (
            f"{run.failures['window']} hardware failures in the window ({run.failures['xid']} from the XID "
            f"gauge, {run.failures['journal']} from the journal); at least {min_failures} are needed"
        )
        return run.skip(reason, models_dir)

    current = _load_current(models_dir)
    chosen = config if config is not None else config_for(current)
    if threads is not None:
        chosen = dataclasses.replace(chosen, threads=threads)
    truth = dataset.Truth(
        start=start.timestamp(),
        end=end.timestamp(),
        failures=failures,
        repairs=pd.DataFrame(columns=["node", "time", "kind"]),  # the journal records no repairs yet
        traps=pd.DataFrame(columns=["kind", "node", "gpu", "uuid"]),
    )
    where = redact(reader.settings.url)
    steps = steps if steps is not None else train.Steps(show=False)
    digest = data_hash(frame, failures)
    prepared = train.prepare_sources(
        [train.Source("prometheus", frame, truth)],
        chosen,
        steps=steps,
        data_hash=lambda: digest,
        names=(f"prometheus:{where}",),
    )
    del frame  # the samples are featurised: free them before fitting
    thin = thin_data(prepared)
    if thin is not None:
        return run.skip(thin, models_dir)
    provenance = [
        f"prometheus {where} {_iso(start)}..{_iso(end)} step {reader.settings.step_s:g}s",
        f"failures: {run.failures['xid']} from the XID gauge, {run.failures['journal']} from the journal, "
        f"{run.failures['merged']} merged",
    ]
    try:
        challenger = train.fit(prepared, chosen, now=end, steps=steps, provenance=provenance).model
    except ValueError as exc:  # the data checks of fitting and calibrating (train._weights, train.calibrate)
        return run.skip(str(exc), models_dir)

    challenger = _unique_version(models_dir, challenger)
    holdout = prepared.part_of(split.Part.HOLDOUT)
    verdict = promotion.promote_if_better(
        challenger,
        current,
        holdout,
        models_dir=models_dir,
        min_gain=min_gain,
        rules=(rules if rules is not None else baseline.load()) if gate else None,
        force=force,
    )
    run.promotion = verdict.record()
    run.challenger = challenger.card.version
    if verdict.promoted:
        log.info("retraining promoted risk model %s: %s", challenger.card.version, verdict.reason)
        status = Status.PROMOTED
    else:
        _keep_rejected(models_dir, promotion.with_promotion(challenger, verdict))
        log.info(
            "retraining kept risk model %s: challenger %s %s",
            verdict.current_version,
            challenger.card.version,
            verdict.reason,
        )
        status = Status.KEPT
    run.pruned = tuple(registry.prune(models_dir, keep=keep))
    return run.outcome(status, verdict.reason, models_dir)


@dataclass(slots=True, kw_only=True)
class _Run:
    at: datetime
    start: datetime
    end: datetime
    started: float
    raw_rows: int = 0
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    challenger: str | None = None
    promotion: dict[str, Any] | None = None
    pruned: tuple[str, ...] = ()

    def skip(self, reason: str, models_dir: Path) -> RetrainOutcome:
        log.warning("retraining skipped, the current model stays: too little data: %s", reason)
        return self.outcome(Status.TOO_LITTLE_DATA, reason, models_dir)

    def outcome(self, status: Status, reason: str, models_dir: Path) -> RetrainOutcome:
        try:
            pointer = registry.read_pointer(models_dir)
        except registry.ModelUnavailable:
            pointer = {"current": None, "previous": None}
        return RetrainOutcome(
            status=status,
            reason=reason,
            at=self.at,
            window_start=self.start,
            window_end=self.end,
            current=pointer["current"],
            previous=pointer["previous"],
            challenger=self.challenger,
            promotion=self.promotion,
            failures=dict(self.failures),
            raw_rows=self.raw_rows,
            pruned=self.pruned,
            seconds=round(time.perf_counter() - self.started, 3),
        )


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


def _load_current(models_dir: Path) -> registry.RiskModel | None:
    try:
        return registry.load_current(models_dir)
    except registry.ModelUnavailable as exc:
        log.warning("retraining has no usable current model (%s): a challenger will be installed", exc)
        return None


def _unique_version(models_dir: Path, model: registry.RiskModel) -> registry.RiskModel:
    """A version name not yet taken: two runs at the same instant on the same data get distinct ones."""
    version, n = model.card.version, 1
    while (models_dir / version).exists():
        n += 1
        version = f"{model.card.version}-{n}"
    if version == model.card.version:
        return model
    card = dataclasses.replace(model.card, version=version)
    return registry.RiskModel(card=card, estimator=model.estimator, path=model.path)


def _keep_rejected(models_dir: Path, model: registry.RiskModel) -> None:
    """Save a rejected challenger (not activated) for inspection; a failure to do so changes nothing."""
    try:
        registry.save(models_dir, model)
    except OSError as exc:  # FileExistsError too: a rerun on the same data within the same second
        log.warning("could not keep rejected challenger %s: %s", model.card.version, exc)


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


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- the journal's labels -------------------------------------------------------------------------------


_JOURNAL_QUERY = (
    "SELECT at, node, gpu, xid, class, rule FROM faults WHERE status = 'firing' AND node IS NOT NULL "
    "AND gpu IS NOT NULL AND at >= ? ORDER BY at, id"
)


def journal_failures(path: Path, *, since: datetime) -> pd.DataFrame:
    """Hardware faults the journal recorded on a GPU since `since`, as a failures table (`history`).

    Reads the service's SQLite file read-only (WAL lets it while the service writes): firing faults of a
    hardware class with a node and a GPU. Faults Sickbay's own prediction raised are `at-risk`, never a
    hardware class, so the model never learns from itself. Raises `JournalUnreadable`.
    """
    # `at` is ISO-8601 text; a day of margin covers any UTC offset, the exact cut is made after parsing.
    coarse = (since.astimezone(UTC) - timedelta(days=1)).isoformat()
    if not path.is_file():
        raise JournalUnreadable(f"no journal at {path}")
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute(_JOURNAL_QUERY, (coarse,)).fetchall()
    except sqlite3.Error as exc:
        raise JournalUnreadable(f"cannot read the journal {path}: {exc}") from None
    cut = since.timestamp()
    records: list[dict[str, Any]] = []
    for at, node, gpu, xid, cls, rule in rows:
        if cls not in labels.HARDWARE_CLASSES:
            continue
        try:
            when = datetime.fromisoformat(str(at))
        except ValueError:
            continue
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        if when.timestamp() < cut:
            continue
        mode = f"xid-{xid}" if xid is not None else f"journal:{rule}"
        records.append({"node": node, "gpu": gpu, "time": when.timestamp(), "fault_class": cls, "mode": mode})
    return history.from_records(records)
