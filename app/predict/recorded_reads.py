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

What a cycle costs is mostly Prometheus evaluating each read over every GPU's series (at 1,000 nodes its
CPU is ~4x Sickbay's, and a sparse read that answers no series costs it about as much as a dense one),
then Sickbay parsing each series answered with its labels (about 5 µs a series, of which JSON 2 µs and
the labels' identity 1 µs). Grouping was most of Prometheus' share (8,000 GPUs, one record at 12
instants: 170 ms of its CPU with `max by`, 60 ms without, Prometheus 2.42), so only a dense read of an
exporter's field groups to the labels naming the GPU (`max by (BY)`: its series carry a dozen exporter
labels, and a GPU may have several). A record is read as it is: the rules already keep only those labels,
and where a record has several series for one GPU (Thanos Ruler replicas, each with its own external
labels) they name the same GPU and Sickbay keeps the largest, as `max by` would; so does a sparse field's
few series. The labels' identity is computed once per label set, the metric's name aside
(`InstantReads.identities`); a *sparse* read answers only the GPUs where it is not 0 (an event counter is
0 on almost every GPU); a field a GPU does not export must stay missing, not read as 0, so one read per
field says which GPUs have it: a dense read of one of its records (`recorded_reader`), or for an
exporter's field read sparse the UUIDs of its series (`recorded_lacking`; where they cannot say, its
`lacking_raw` read, sparse too, the GPUs without it). Up to `CONCURRENT`
queries are in flight while the answers are parsed, in the order asked, so GPUs are numbered the same
every time.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from app.predict import features, range_answers
from app.predict.prometheus import Reader
from app.predict.promql import HostRef, host_ref, selector

Array = npt.NDArray[np.float64]
Identity = tuple[str, int, str]
BY = ", ".join((*features.HOST_COLUMNS, "gpu", "UUID", "uuid"))
HOUR_S = 3600.0
# Queries in flight while one answer is parsed: Prometheus answers the next ones on another core. More
# buys nothing on the 2 cores measured (`docs/benchmarks.md`) and keeps more answers in memory at once.
CONCURRENT = 3
# The answers held at once, in dense two-point reads' worth (`_weight`): at 80,000 GPUs ~80 MB each as
# JSON objects, the larger part of a cycle's peak memory (docs/benchmarks.md).
HELD = 2
LACKING = "lacking:"  # the name of a field's `lacking_raw` read
HAS = "has:"  # the name of a dense read of a record, apart from its sparse read, for the GPUs with its field
_MS = 0.001


@dataclass(frozen=True, slots=True)
class Read:
    """One series for the whole fleet at `times`: its PromQL (labels already projected to `BY`), the
    shift from a grid instant to the time its value is read at, and whether it is sparse (a GPU the
    answer leaves out reads 0)."""

    name: str
    query: str
    times: tuple[float, ...]
    shift: float = 0.0
    sparse: bool = False


def recorded(
    record: str, times: Sequence[float], *, step_s: float, sparse: bool = False, name: str | None = None
) -> Read:
    """A record's value at each grid instant (the last one written in `[g, g + step)`), read as `name`
    (the record's by default); `sparse`: only its non-zero values are sent, a GPU left out reads 0 (a
    dense read of one of the field's records says which GPUs have none: `recorded_reader`)."""
    query = _last(record, step_s)
    return Read(
        name or record, f"{query} != 0" if sparse else query, tuple(times), shift=step_s - _MS, sparse=sparse
    )


def raw(metric: str, times: Sequence[float], *, sparse: bool = False) -> Read:
    """An exporter's field at each instant, under both DCGM names (several series of a GPU: the largest);
    `sparse`: only its non-zero values are sent, a GPU left out reads 0 (`recorded_lacking`)."""
    # Sparse, the few series sent are grouped here instead (`_dense` keeps a GPU's largest), which costs
    # Prometheus 40 ms against 70 ms at 8,000 GPUs; dense, grouping keeps the answer to the GPU's labels.
    query = f"{selector(metric)} != 0" if sparse else _max(selector(metric))
    return Read(metric, query, tuple(times), sparse=sparse)


def lacking_raw(metric: str, times: Sequence[float]) -> Read:
    """1 for each GPU with a temperature but no `metric` sample, else 0."""
    # `group`, and the field's series as they are (`unless on` matches on the labels named): 130 ms of
    # Prometheus' CPU against 220 ms with `max by` on both sides, 8,000 GPUs.
    query = f"group by ({BY}) ({selector(features.GPU_TEMP)}) unless on ({BY}) {selector(metric)}"
    return Read(LACKING + metric, query, tuple(times), sparse=True)


def expression(name: str, query: str, times: Sequence[float]) -> Read:
    """Any PromQL whose series name GPUs by `BY`, at the instants."""
    return Read(name, query, tuple(times))


def _max(vector: str) -> str:
    return f"max by ({BY}) ({vector})"


def _last(record: str, step_s: float) -> str:
    return f"last_over_time({record}[{round((step_s - _MS) * 1000)}ms])"


@dataclass(slots=True)
class InstantReads:
    """A cycle's reads at instants; `gpus` numbers every GPU any of them saw, `refs` their hosts."""

    reader: Reader
    gpus: dict[Identity, int] = field(default_factory=dict)
    refs: dict[str, HostRef] = field(default_factory=dict)
    points: int = 0
    concurrent: int = CONCURRENT
    # Each label set's number in `gpus` (names then values; -1: no GPU): every answer names the same GPUs.
    identities: dict[range_answers.LabelKey, int] = field(default_factory=dict)

    def run(self, reads: Sequence[Read], *, remember: str | None = None) -> dict[str, Array]:
        """Each read's (GPUs seen so far, len(times)) values (NaN where none), by name; the hosts of the
        read named `remember` are kept in `refs`."""
        parts = [(read, lattice) for read in reads for lattice in lattices(read.times)]
        out: dict[str, list[tuple[Array, list[int]]]] = {read.name: [] for read in reads}
        with range_answers.collector_paused():
            for (read, (start, step, n)), answer in zip(parts, self._answers(parts), strict=True):
                if read.name == remember:
                    self._remember(answer)
                out[read.name].append(self._dense(read, answer, start=start, step=step, n=n))
        # Each read's parts let go as its columns are made: a cycle's arrays are held once, not twice.
        return {read.name: self._columns(read, out.pop(read.name)) for read in reads}

    def _answers(
        self, parts: Sequence[tuple[Read, tuple[float, float, int]]]
    ) -> Iterator[range_answers.Samples]:
        """The answers in the order asked, up to `concurrent` queries in flight and `HELD` dense two-point
        reads' worth of answers waiting.

        An answer held costs memory in proportion to its series times its points (a 12-point hourly read
        at 80,000 GPUs is ~190 MB of JSON objects), so a dense query's weight is its points plus one (its
        labels) and a sparse one's 1 (it answers the few GPUs where a count is not 0); the next query is
        asked only while the weights waiting stay within the budget (one query at least); the answer being
        parsed is let go before more are asked."""
        _ = self.reader.client  # connect once, on this thread
        budget = HELD * _weight(2)
        with ThreadPoolExecutor(
            max_workers=max(1, self.concurrent), thread_name_prefix="recorded-read"
        ) as pool:
            pending: deque[tuple[Future[range_answers.Samples], int]] = deque()
            following = 0

            def top_up() -> None:
                nonlocal following
                while following < len(parts):
                    read, (start, step, n) = parts[following]
                    weight = 1 if read.sparse else _weight(n)
                    if pending and sum(w for _, w in pending) + weight > budget:
                        return
                    pending.append((pool.submit(self._query, read, start, step, n), weight))
                    following += 1

            try:
                top_up()
                while pending:
                    answer = pending.popleft()[0].result()
                    yield answer
                    del answer
                    top_up()
            finally:
                for future, _ in pending:
                    future.cancel()

    def _query(self, read: Read, start: float, step: float, n: int) -> range_answers.Samples:
        lo = start + read.shift
        return self.reader.range_samples(read.query, _utc(lo), _utc(lo + step * (n - 1)), step_s=step)

    def _dense(
        self, read: Read, answer: range_answers.Samples, *, start: float, step: float, n: int
    ) -> tuple[Array, list[int]]:
        columns = {round(t, 3): i for i, t in enumerate(read.times)}
        cells = range_answers.parse(
            answer,
            self.gpus,
            grid_start=start + read.shift,
            step=step,
            n_times=n,
            identities=self.identities,
        )
        dense = np.full((len(self.gpus), n), np.nan)
        np.fmax.at(dense, (cells.index, cells.slot), cells.value)
        if read.sparse:  # a GPU left out of the answer is 0; one answered NaN has no value
            answered = np.zeros(dense.shape, dtype=bool)
            answered[cells.index, cells.slot] = True
            dense[~answered] = 0.0
        self.points += len(cells.value)
        wanted = [(slot, columns[t]) for slot in range(n) if (t := round(start + step * slot, 3)) in columns]
        if len(wanted) == n:  # every point of the query is an instant asked for: no copy
            return dense, [c for _, c in wanted]
        return dense[:, [s for s, _ in wanted]], [c for _, c in wanted]

    def _columns(self, read: Read, parts: Sequence[tuple[Array, list[int]]]) -> Array:
        if len(parts) == 1:  # one query, usually over every GPU already seen: its array as it is
            dense, cols = parts[0]
            if dense.shape == (len(self.gpus), len(read.times)) and cols == list(range(len(read.times))):
                return dense
        out = np.full((len(self.gpus), len(read.times)), np.nan)
        for dense, cols in parts:
            out[: len(dense), cols] = dense
            if read.sparse:  # GPUs first seen by a later read were not in this answer either
                out[len(dense) :, cols] = 0.0
        return out

    def _remember(self, answer: range_answers.Samples) -> None:
        for labels in answer.labels:
            by_name = range_answers.mapping(labels)
            ref = host_ref(by_name) if by_name is not None else None
            if ref is not None and ref.node not in self.refs:
                self.refs[ref.node] = ref


def _weight(points: int) -> int:
    return points + 1


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
