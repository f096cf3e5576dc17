"""How the recorded path's reads put the instants they need on range queries' grids (`recorded_reads`)."""

from __future__ import annotations

import numpy as np

from app.predict import range_answers, recorded_reads
from app.predict import recorded_rules as rr

LAST = 1_800_000_000.0  # a grid instant (a multiple of 5 minutes)
HOUR = 3600.0


def _hours(tail_s: float) -> list[float]:
    instants = [LAST - tail_s, LAST]
    return sorted({t - k * HOUR for t in instants for k in range(rr.SHORT_HOURS)})


def _points(lattices: list[tuple[float, float, int]]) -> set[float]:
    return {start + step * i for start, step, n in lattices for i in range(n)}


def test_instants_an_hour_apart_are_one_query_at_an_hourly_step() -> None:
    times = _hours(HOUR)  # 7 hours: last - 6 h .. last
    assert recorded_reads.lattices(times) == [(LAST - 6 * HOUR, HOUR, 7)]


def test_a_half_hour_tail_is_one_query_at_half_an_hour() -> None:
    times = _hours(1800.0)  # 12 times, every point of the 30-minute grid from last - 5.5 h
    found = recorded_reads.lattices(times)
    assert found == [(LAST - 5.5 * HOUR, 1800.0, 12)]
    assert set(times) <= _points(found)


def test_a_tail_off_the_half_hour_is_one_hourly_query_per_group() -> None:
    # 25 minutes: a common 5-minute grid would cost 66 points for 12 times; two hourly queries cost 12.
    times = _hours(1500.0)
    found = recorded_reads.lattices(times)
    assert sorted(found) == [(LAST - 5 * HOUR - 1500.0, HOUR, 6), (LAST - 5 * HOUR, HOUR, 6)]
    assert _points(found) == set(times)


def test_two_instants_are_one_query_of_two_points_and_one_instant_one_point() -> None:
    assert recorded_reads.lattices([LAST, LAST - 1500.0]) == [(LAST - 1500.0, 1500.0, 2)]
    assert recorded_reads.lattices([LAST]) == [(LAST, HOUR, 1)]


def test_pad_adds_missing_rows_for_gpus_seen_later() -> None:
    values = np.array([[1.0, 2.0]])
    padded = recorded_reads.pad(values, 3)
    assert padded.shape == (3, 2)
    assert padded[0].tolist() == [1.0, 2.0]
    assert np.isnan(padded[1:]).all()


class _Answers:
    """A reader answering every range query with the series given for it (by the read's record name)."""

    client = None

    def __init__(self, series: dict[str, list[dict[str, object]]]) -> None:
        self.series = series
        self.queries: list[str] = []

    def query_range(
        self, query: str, start: object, end: object, *, step_s: float
    ) -> list[dict[str, object]]:
        self.queries.append(query)
        return next((answer for name, answer in self.series.items() if name in query), [])

    def range_samples(
        self, query: str, start: object, end: object, *, step_s: float
    ) -> range_answers.Samples:
        return range_answers.samples(self.query_range(query, start, end, step_s=step_s))


def _series(name: str, value: float, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": name, **labels}, "values": [[LAST + 300.0 - 0.001, str(value)]]}


def test_a_record_is_read_without_grouping_and_a_gpus_several_series_keep_the_largest() -> None:
    gpu = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-a"}
    answers = _Answers(
        {
            rr.SAMPLES: [_series(rr.SAMPLES, 2016.0, **gpu)],
            # Two rule evaluators (Thanos Ruler replicas) record the same GPU under their own labels.
            "gpu:x:increase1h": [
                _series("gpu:x:increase1h", 3.0, **gpu, rule_replica="a"),
                _series("gpu:x:increase1h", 5.0, **gpu, rule_replica="b"),
            ],
        }
    )
    reads = recorded_reads.InstantReads(answers, concurrent=1)  # type: ignore[arg-type]
    got = reads.run(
        [
            recorded_reads.recorded(rr.SAMPLES, [LAST], step_s=300.0),
            recorded_reads.recorded("gpu:x:increase1h", [LAST], step_s=300.0, sparse=True),
        ]
    )
    assert got[rr.SAMPLES].tolist() == [[2016.0]]
    assert got["gpu:x:increase1h"].tolist() == [[5.0]]
    assert reads.gpus == {("n1", 0, "GPU-a"): 0}
    assert all(not query.startswith("max by") for query in answers.queries)


def test_every_records_series_of_a_gpu_is_one_identity_whatever_the_records_name() -> None:
    gpu = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-a"}
    names = [f"gpu:x{i}:increase1h" for i in range(5)]
    reads = recorded_reads.InstantReads(_Answers({n: [_series(n, 1.0, **gpu)] for n in names}), concurrent=1)  # type: ignore[arg-type]
    reads.run([recorded_reads.recorded(n, [LAST], step_s=300.0) for n in names])
    assert len(reads.identities) == 1  # one per GPU, not one per GPU and record


def test_an_exporters_field_is_still_grouped_to_the_gpus_labels() -> None:
    read = recorded_reads.raw("DCGM_FI_DEV_GPU_TEMP", [LAST])
    assert read.query.startswith(f"max by ({recorded_reads.BY})")
    assert recorded_reads.recorded("gpu:x:increase1h", [LAST], step_s=300.0).query.startswith(
        "last_over_time("
    )
