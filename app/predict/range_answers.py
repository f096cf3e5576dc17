"""A range query's answer on the reader's grid: every sample parsed in one vectorised pass, then the
wide frame (one row per GPU per step, a column per metric) assembled without copying the samples.

Pure functions over an answer's samples as columns (`Samples`: decoded from the body by `range_json`, or
made from the parsed JSON by `samples`); a malformed answer raises `Malformed`, which the reader reports
as Prometheus being unavailable.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict.promql import gpu_identity


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk read. Parsing a range answer allocates millions
    of small lists, and the collector would rescan all of them again and again (a read runs several
    times slower); reference counting still frees them, and the collector runs again afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class Cells:
    """One metric's samples of a read, as parallel arrays: the GPU's index, the grid slot, the value."""

    index: npt.NDArray[np.int64]
    slot: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]


class GpuNames(msgspec.Struct, frozen=True, gc=False):
    """The labels that name a series' GPU and host (`promql.gpu_identity`, `promql.host_ref`), as a decoded
    answer keeps them (`range_json`: the others are not read). Hashable: the cache of label sets keys on
    it as it is, where a dict of labels needs its name taken out and a tuple made."""

    node: str | None = None
    Hostname: str | None = None
    hostname: str | None = None
    kubernetes_node: str | None = None
    instance: str | None = None
    gpu: str | None = None
    UUID: str | None = None
    uuid: str | None = None

    def mapping(self) -> dict[str, str]:
        """The labels present, by name."""
        return {name: value for name in self.__struct_fields__ if (value := getattr(self, name)) is not None}


# What the cache of label sets keys on: a dict of labels' names then values (the name taken out), or the
# decoded names as they are.
LabelKey = tuple[str, ...] | GpuNames


def mapping(labels: Any) -> Mapping[str, Any] | None:
    """A series' labels by name, however the answer holds them; None where they are not labels."""
    if type(labels) is GpuNames:
        return labels.mapping()
    return labels if isinstance(labels, Mapping) else None


class Malformed(ValueError):
    """A range answer whose samples are not [time, value] pairs."""


@dataclass(frozen=True, slots=True)
class Samples:
    """A range answer as columns: each series' labels (its `metric` as sent) and number of samples, then
    every sample's time and value, series after series. Built from the parsed JSON (`samples`) or decoded
    straight from the body (`range_json`): either way no Python object per sample is kept."""

    labels: Sequence[Any]
    counts: npt.NDArray[np.int64]
    times: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]

    @classmethod
    def joined(cls, parts: Sequence[Samples]) -> Samples:
        """One answer of several (a long range read in chunks; none: an empty answer), the series in the
        order given."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            labels=[labels for part in parts for labels in part.labels],
            counts=np.concatenate([np.zeros(0, np.int64), *(part.counts for part in parts)]),
            times=np.concatenate([np.zeros(0), *(part.times for part in parts)]),
            values=np.concatenate([np.zeros(0), *(part.values for part in parts)]),
        )


def samples(series: Iterable[Any]) -> Samples:
    """The parsed JSON's series as columns. Values are Prometheus' strings ("NaN" and "+Inf" included), or
    numbers; one that `float()` refuses reads as NaN. A series or sample of another shape is `Malformed`."""
    labels: list[Any] = []
    counts: list[int] = []
    pairs: list[Any] = []
    for one in series:
        if not isinstance(one, Mapping):
            raise Malformed("a series of the answer is not an object")
        values = one.get("values") or []
        if not isinstance(values, list):
            raise Malformed("a series' samples are not a list")
        labels.append(one.get("metric", {}))
        counts.append(len(values))
        pairs.extend(values)
    try:
        flat = list(chain.from_iterable(pairs))
    except TypeError as exc:
        raise Malformed("a sample of the answer is not a [time, value] pair") from exc
    if len(flat) != 2 * len(pairs):
        raise Malformed("a sample of the answer is not a [time, value] pair")
    items = np.array(flat, dtype=object)
    del flat
    return Samples(
        labels=labels,
        counts=np.array(counts, dtype=np.int64),
        times=_floats(items[0::2], strict=True),
        values=_floats(items[1::2], strict=False),
    )


def parse(
    answer: Samples,
    gpus: dict[tuple[str, int, str], int],
    *,
    grid_start: float,
    step: float,
    n_times: int,
    nodes: set[str] | None = None,
    identities: dict[LabelKey, int] | None = None,
) -> Cells:
    """Every sample of one query's answer on the grid, in one vectorised pass over all its series.

    Python touches each series once (its labels); slotting is numpy's. Samples off the grid's range are
    dropped; GPUs are numbered in `gpus` as first seen. `identities` keeps each label set's GPU number in
    `gpus` (-1: no GPU, or a node not in `nodes`), the metric's name aside (removed from the answer's
    labels), across the reads given it with the same `gpus` and `nodes` (worth it where the answers' labels
    are only the GPU's names: one entry per GPU).
    """
    numbers = np.full(len(answer.counts), -1, dtype=np.int64)
    for position, (labels, count) in enumerate(zip(answer.labels, answer.counts.tolist(), strict=True)):
        if not count:
            continue
        if identities is not None and type(labels) is GpuNames:  # decoded: the key as it is, ~0.3 µs
            number = identities.get(labels)
            if number is None:
                number = identities[labels] = _number_of(gpu_identity(labels.mapping()), gpus, nodes)
        elif identities is not None and type(labels) is dict:  # JSON's: the cached way, ~1 µs a series
            # The same GPU under every record's name: one key for all of them. Taken out of the answer in
            # place (a copy per series cost ~0.5 s a cycle at 8,000 GPUs); nothing reads it after this.
            labels.pop("__name__", None)
            key = (*labels, *labels.values())
            number = identities.get(key)
            if number is None:
                number = identities[key] = _number_of(gpu_identity(labels), gpus, nodes)
        else:
            by_name = mapping(labels)
            number = _number_of(gpu_identity(by_name) if by_name is not None else None, gpus, nodes)
        numbers[position] = number
    index = np.repeat(numbers, answer.counts)
    slot = np.rint((answer.times - grid_start) / step).astype(np.int64)
    ok = (index >= 0) & (slot >= 0) & (slot < n_times)
    return Cells(index=index[ok], slot=slot[ok], value=answer.values[ok])


def _number_of(
    identity: tuple[str, int, str] | None, gpus: dict[tuple[str, int, str], int], nodes: set[str] | None
) -> int:
    """The GPU's number in `gpus` (numbered as first seen), or -1 for none or a node not wanted."""
    if identity is None or (nodes is not None and identity[0] not in nodes):
        return -1
    return gpus.setdefault(identity, len(gpus))


def _floats(items: npt.NDArray[np.object_], *, strict: bool) -> npt.NDArray[np.float64]:
    """Numbers and numeric strings as float64, exactly as `float()` reads each (numpy calls it per item).

    Not strict: what `float()` refuses reads as NaN, item by item (only then, so the usual case stays fast).
    """
    try:
        return items.astype(np.float64)
    except (TypeError, ValueError) as exc:
        if strict:
            raise Malformed(f"a sample time is not a number: {exc}") from exc
        return np.fromiter((_number(x) for x in items), dtype=np.float64, count=len(items))


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def assemble(
    gpus: Mapping[tuple[str, int, str], int],
    cells: Mapping[str, Cells],
    *,
    grid_start: float,
    step: float,
    n_times: int,
) -> pd.DataFrame:
    n_gpus = len(gpus)
    identities = sorted(gpus, key=gpus.__getitem__)
    times = grid_start + step * np.arange(n_times, dtype=np.float64)
    keys: dict[str, Any] = {
        "node": np.repeat(np.array([g[0] for g in identities], dtype=object), n_times),
        "gpu": np.repeat(np.array([g[1] for g in identities], dtype=np.int64), n_times),
        "uuid": np.repeat(np.array([g[2] for g in identities], dtype=object), n_times),
    }
    values = np.full((len(cells), n_gpus * n_times), np.nan)
    for column, cell in zip(values, cells.values(), strict=True):
        # Several series per GPU (pod labels change, both DCGM names): keep the largest value (fmax: a NaN
        # loses to a number).
        np.fmax.at(column, cell.index * n_times + cell.slot, cell.value)
    present = (~np.isnan(values)).any(axis=0).astype(np.int64)
    return grid_frame(keys, np.tile(times, n_gpus), names=list(cells), values=values, present=present)


def grid_frame(
    keys: Mapping[str, Any],
    timestamps: npt.NDArray[np.float64],
    *,
    names: Sequence[str],
    values: npt.NDArray[np.float64],
    present: npt.NDArray[np.int64],
) -> pd.DataFrame:
    """The frame: `keys`, timestamp, a column per name (a row of `values`), present. The samples are not
    copied: pandas keeps float columns as one (columns x rows) block, which `values` already is."""
    frame = pd.DataFrame(values.T, columns=list(names), copy=False)
    for position, (key, column) in enumerate(keys.items()):
        frame.insert(position, key, column)
    frame.insert(len(keys), "timestamp", timestamps)
    frame["present"] = present
    return frame
