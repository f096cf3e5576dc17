"""A range answer's body decoded into columns (`range_json.decode`) against the plain way (`json.loads`,
then `range_answers.samples`): the same labels, counts, times and values for whatever Prometheus (or a
store speaking its API) can send, across the decoder's batches; and an answer that is not a matrix is
`Malformed`, never a crash and never an empty answer."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.predict import range_answers, range_json
from app.predict.features import HOST_COLUMNS

T0 = 1_740_960_000


def body(result: Any, **more: Any) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}, **more}
    ).encode()


def plain(raw: bytes) -> range_answers.Samples:
    return range_answers.samples(json.loads(raw)["data"]["result"])


def naming(labels: Any) -> dict[str, Any]:
    """The labels that name a GPU and its host: all a decoded answer keeps (`range_answers.GpuNames`)."""
    by_name = range_answers.mapping(labels) or {}
    return {k: v for k, v in by_name.items() if k in range_answers.GpuNames.__struct_fields__}


def assert_same(got: range_answers.Samples, want: range_answers.Samples) -> None:
    assert [naming(x) for x in got.labels] == [naming(x) for x in want.labels]
    assert got.counts.tolist() == want.counts.tolist()
    np.testing.assert_array_equal(got.times, want.times)
    np.testing.assert_array_equal(got.values, want.values)  # NaN equal to NaN; -0.0 equal to 0.0


# What a value can be: Prometheus' own spellings, numbers, and strings `float()` reads that msgspec does not.
_TEXT = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "Inf", "0", "-0", "1e3", " 3.5 ", "1_000", ".5", "x", ""]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.17g}"),
)
_VALUE = st.one_of(_TEXT, st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6), st.none())
_LABELS = st.dictionaries(
    st.sampled_from(["Hostname", "gpu", "UUID", "__name__", "le"]),
    st.sampled_from(["n1", "0", "GPU-a", "+Inf", 'say "+Inf"', "ünï"]),
)
_SERIES = st.builds(
    lambda labels, points: {"metric": labels, "values": [[T0 + 300 * k, v] for k, v in points]},
    _LABELS,
    st.lists(st.tuples(st.integers(-2, 50), _VALUE), max_size=6),
)


@settings(max_examples=200, deadline=None)
@given(result=st.lists(_SERIES, max_size=6))
def test_a_body_decodes_to_what_the_plain_json_gives(result: list[dict[str, Any]]) -> None:
    raw = body(result)
    assert_same(range_json.decode(raw), plain(raw))


def test_values_read_as_prometheus_writes_them_without_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_json, "_plainly", None)  # calling it would fail the test
    labels = {"Hostname": "n1", "gpu": "0", "le": "+Inf"}
    values = [[T0, "NaN"], [T0 + 300, "+Inf"], [T0 + 600, "-Inf"], [T0 + 900, "52.25"], [T0 + 1200.5, "1e-3"]]
    got = range_json.decode(body([{"metric": labels, "values": values}]))
    assert got.labels == [range_answers.GpuNames(Hostname="n1", gpu="0")]  # "+Inf" in `le` is not read
    assert got.times.tolist() == [T0, T0 + 300, T0 + 600, T0 + 900, T0 + 1200.5]
    assert math.isnan(got.values[0])
    assert got.values[1:].tolist() == [math.inf, -math.inf, 52.25, 0.001]


def test_answers_larger_than_a_batch_keep_every_series_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_json, "BATCH", 3)
    result = [
        {"metric": {"gpu": str(i)}, "values": [[T0 + 300 * k, str(i * 10 + k)] for k in range(i % 4)]}
        for i in range(11)
    ]
    raw = body(result)
    got = range_json.decode(raw)
    assert got.counts.tolist() == [i % 4 for i in range(11)]
    assert_same(got, plain(raw))
    result[7]["values"][1][1] = " 3.5 "  # the fallback, from a later batch
    assert_same(range_json.decode(body(result)), plain(body(result)))


def test_an_empty_answer_and_series_without_values() -> None:
    assert range_json.decode(body([])).counts.tolist() == []
    got = range_json.decode(body([{"metric": {"gpu": "0"}}, {"metric": {"gpu": "1"}, "values": None}]))
    assert got.counts.tolist() == [0, 0]
    assert got.times.tolist() == []


@pytest.mark.parametrize(
    "raw",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"status": "error", "errorType": "bad_data", "error": "parse error"}',
        json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode(),
        body([{"metric": {"gpu": "0"}, "values": [[T0]]}]),
        body([{"metric": {"gpu": "0"}, "values": [[T0, "1", "2"]]}]),
        body([{"metric": {"gpu": "0"}, "values": [["later", "1"]]}]),
        body([{"metric": {"gpu": "0"}, "values": 7}]),
        body(["not a series"]),
        body({"not": "a list"}),
        b'{"status": "success"}',
        b"[1, 2]",
    ],
)
def test_what_is_not_a_range_answer_is_malformed(raw: bytes) -> None:
    with pytest.raises(range_answers.Malformed):
        range_json.decode(raw)


def test_prometheus_error_message_is_kept() -> None:
    with pytest.raises(range_answers.Malformed, match="parse error"):
        range_json.decode(b'{"status": "error", "errorType": "bad_data", "error": "parse error"}')


def test_the_decoded_names_are_every_label_a_gpu_or_host_is_named_by() -> None:
    assert set(range_answers.GpuNames.__struct_fields__) == {*HOST_COLUMNS, "gpu", "UUID", "uuid"}


def test_a_naming_label_that_is_not_a_string_names_no_gpu_and_breaks_nothing() -> None:
    raw = body(
        [
            {"metric": {"Hostname": "n1", "gpu": 5}, "values": [[T0, "1"]]},
            {"metric": {"Hostname": ["n1"], "gpu": "1"}, "values": [[T0, "2"]]},
            {"metric": {"Hostname": "n1", "gpu": "2", "UUID": "GPU-c"}, "values": [[T0, "3"]]},
        ]
    )
    gpus: dict[tuple[str, int, str], int] = {}
    cells = range_answers.parse(range_json.decode(raw), gpus, grid_start=T0, step=300.0, n_times=1)
    assert gpus == {("n1", 2, "GPU-c"): 0}
    assert cells.value.tolist() == [3.0]
