"""Preparing training data: dataset directories or Prometheus history → featurised, labelled, split rows.

Features are computed node chunk by node chunk (peers stay together) on a coarser grid than the samples,
and each chunk is labelled (`labels.label_rows`), down-sampled (`sampling`: training negatives only) and
written into one preallocated float32 matrix (`matrix.RowBuffer`) before the next is computed, so memory
is the kept rows plus one chunk; the split comes from `split.assign` on the span of all featurised rows. Training may drop
whole exporter field groups per node at random (`drop_fields`), so the model sees fleets without them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import dataset, evaluate, features, labels, matrix, sampling, split
from app.predict.steps import Steps
from app.predict.train_config import TrainConfig


@dataclass(frozen=True, slots=True)
class Prepared:
    """Featurised, labelled rows of one or more datasets, with their split."""

    data: evaluate.EvalSet
    part: npt.NDArray[np.int8]
    edges: split.Boundaries
    data_hash: str
    sources: tuple[str, ...]
    step_s: float | None
    timings: dict[str, float]
    raw_rows: int
    weight: npt.NDArray[np.float32]  # 1 / rate on kept down-sampled negatives, 1 elsewhere
    sampling: sampling.Record

    def part_of(self, which: split.Part) -> evaluate.EvalSet:
        return self.data.subset(self.part == which)

    def weight_of(self, which: split.Part) -> npt.NDArray[np.float32]:
        return np.asarray(self.weight[self.part == which], dtype=np.float32)


def feature_chunks(
    frame: pd.DataFrame, *, every_s: float | None, node_chunk: int, steps: Steps, name: str
) -> Iterator[pd.DataFrame]:
    """Features node chunk by node chunk (peers stay together), with a progress bar; node and uuid as str."""
    host = features.host_column(frame)
    if host is None:
        raise dataset.DatasetError("the time series has no host column")
    nodes = frame[host].astype(str)
    unique = np.sort(nodes.unique())
    chunks = [unique[i : i + node_chunk] for i in range(0, len(unique), node_chunk)]
    with steps.step(name, total=len(chunks)) as advance:
        for chunk in chunks:
            out = features.compute_features(frame.loc[nodes.isin(chunk).to_numpy()], every_s=every_s)
            for column in ("node", "uuid"):
                out[column] = out[column].astype(str)
            yield out
            advance()


def featurise(
    frame: pd.DataFrame, *, every_s: float | None, node_chunk: int, steps: Steps, name: str
) -> pd.DataFrame:
    """Features of the whole frame as one table (`feature_chunks`, concatenated)."""
    parts = list(feature_chunks(frame, every_s=every_s, node_chunk=node_chunk, steps=steps, name=name))
    return pd.concat(parts, ignore_index=True)


def _step_s(frame: pd.DataFrame) -> float | None:
    if "timestamp" not in frame.columns:
        return None
    instants = np.unique(frame["timestamp"].to_numpy(dtype=np.float64))
    return float(np.median(np.diff(instants))) if instants.size > 1 else None


@dataclass(frozen=True, slots=True)
class Source:
    """One labelled time series for `prepare_sources`: a dataset directory's, or Prometheus history with
    failures from the journal and the XID series (`history`)."""

    name: str
    frame: pd.DataFrame
    truth: dataset.Truth


def prepare(
    directories: Sequence[Path], config: TrainConfig, *, steps: Steps, whole: bool = False
) -> Prepared:
    """Read, featurise and label datasets; `whole` puts every warmed-up row in the holdout (evaluation)."""

    def read() -> Iterator[Source]:
        for directory in directories:
            with steps.step(f"read {directory.name}"):
                frame = dataset.read_timeseries(directory)
                truth = dataset.read_truth(directory)
            yield Source(directory.name, frame, truth)

    def digest() -> str:
        with steps.step("hash data"):
            return dataset.dataset_hash(list(directories))

    scans: list[sampling.Scan] | None = None
    if not whole and config.negative_rate != 1.0:
        with steps.step("scan"):
            scans = [dataset.scan(directory) for directory in directories]
    return prepare_sources(
        read(),
        config,
        steps=steps,
        whole=whole,
        tag_nodes=len(directories) > 1,
        data_hash=digest,
        names=tuple(str(d) for d in directories),
        scans=scans,
    )


def _scan_frame(frame: pd.DataFrame) -> sampling.Scan:
    return sampling.scan_timestamps([features.timestamps(frame)])


def _take(lab: labels.Labels, mask: npt.NDArray[np.bool_]) -> labels.Labels:
    return labels.Labels(
        label=lab.label[mask],
        status=lab.status[mask],
        time_to_failure_s=lab.time_to_failure_s[mask],
        failure_id=lab.failure_id[mask],
    )


@dataclass
class _Rows:
    """The kept rows of the chunks so far: features in one matrix, the rest in per-chunk parts."""

    buffer: matrix.RowBuffer
    keys: list[pd.DataFrame] = field(default_factory=list)
    label_parts: list[labels.Labels] = field(default_factory=list)
    traps: list[npt.NDArray[np.object_]] = field(default_factory=list)
    validating: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    weights: list[npt.NDArray[np.float32]] = field(default_factory=list)
    seen: int = 0
    region_rows: int = 0
    region_negatives: int = 0
    kept_negatives: int = 0
    unused_dropped: int = 0
    t_min: float = np.inf
    t_max: float = -np.inf

    def see(self, t: npt.NDArray[np.float64]) -> None:
        self.seen += len(t)
        if len(t):
            self.t_min, self.t_max = min(self.t_min, float(t.min())), max(self.t_max, float(t.max()))

    def add(
        self,
        table: pd.DataFrame,
        lab: labels.Labels,
        kinds: npt.NDArray[np.object_],
        weight: npt.NDArray[np.float32],
        *,
        validating: bool,
    ) -> None:
        self.buffer.append(table[list(features.FEATURES)].to_numpy(dtype=np.float32))
        self.keys.append(table[list(features.KEY_COLUMNS)])
        self.validating.append(np.full(len(table), validating, dtype=bool))
        self.label_parts.append(lab)
        self.traps.append(kinds)
        self.weights.append(weight)

    def merged_labels(self) -> labels.Labels:
        return labels.Labels(
            label=np.concatenate([lab.label for lab in self.label_parts]),
            status=np.concatenate([lab.status for lab in self.label_parts]),
            time_to_failure_s=np.concatenate([lab.time_to_failure_s for lab in self.label_parts]),
            failure_id=np.concatenate([lab.failure_id for lab in self.label_parts]),
        )

    def record(self, chosen: sampling.Plan) -> sampling.Record:
        return sampling.Record(
            plan=chosen,
            rows_seen=self.seen,
            region_rows=self.region_rows,
            region_negatives=self.region_negatives,
            kept_negatives=self.kept_negatives,
            unused_dropped=self.unused_dropped,
        )


def _label(
    table: pd.DataFrame, truth: dataset.Truth, config: TrainConfig, *, tag: str, index: int
) -> tuple[labels.Labels, npt.NDArray[np.object_]]:
    """Labels and trap kinds of a chunk (from the source's own names), then its nodes tagged in place."""
    lab = labels.label_rows(
        table,
        truth.failures,
        repairs=truth.repairs,
        horizon_s=config.horizon_s,
        censor_early=config.censor_early,
    )
    kinds = dataset.trap_kinds(truth.traps, table)
    if tag:
        table["node"] = tag + table["node"]
        lab = labels.Labels(
            label=lab.label,
            status=lab.status,
            time_to_failure_s=lab.time_to_failure_s,
            failure_id=np.array(
                [None if v is None else f"{index}:{v}" for v in lab.failure_id], dtype=object
            ),
        )
    return lab, kinds


def _down_sample(
    table: pd.DataFrame,
    lab: labels.Labels,
    chosen: sampling.Plan,
    config: TrainConfig,
    rows: _Rows,
    *,
    name: str,
    validation_sources: frozenset[str],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32]]:
    """Which rows of a chunk to keep, and their weights (1 / rate on kept down-sampled negatives)."""
    weight = np.ones(len(table), dtype=np.float32)
    if not chosen.active or chosen.bounds is None:
        return np.ones(len(table), dtype=bool), weight
    if validation_sources:
        region = np.full(len(table), name not in validation_sources, dtype=bool)
    else:
        t = table["timestamp"].to_numpy(dtype=np.float64)
        region = sampling.region(table["node"], t, config.split, chosen.bounds)
    candidate = region & (lab.label != 1)
    kept = sampling.keep(table, candidate, chosen.rate, seed=config.seed, salt=name)
    if not validation_sources and chosen.upper is not None:
        drop = sampling.unused(table["node"], t, config.split, chosen.upper)
        rows.unused_dropped += int(drop.sum())
        kept &= ~drop
    rows.region_rows += int(region.sum())
    rows.region_negatives += int(candidate.sum())
    rows.kept_negatives += int((candidate & kept).sum())
    weight[candidate] = 1.0 / chosen.rate
    return kept, weight[kept]


def prepare_sources(
    sources: Iterable[Source],
    config: TrainConfig,
    *,
    steps: Steps,
    data_hash: Callable[[], str],
    names: tuple[str, ...],
    whole: bool = False,
    tag_nodes: bool = False,
    validation_sources: frozenset[str] = frozenset(),
    scans: Sequence[sampling.Scan] | None = None,
) -> Prepared:
    """Featurise and label sources one at a time (a frame is dropped once featurised), node chunk by node
    chunk into one preallocated matrix (`matrix.RowBuffer`), down-sampling the training negatives of each
    chunk as it comes (`sampling`; the validation and holdout rows are all kept). `tag_nodes` prefixes
    node names and failure ids with the source's name, so several sources never mix.
    `validation_sources` (names) splits by whole fleets (`split.by_fleet`): those validate and hold out,
    the others train. `scans` (one per source, `dataset.scan`) size the data before it is read; without
    them, when down-sampling may be needed, the sources are first read into a list and scanned in memory
    (free for frames already there; a caller streaming large sources passes `scans`)."""
    if scans is None and not whole and config.negative_rate != 1.0:
        sources = list(sources)
        scans = [_scan_frame(source.frame) for source in sources]
    chosen = sampling.plan(
        scans or [],
        negative_rate=config.negative_rate,
        every_s=config.every_s,
        spec=config.split,
        whole=whole,
    )
    rows = _Rows(matrix.RowBuffer(len(features.FEATURES), capacity=chosen.estimated_rows))
    failures: list[pd.DataFrame] = []
    step_s: float | None = None
    raw_rows = 0
    for index, source in enumerate(sources):
        frame, truth, name = source.frame, source.truth, source.name
        raw_rows += len(frame)
        step_s = step_s or _step_s(frame)
        if config.field_dropout > 0 and not whole:
            frame = drop_fields(frame, config.field_dropout, seed=config.seed, salt=name)
        tag = f"{name}:" if tag_nodes else ""
        fails = truth.failures
        if tag_nodes:
            fails = fails.assign(node=tag + fails["node"], id=f"{index}:" + fails["id"])
        chunks = feature_chunks(
            frame, every_s=config.every_s, node_chunk=config.node_chunk, steps=steps, name=f"features {name}"
        )
        del frame, source
        for table in chunks:
            lab, kinds = _label(table, truth, config, tag=tag, index=index)
            rows.see(table["timestamp"].to_numpy(dtype=np.float64))
            kept, weight = _down_sample(
                table, lab, chosen, config, rows, name=name, validation_sources=validation_sources
            )
            if not kept.all():
                lab, kinds = _take(lab, kept), kinds[kept]
            rows.add(
                table.loc[kept].reset_index(drop=True) if not kept.all() else table,
                lab,
                kinds,
                weight,
                validating=name in validation_sources,
            )
        failures.append(fails)
    if not failures:
        raise dataset.DatasetError("no data to prepare")
    key_frame = pd.concat(rows.keys, ignore_index=True)
    rows.keys.clear()
    data = evaluate.EvalSet(
        keys=key_frame,
        x=rows.buffer.finish(),
        labels=rows.merged_labels(),
        failures=pd.concat(failures, ignore_index=True),
        trap_kind=np.concatenate(rows.traps),
        horizon_s=config.horizon_s,
    )
    part, edges = _split(key_frame, rows, config, whole=whole, validation_sources=validation_sources)
    if chosen.active and chosen.bounds is not None:
        _check_bounds(edges, chosen.bounds, chosen.upper)
    return Prepared(
        data=data,
        part=part,
        edges=edges,
        data_hash=data_hash(),
        sources=names,
        step_s=step_s,
        timings=dict(steps.timings),
        raw_rows=raw_rows,
        weight=np.concatenate(rows.weights),
        sampling=rows.record(chosen),
    )


def _split(
    keys: pd.DataFrame, rows: _Rows, config: TrainConfig, *, whole: bool, validation_sources: frozenset[str]
) -> tuple[npt.NDArray[np.int8], split.Boundaries]:
    # The span of every featurised row, down-sampled or not: the split is the one all rows would get.
    timestamps = keys["timestamp"].to_numpy(dtype=np.float64)
    if not rows.seen:
        return np.zeros(0, dtype=np.int8), split.Boundaries(0.0, 0.0, 0.0, 0.0)
    edges = split.boundaries(np.array([rows.t_min, rows.t_max]), config.split)
    if whole:
        warm = timestamps >= edges.start + config.split.warmup_s
        return np.where(warm, split.Part.HOLDOUT, split.Part.NONE).astype(np.int8), edges
    nodes = keys["node"].to_numpy(dtype=object)
    if validation_sources:
        fleet = np.concatenate(rows.validating)
        return split.by_fleet(nodes, timestamps, fleet, config.split, edges=edges)
    return split.assign(nodes, timestamps, config.split, edges=edges)


def _check_bounds(edges: split.Boundaries, lower: split.Boundaries, upper: split.Boundaries | None) -> None:
    # Rows were down-sampled or dropped against these bounds: were the final boundaries outside them, a
    # validation or holdout row might have been lost. `sampling` rules that out; this says if it broke.
    if edges.train_end < lower.train_end or edges.validation_end < lower.validation_end:
        raise RuntimeError(f"the split's boundaries {edges} are earlier than the down-sampling's {lower}")
    if upper is not None and (edges.start < upper.start or edges.validation_end > upper.validation_end):
        raise RuntimeError(f"the split's boundaries {edges} are outside the down-sampling's {upper}")


def drop_fields(frame: pd.DataFrame, probability: float, *, seed: int, salt: str) -> pd.DataFrame:
    """The frame with, for each node, each exporter field group (`features.FIELD_GROUPS`) blanked with
    `probability`: what a fleet whose exporter config leaves them out looks like (missing, not zero).
    The draw depends on the seed, the salt (the source's name) and the node only."""
    host = features.host_column(frame)
    if host is None:
        return frame
    nodes = frame[host].astype(str)
    unique = np.sort(nodes.unique())
    groups = list(features.FIELD_GROUPS.values())
    dropped: list[list[str]] = [[] for _ in groups]
    for node in unique:
        digest = hashlib.sha256(f"{seed}:{salt}:{node}".encode()).digest()
        draws = np.random.default_rng(int.from_bytes(digest[:8], "little")).random(len(groups))
        for i in np.flatnonzero(draws < probability):
            dropped[i].append(str(node))
    out = frame.copy()
    for group, lost in zip(groups, dropped, strict=True):
        columns = [c for c in out.columns if features.ALIASES.get(c, c) in group]
        if columns and lost:
            out.loc[nodes.isin(lost).to_numpy(), columns] = np.nan
    return out
