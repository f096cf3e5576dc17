"""The recorded path's reads: series at a few instants, one query per series for the whole fleet.

Each read is one range query whose points are the instants asked for (a step that puts every instant on
the query's grid, or one query per hour-aligned group of instants where none does cheaply), and its
answer lands in a dense array, a row per GPU (numbered in `gpus` as first seen, across every read of a
cycle) and a column per instant. Memory is the GPUs times the instants of the one series being read:
what a cycle keeps is the caller's choice (`recorded_reader` keeps the instants' values and sums).

Two kinds of series:

- a recorded series (`recorded`): the rules' value for grid instant `g` is written by the evaluation in
  `[g, g + step)`, whatever the group's phase, so `g` is read as the last value of `[g, g + step - 1ms]`
  (`last_over_time` at `g + step - 1ms`);
- an exporter's field (`raw`): its value at `g` as the raw path reads it (`Reader.read`: the selector at
  `g`, Prometheus' look-back delta), under both DCGM names; several series of a GPU keep the largest.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from app.predict import features, range_answers
from app.predict.prometheus import PrometheusUnavailable, Reader
from app.predict.promql import HostRef, host_ref, selector

Array = npt.NDArray[np.float64]
Identity = tuple[str, int, str]
BY = ", ".join((*features.HOST_COLUMNS, "gpu", "UUID", "uuid"))
HOUR_S = 3600.0
_MS = 0.001


@dataclass(slots=True)
class InstantReads:
    """A cycle's reads at instants; `gpus` numbers every GPU any of them saw, `refs` their hosts."""

    reader: Reader
    gpus: dict[Identity, int] = field(default_factory=dict)
    refs: dict[str, HostRef] = field(default_factory=dict)
    points: int = 0

    def recorded(self, name: str, times: Sequence[float]) -> Array:
        ahead = self.reader.settings.step_s - _MS
        query = f"max by ({BY}) (last_over_time({name}[{round(ahead * 1000)}ms]))"
        return self._at(query, times, shift=ahead)

    def raw(self, metric: str, times: Sequence[float]) -> Array:
        # Hosts are remembered from the presence field's read: every GPU has it, and a label lookup per
        # series of every read would cost as much as parsing them (a GPU first seen later, without it,
        # makes `recorded_reader` look its host up).
        return self._at(selector(metric), times, shift=0.0, remember=metric == features.GPU_TEMP)

    def _at(self, query: str, times: Sequence[float], *, shift: float, remember: bool = False) -> Array:
        """(GPUs seen so far, len(times)): the query's value per GPU at each time (NaN where none)."""
        columns = {round(t, 3): i for i, t in enumerate(times)}
        parts: list[tuple[Array, list[int]]] = []
        for start, step, n in lattices(times):
            answer = self.reader.query_range(
                query, _utc(start + shift), _utc(start + shift + step * (n - 1)), step_s=step
            )
            if remember:
                self._remember(answer)
            try:
                cells = range_answers.parse(answer, self.gpus, grid_start=start + shift, step=step, n_times=n)
            except range_answers.Malformed as exc:
                raise PrometheusUnavailable(str(exc), query=query) from exc
            del answer
            dense = np.full((len(self.gpus), n), np.nan)
            np.fmax.at(dense, (cells.index, cells.slot), cells.value)
            self.points += len(cells.value)
            wanted = [
                (slot, columns[t]) for slot in range(n) if (t := round(start + step * slot, 3)) in columns
            ]
            parts.append((dense[:, [s for s, _ in wanted]], [c for _, c in wanted]))
        out = np.full((len(self.gpus), len(times)), np.nan)
        for dense, cols in parts:
            out[: len(dense), cols] = dense
        return out

    def _remember(self, answer: Sequence[Mapping[str, Any]]) -> None:
        for one in answer:
            labels = one.get("metric", {}) if isinstance(one, Mapping) else {}
            ref = host_ref(labels) if isinstance(labels, Mapping) else None
            if ref is not None and ref.node not in self.refs:
                self.refs[ref.node] = ref


def lattices(times: Sequence[float]) -> list[tuple[float, float, int]]:
    """(start, step, points) of range queries whose points include every time: one, on the step of the
    times' common spacing, where that adds at most as many points as there are times; else one per group
    of times an hour apart (the hourly reads), each such group one query."""
    ordered = sorted(set(times))
    if len(ordered) == 1:
        return [(ordered[0], HOUR_S, 1)]
    step = _spacing(ordered)
    n = round((ordered[-1] - ordered[0]) / step) + 1
    if n <= 2 * len(ordered):
        return [(ordered[0], step, n)]
    groups: dict[float, list[float]] = {}
    for t in ordered:
        groups.setdefault(round(t % HOUR_S, 3), []).append(t)
    if len(groups) == 1:  # an hour apart but sparse: one point per time
        return [(t, HOUR_S, 1) for t in ordered]
    return [one for group in groups.values() for one in lattices(group)]


def _spacing(ordered: Sequence[float]) -> float:
    """The largest step (to the millisecond) every gap between the times is a multiple of."""
    ms = [round((b - a) * 1000) for a, b in itertools.pairwise(ordered)]
    return math.gcd(*ms) / 1000.0


def pad(values: Array, rows: int) -> Array:
    """`values` with NaN rows appended for the GPUs first seen by later reads."""
    if len(values) >= rows:
        return values
    return np.vstack([values, np.full((rows - len(values), values.shape[1]), np.nan)])


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
