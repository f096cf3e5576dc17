"""The reader's vectorised parsing and the window's in-place regridding, against canned range answers.

What matters: every value Prometheus can send reads as `float()` reads it ("NaN", "+Inf", numbers); several
series of one GPU keep the largest value; samples off the read's grid are dropped; a sample that is not a
[time, value] pair is a typed error; and a window refreshed by appending new steps is the same frame as one
re-gridded whole (`_fill_grid`, what a reader whose frames are not grids still gets).
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.predict import features as f
from app.predict import prometheus, promql, recent_window

T0 = 1_740_960_000  # on the 5-minute grid
STEP = 300


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def labels(node: str = "n1", gpu: int = 0, **more: str) -> dict[str, str]:
    return {"Hostname": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", **more}


class Canned:
    """A range client answering every query with the same series, cut to [start, end]."""

    def __init__(self, series: list[dict[str, Any]]) -> None:
        self.series = series

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> list[dict[str, Any]]:
        return self.series


def read(series: list[dict[str, Any]], start: float, end: float) -> pd.DataFrame:
    settings = prometheus.ReaderSettings(step_s=STEP, metrics=(f.GPU_TEMP,))
    return prometheus.Reader(settings, client=Canned(series)).read(at(start), at(end))


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("52", 52.0),
        ("NaN", math.nan),
        ("+Inf", math.inf),
        ("-Inf", -math.inf),
        ("1e3", 1000.0),
        ("-0.25", -0.25),
        (7, 7.0),
        (2.5, 2.5),
        ("not a number", math.nan),
        (None, math.nan),
    ],
)
def test_values_read_as_float_reads_them(sent: Any, expected: float) -> None:
    frame = read([{"metric": labels(), "values": [[T0, sent], [T0 + STEP, "1"]]}], T0, T0 + STEP)
    got = frame[f.GPU_TEMP].to_numpy()
    assert got[1] == 1.0
    assert got[0] == expected or (math.isnan(expected) and math.isnan(got[0]))
    assert frame["present"].tolist() == [0 if math.isnan(expected) else 1, 1]


def test_strings_parse_exactly_as_float_does() -> None:
    rng = np.random.default_rng(1)
    numbers = np.concatenate(
        [rng.normal(0, 1e6, 500), rng.random(500) * 1e-300, [5e-324, 1.7976931348623157e308]]
    )
    texts = (
        [repr(float(x)) for x in numbers] + [f"{x:.17g}" for x in numbers] + [" 3.5 ", "1_000", "inf", "-nan"]
    )
    times = [T0 + STEP * i for i in range(len(texts))]
    frame = read(
        [{"metric": labels(), "values": [[t, s] for t, s in zip(times, texts, strict=True)]}],
        T0,
        times[-1],
    )
    expected = np.array([float(s) for s in texts])
    np.testing.assert_array_equal(frame[f.GPU_TEMP].to_numpy(), expected)


def test_several_series_of_a_gpu_keep_the_largest_value() -> None:
    frame = read(
        [
            {"metric": labels(pod="a"), "values": [[T0, "1"], [T0 + STEP, "NaN"], [T0 + 2 * STEP, "5"]]},
            {"metric": labels(pod="b"), "values": [[T0, "3"], [T0 + STEP, "2"], [T0 + 2 * STEP, "NaN"]]},
            {"metric": labels(gpu=1), "values": [[T0 + STEP, "9"]]},
        ],
        T0,
        T0 + 2 * STEP,
    )
    assert frame[["gpu", "timestamp"]].values.tolist() == [
        [g, T0 + k * STEP] for g in (0, 1) for k in range(3)
    ]
    assert frame[f.GPU_TEMP].tolist()[:3] == [3.0, 2.0, 5.0]
    assert frame["present"].tolist() == [1, 1, 1, 0, 1, 0]


def test_samples_off_the_grid_are_dropped_or_rounded_to_their_step() -> None:
    values = [[T0 - STEP, "1"], [T0 + 1.5, "2"], [T0 + STEP - 0.5, "3"], [T0 + 5 * STEP, "4"]]
    frame = read([{"metric": labels(), "values": values}], T0, T0 + 2 * STEP)
    assert frame["timestamp"].tolist() == [T0, T0 + STEP, T0 + 2 * STEP]
    assert frame[f.GPU_TEMP].tolist()[:2] == [2.0, 3.0]
    assert math.isnan(frame[f.GPU_TEMP].iloc[2])


def test_series_without_a_gpu_or_samples_are_skipped() -> None:
    frame = read(
        [
            {"metric": {"Hostname": "n1"}, "values": [[T0, "1"]]},
            {"metric": labels(gpu=2), "values": []},
            {"metric": labels(gpu=3), "values": [[T0, "7"]]},
        ],
        T0,
        T0,
    )
    assert frame["gpu"].tolist() == [3]
    assert frame[f.GPU_TEMP].tolist() == [7.0]


@pytest.mark.parametrize("sample", [[T0], [T0, "1", "2"], ["later", "1"]])
def test_a_sample_that_is_not_a_time_value_pair_is_a_typed_error(sample: list[Any]) -> None:
    with pytest.raises(prometheus.PrometheusUnavailable) as caught:
        read([{"metric": labels(), "values": [[T0 + STEP, "1"], sample]}], T0, T0 + STEP)
    assert caught.value.query == promql.selector(f.GPU_TEMP)


# -- the window -------------------------------------------------------------------------------------------


class Fleet:
    """Range answers for GPUs that come and go, with outages where no GPU reports."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        self.gpus = [
            (
                f"n{i // 4}",
                i % 4,
                rng.choice([None, None, rng.randrange(0, 60) * STEP]),
                rng.choice([None, None, rng.randrange(0, 60) * STEP]),
            )
            for i in range(rng.randrange(1, 9))
        ]
        self.outages = {rng.randrange(0, 60) * STEP for _ in range(4)}

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> list[dict[str, Any]]:
        lo, hi = int(start_time.timestamp()), int(end_time.timestamp())
        out = []
        for node, gpu, born, dies in self.gpus:
            values = [
                [t, str(random.Random(f"{self.seed}{query}{node}{gpu}{t}").choice(["NaN", "1", "2.5", "40"]))]
                for t in range(lo, hi + 1, STEP)
                if (born is None or t - T0 >= born)
                and (dies is None or t - T0 < dies)
                and t - T0 not in self.outages
            ]
            if values:
                out.append({"metric": labels(node, gpu), "values": values})
        return out


class Backwards(prometheus.Reader):
    """A reader whose frames have each GPU's rows latest first: not grids, so the window re-grids whole."""

    def read(self, start: datetime, end: datetime, **kwargs: Any) -> pd.DataFrame:
        frame = super().read(start, end, **kwargs)
        order = frame.groupby(["node", "gpu", "uuid"], sort=False).ngroup()
        frame = frame.assign(order=order).sort_values(["order", "timestamp"], ascending=[True, False])
        return frame.drop(columns="order").reset_index(drop=True)


@pytest.mark.parametrize("seed", range(12))
def test_a_window_extended_step_by_step_is_the_window_regridded_whole(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    regridded: list[int] = []
    fill_grid = recent_window._fill_grid

    def counting(frame: pd.DataFrame) -> pd.DataFrame:
        regridded.append(len(frame))
        return fill_grid(frame)

    monkeypatch.setattr(recent_window, "_fill_grid", counting)
    rng = random.Random(seed)
    settings = prometheus.ReaderSettings(
        step_s=STEP, lookback_s=rng.choice([3, 10]) * STEP + rng.choice([0, 120]), metrics=(f.GPU_TEMP, f.XID)
    )
    fleet = Fleet(seed)
    fast = recent_window.RecentWindow(prometheus.Reader(settings, client=fleet))
    whole = recent_window.RecentWindow(Backwards(settings, client=fleet))
    now = T0 + rng.randrange(0, 10) * STEP
    slow = 0
    for _ in range(20):
        got = fast.refresh(at(now))
        assert not any(regridded), "a grid read must extend the window, not re-grid it"
        expected = whole.refresh(at(now))
        slow += sum(1 for rows in regridded if rows)
        regridded.clear()
        # The re-gridded window's names may turn `object` after an empty read; the values are the same.
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, check_exact=True)
        assert got["present"].dtype == np.int64
        now += rng.choice([0, STEP, STEP, 2 * STEP, 5 * STEP, 40 * STEP, 17])
    assert slow, "the backwards reader's window re-grids"


def test_a_gpu_first_seen_later_is_missing_before() -> None:
    series = [{"metric": labels(gpu=0), "values": [[T0 + k * STEP, "50"] for k in range(-6, 3)]}]
    client = Canned(series)
    settings = prometheus.ReaderSettings(step_s=STEP, lookback_s=4 * STEP, metrics=(f.GPU_TEMP,))
    window = recent_window.RecentWindow(prometheus.Reader(settings, client=client))
    window.refresh(at(T0))
    client.series = [*series, {"metric": labels(gpu=1), "values": [[T0 + STEP, "60"], [T0 + 2 * STEP, "61"]]}]
    frame = window.refresh(at(T0 + 2 * STEP))
    assert frame[["gpu", "timestamp", "present"]].values.tolist() == [
        [g, T0 + k * STEP, int(g == 0 or k > 0)] for g in (0, 1) for k in range(-2, 3)
    ]
    assert frame[f.GPU_TEMP].tolist()[5:] == pytest.approx([math.nan] * 3 + [60.0, 61.0], nan_ok=True)
