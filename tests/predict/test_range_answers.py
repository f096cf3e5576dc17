"""A range answer parsed onto the grid: the GPUs numbered as first seen, with and without the cache of
label sets the recorded path keeps across a cycle's reads (`identities`), and the answers Prometheus
sends that are not a GPU's (no `gpu` label, a node not wanted, a series without points)."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.predict import range_answers

START, STEP = 1_000.0, 300.0


def _series(labels: dict[str, str], *values: tuple[float, str]) -> dict[str, Any]:
    return {"metric": dict(labels), "values": [[t, v] for t, v in values]}


def _parse(answer: list[dict[str, Any]], gpus: dict[Any, int], **kw: Any) -> range_answers.Cells:
    return range_answers.parse(
        range_answers.samples(answer), gpus, grid_start=START, step=STEP, n_times=3, **kw
    )


def test_gpus_are_numbered_as_first_seen_and_a_records_name_does_not_split_a_gpu() -> None:
    gpus: dict[Any, int] = {}
    cache: dict[range_answers.LabelKey, int] = {}
    a = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-a"}
    b = {"Hostname": "n1", "gpu": "1", "UUID": "GPU-b"}
    first = _parse([_series(b, (START, "1")), _series(a, (START, "2"))], gpus, identities=cache)
    again = _parse(
        [_series({"__name__": "gpu:x:increase1h", **a}, (START + STEP, "3"))], gpus, identities=cache
    )
    assert gpus == {("n1", 1, "GPU-b"): 0, ("n1", 0, "GPU-a"): 1}
    assert first.index.tolist() == [0, 1]
    assert again.index.tolist() == [1]
    assert again.slot.tolist() == [1]
    assert again.value.tolist() == [3.0]
    assert len(cache) == 2  # the record's name is not part of the key


def test_series_that_name_no_gpu_or_an_unwanted_node_or_have_no_points_are_left_out_unnumbered() -> None:
    gpus: dict[Any, int] = {}
    cache: dict[range_answers.LabelKey, int] = {}
    answer = [
        _series({"Hostname": "n1", "UUID": "GPU-x"}, (START, "1")),  # no gpu label
        _series({"Hostname": "n2", "gpu": "0", "UUID": "GPU-y"}, (START, "1")),  # not a wanted node
        _series({"Hostname": "n1", "gpu": "3", "UUID": "GPU-z"}),  # no points
        _series({"instance": "n1:9400", "gpu": "2", "UUID": "GPU-w"}, (START, "4")),
    ]
    for _ in range(2):  # the second time from the cache
        cells = _parse(copy.deepcopy(answer), gpus, nodes={"n1"}, identities=cache)
        assert gpus == {("n1", 2, "GPU-w"): 0}
        assert cells.index.tolist() == [0]
        assert cells.value.tolist() == [4.0]
    assert sorted(cache.values()) == [-1, -1, 0]  # the series without points never reached the cache


def test_values_as_prometheus_writes_them_and_samples_off_the_grid() -> None:
    gpu = {"Hostname": "n1", "gpu": "0"}
    cells = _parse(
        [_series(gpu, (START - STEP, "9"), (START, "NaN"), (START + STEP, "+Inf"), (START + 2 * STEP, "x"))],
        {},
    )
    assert cells.slot.tolist() == [0, 1, 2]  # the sample before the grid is dropped
    assert math.isnan(cells.value[0])
    assert cells.value[1] == math.inf
    assert math.isnan(cells.value[2])


def test_a_sample_that_is_not_a_pair_is_malformed() -> None:
    with pytest.raises(range_answers.Malformed):
        _parse([{"metric": {"Hostname": "n1", "gpu": "0"}, "values": [[START, "1", "2"]]}], {})


_LABELS = st.fixed_dictionaries(
    {"Hostname": st.sampled_from(["n1", "n2"]), "gpu": st.sampled_from(["0", "1", "x"])},
    optional={"UUID": st.sampled_from(["GPU-a", "GPU-b"]), "__name__": st.sampled_from(["r1", "r2"])},
)
_ANSWER = st.lists(
    st.tuples(_LABELS, st.lists(st.tuples(st.integers(-1, 3), st.floats(-5, 5)), max_size=3)), max_size=8
)


@settings(max_examples=60, deadline=None)
@given(answers=st.lists(_ANSWER, min_size=1, max_size=3))
def test_the_cache_gives_what_reading_every_series_labels_gives(answers: list[Any]) -> None:
    plain: dict[Any, int] = {}
    cached: dict[Any, int] = {}
    cache: dict[range_answers.LabelKey, int] = {}
    for answer in answers:
        series = [
            _series(labels, *((START + k * STEP, repr(v)) for k, v in points)) for labels, points in answer
        ]
        want = _parse(copy.deepcopy(series), plain)
        got = _parse(series, cached, identities=cache)
        assert cached == plain
        for name in ("index", "slot", "value"):
            assert np.array_equal(getattr(got, name), getattr(want, name))
