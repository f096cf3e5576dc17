"""Preparing training data: dataset directories or Prometheus history → featurised, labelled, split rows.

Features are computed node chunk by node chunk (peers stay together) on a coarser grid than the samples;
labels come from the ground truth (`labels.label_rows`), the split from `split.assign`. Training may drop
whole exporter field groups per node at random (`drop_fields`), so the model sees fleets without them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import dataset, evaluate, features, labels, split
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

    def part_of(self, which: split.Part) -> evaluate.EvalSet:
        return self.data.subset(self.part == which)


def featurise(
    frame: pd.DataFrame, *, every_s: float | None, node_chunk: int, steps: Steps, name: str
) -> pd.DataFrame:
    """Features node chunk by node chunk (peers stay together), with a progress bar."""
    host = features.host_column(frame)
    if host is None:
        raise dataset.DatasetError("the time series has no host column")
    nodes = frame[host].astype(str)
    unique = np.sort(nodes.unique())
    chunks = [unique[i : i + node_chunk] for i in range(0, len(unique), node_chunk)]
    parts: list[pd.DataFrame] = []
    with steps.step(name, total=len(chunks)) as advance:
        for chunk in chunks:
            parts.append(features.compute_features(frame.loc[nodes.isin(chunk).to_numpy()], every_s=every_s))
            advance()
    out = pd.concat(parts, ignore_index=True)
    for column in ("node", "uuid"):
        out[column] = out[column].astype(str)
    return out


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

    return prepare_sources(
        read(),
        config,
        steps=steps,
        whole=whole,
        tag_nodes=len(directories) > 1,
        data_hash=digest,
        names=tuple(str(d) for d in directories),
    )


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
) -> Prepared:
    """Featurise and label sources one at a time (a frame is dropped once featurised). `tag_nodes`
    prefixes node names and failure ids with the source's name, so several sources never mix.
    `validation_sources` (names) splits by whole fleets (`split.by_fleet`): those validate and hold out,
    the others train."""
    keys: list[pd.DataFrame] = []
    label_parts: list[labels.Labels] = []
    failures: list[pd.DataFrame] = []
    traps: list[npt.NDArray[np.object_]] = []
    validating: list[npt.NDArray[np.bool_]] = []
    step_s: float | None = None
    raw_rows = 0
    for index, source in enumerate(sources):
        frame, truth, name = source.frame, source.truth, source.name
        raw_rows += len(frame)
        step_s = step_s or _step_s(frame)
        if config.field_dropout > 0 and not whole:
            frame = drop_fields(frame, config.field_dropout, seed=config.seed, salt=name)
        table = featurise(
            frame,
            every_s=config.every_s,
            node_chunk=config.node_chunk,
            steps=steps,
            name=f"features {name}",
        )
        del frame, source
        with steps.step(f"labels {name}"):
            lab = labels.label_rows(
                table,
                truth.failures,
                repairs=truth.repairs,
                horizon_s=config.horizon_s,
                censor_early=config.censor_early,
            )
            kinds = dataset.trap_kinds(truth.traps, table)
        if tag_nodes:
            tag = f"{name}:"
            table["node"] = tag + table["node"]
            fails = truth.failures.assign(
                node=tag + truth.failures["node"], id=f"{index}:" + truth.failures["id"]
            )
            lab = labels.Labels(
                label=lab.label,
                status=lab.status,
                time_to_failure_s=lab.time_to_failure_s,
                failure_id=np.array(
                    [None if v is None else f"{index}:{v}" for v in lab.failure_id], dtype=object
                ),
            )
        else:
            fails = truth.failures
        keys.append(table)
        validating.append(np.full(len(table), name in validation_sources, dtype=bool))
        label_parts.append(lab)
        failures.append(fails)
        traps.append(kinds)
    if not keys:
        raise dataset.DatasetError("no data to prepare")
    table = pd.concat(keys, ignore_index=True)
    merged = labels.Labels(
        label=np.concatenate([lab.label for lab in label_parts]),
        status=np.concatenate([lab.status for lab in label_parts]),
        time_to_failure_s=np.concatenate([lab.time_to_failure_s for lab in label_parts]),
        failure_id=np.concatenate([lab.failure_id for lab in label_parts]),
    )
    x = table[list(features.FEATURES)].to_numpy(dtype=np.float32)
    key_frame = table[list(features.KEY_COLUMNS)].copy()
    data = evaluate.EvalSet(
        keys=key_frame,
        x=x,
        labels=merged,
        failures=pd.concat(failures, ignore_index=True),
        trap_kind=np.concatenate(traps),
        horizon_s=config.horizon_s,
    )
    timestamps = key_frame["timestamp"].to_numpy(dtype=np.float64)
    if whole:
        edges = split.boundaries(timestamps, config.split)
        warm = timestamps >= edges.start + config.split.warmup_s
        part = np.where(warm, split.Part.HOLDOUT, split.Part.NONE).astype(np.int8)
    else:
        nodes = key_frame["node"].to_numpy(dtype=object)
        if validation_sources:
            fleet = np.concatenate(validating)
            part, edges = split.by_fleet(nodes, timestamps, fleet, config.split)
        else:
            part, edges = split.assign(nodes, timestamps, config.split)
    return Prepared(
        data=data,
        part=part,
        edges=edges,
        data_hash=data_hash(),
        sources=names,
        step_s=step_s,
        timings=dict(steps.timings),
        raw_rows=raw_rows,
    )


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
