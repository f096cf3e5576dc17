"""Features on hand-built frames: rates, resets, last-XID semantics, missing fields, host spellings."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.predict import features as f
from app.predict.features import thermal

T0 = 1_740_960_000.0  # 2025-03-03T00:00:00Z
STEP = 300.0


def gpu_frame(
    n: int, *, node: str = "n1", gpu: int = 0, uuid: str = "GPU-a", **columns: object
) -> pd.DataFrame:
    """One GPU, `n` samples every 5 minutes; column values are scalars or sequences of length n."""
    body: dict[str, object] = {
        "node": node,
        "gpu": gpu,
        "uuid": uuid,
        "timestamp": T0 + STEP * np.arange(n),
        "present": 1,
    }
    body.update(columns)
    return pd.DataFrame(body)


def feature(table: pd.DataFrame, name: str, row: int = -1) -> float:
    return float(table[name].iloc[row])


def test_feature_list_is_complete_and_unique() -> None:
    assert len(f.FEATURES) == len(set(f.FEATURES))
    table = f.compute_features(gpu_frame(3, **{f.GPU_TEMP: 50}))
    assert list(table.columns) == [*f.KEY_COLUMNS, *f.FEATURES]


def test_sbe_rates_over_windows_and_acceleration() -> None:
    # 24 h flat at 1 error per 5 minutes (12/h), then the last hour at 10 per 5 minutes (120/h).
    n = 24 * 12 + 12 + 1
    increments = np.r_[0, np.full(24 * 12, 1), np.full(12, 10)]
    frame = gpu_frame(n, **{f.SBE_AGG: np.cumsum(increments)})
    table = f.compute_features(frame)
    assert feature(table, "sbe_rate_1h") == pytest.approx(120.0)
    # Against its own baseline: 180 errors in the last 6 h where the 19 h before (228 errors) predict 72.
    r = 6 / 19
    z = 2 * (math.sqrt(180 + 0.375) - math.sqrt(r * 228 + 0.375)) / math.sqrt(1 + r)
    # ... in standard deviations past the 3 a steady rate reaches by chance.
    assert feature(table, "sbe_surprise_6h_7d") == pytest.approx(z - 3.0, rel=1e-5)
    assert feature(table, "sbe_persistence_24h") == pytest.approx(1.0)
    assert feature(table, "sbe_accel_1h_6h") == pytest.approx(math.log(124) - math.log(34), rel=1e-5)
    # Steady rate: no acceleration.
    assert feature(table, "sbe_accel_6h_24h", row=24 * 12) == pytest.approx(0.0, abs=1e-6)


def test_rate_before_a_full_window_uses_the_time_covered() -> None:
    frame = gpu_frame(4, **{f.PCIE_REPLAY: [0, 10, 20, 30]})
    table = f.compute_features(frame)
    assert feature(table, "pcie_replay_rate_1h") == pytest.approx(30 / 15.0)  # per minute over 15 min
    assert math.isnan(feature(table, "pcie_replay_rate_1h", row=0))  # no time span yet


def test_counter_reset_counts_the_new_value_and_restarts_windows() -> None:
    # A volatile counter climbs, the node reboots (energy and SBE drop), then climbs again.
    sbe = [0, 100, 200, 300, 5, 15]
    energy = [0, 1e6, 2e6, 3e6, 1e5, 2e5]
    frame = gpu_frame(6, **{f.SBE_VOL: sbe, f.ENERGY: energy})
    table = f.compute_features(frame)
    # After the reset at row 4, windows start at the reset: 5 + 10 errors in the 10 minutes since.
    assert feature(table, "sbe_rate_1h") == pytest.approx(15 / (10 / 60))
    assert feature(table, "hours_since_reset") == pytest.approx(STEP / 3600)
    assert feature(table, "hours_since_reset", row=3) == pytest.approx(3 * STEP / 3600)
    # Before the reset the rate is the plain one.
    assert feature(table, "sbe_rate_1h", row=3) == pytest.approx(300 / 0.25)


def test_aggregate_counter_is_preferred_and_never_goes_negative() -> None:
    frame = gpu_frame(5, **{f.SBE_VOL: [0, 5, 1, 2, 3], f.SBE_AGG: [50, 55, 56, 57, 58]})
    table = f.compute_features(frame)
    rates = table["sbe_rate_1h"].to_numpy()
    assert np.all(rates[1:] >= 0)
    assert feature(table, "sbe_rate_1h") == pytest.approx(2 / (10 / 60))  # since the reset at row 2


def test_xid_gauge_counts_changes_to_a_new_value_not_the_value() -> None:
    # The last-XID gauge: 13 appears, stays (one event), clears, 13 again (a second event), 48, then 63.
    xids = [0, 0, 13, 13, 13, 0, 13, 48, 48, 63]
    table = f.compute_features(gpu_frame(len(xids), **{f.XID: xids}))
    assert feature(table, "xid_workload_events_24h") == 2
    assert feature(table, "xid_hardware_events_7d") == 1
    assert feature(table, "xid_ignore_events_24h") == 1


def test_an_xid_already_there_in_the_first_sample_is_not_an_event() -> None:
    table = f.compute_features(gpu_frame(3, **{f.XID: [79, 79, 79]}))
    assert feature(table, "xid_hardware_events_7d") == 0


def test_missing_fields_give_nan_not_zero() -> None:
    table = f.compute_features(gpu_frame(20, **{f.GPU_TEMP: 50.0}))
    for name in (
        "sbe_rate_1h",
        "pcie_replay_rate_1h",
        "nvlink_crc_rate_1h",
        "row_remap_pending",
        "xid_hardware_events_7d",
    ):
        assert table[name].isna().all(), name
    assert table["gpu_temp_vs_baseline_c"].notna().all()


def test_dcgm_blank_values_are_missing() -> None:
    blank = 9223372036854775794
    frame = gpu_frame(4, **{f.MEMORY_TEMP: [blank] * 4, f.GPU_TEMP: 50})
    table = f.compute_features(frame)
    assert table["mem_temp_vs_baseline_c"].isna().all()


@pytest.mark.parametrize("host", ["Hostname", "hostname", "kubernetes_node"])
def test_every_host_spelling_gives_the_same_features(host: str) -> None:
    values = {f.GPU_TEMP: np.linspace(40, 60, 30), f.SBE_AGG: np.arange(30) * 3, f.XID: [0] * 29 + [13]}
    reference = f.compute_features(gpu_frame(30, **values))
    renamed = gpu_frame(30, **values).rename(columns={"node": host})
    table = f.compute_features(renamed)
    pd.testing.assert_frame_equal(table[list(f.FEATURES)], reference[list(f.FEATURES)])
    assert set(table["node"].astype(str)) == {"n1"}


def test_instance_label_loses_its_port_and_upper_case_uuid_is_accepted() -> None:
    frame = gpu_frame(3, **{f.GPU_TEMP: 50}).rename(columns={"node": "instance", "uuid": "UUID"})
    frame["instance"] = "10.0.0.7:9400"
    table = f.compute_features(frame)
    assert set(table["node"].astype(str)) == {"10.0.0.7"}
    assert set(table["uuid"].astype(str)) == {"GPU-a"}


def test_dcgm_4_6_names_are_read_as_the_old_ones() -> None:
    old = gpu_frame(12, **{f.PCIE_REPLAY: np.arange(12) * 5, f.XID: [0] * 11 + [79]})
    new = old.rename(columns={f.PCIE_REPLAY: "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", f.XID: "DCGM_FI_DEV_XID_ERROR"})
    a, b = f.compute_features(old), f.compute_features(new)
    pd.testing.assert_frame_equal(a[list(f.FEATURES)], b[list(f.FEATURES)])


def test_temperature_against_own_baseline_and_peers() -> None:
    n = 7 * 24 * 12
    frames = []
    for gpu in range(4):
        temps = np.full(n, 55.0)
        if gpu == 2:
            temps[-12:] = 70.0  # the last hour, 15 degrees hotter than itself and its peers
        frames.append(
            gpu_frame(n, gpu=gpu, uuid=f"GPU-{gpu}", **{f.GPU_TEMP: temps, f.MEMORY_TEMP: temps + 5})
        )
    table = f.compute_features(pd.concat(frames, ignore_index=True), last_only=True).set_index("gpu")
    # Against itself: the last hour's mean minus the 7-day mean (which the last hour is part of).
    own = 15.0 - 15.0 * 12 / n
    assert table.loc[2, "gpu_temp_vs_baseline_c"] == pytest.approx(own, rel=1e-4)
    assert table.loc[2, "gpu_temp_vs_peers_c"] == pytest.approx(own, rel=1e-4)
    assert table.loc[0, "gpu_temp_vs_peers_c"] == pytest.approx(0.0)
    assert table.loc[2, "mem_gpu_temp_gap_vs_baseline_c"] == pytest.approx(0.0, abs=1e-4)


def test_temperature_residuals_discount_the_load() -> None:
    n = 3 * 24 * 12
    rng = np.random.default_rng(4)
    util = np.repeat(rng.choice([0.0, 50.0, 95.0], n // 36), 36)  # jobs come and go every 3 hours
    util[-12:] = 95.0
    healthy = 30.0 + 0.4 * util
    sick = healthy.copy()
    sick[-12:] += 10.0  # 10 degrees hotter than this GPU runs at the same load
    frames = [
        gpu_frame(n, uuid="GPU-ok", **{f.GPU_UTIL: util, f.GPU_TEMP: healthy}),
        gpu_frame(n, gpu=1, uuid="GPU-hot", **{f.GPU_UTIL: util, f.GPU_TEMP: sick}),
    ]
    table = f.compute_features(pd.concat(frames, ignore_index=True), last_only=True).set_index("uuid")
    assert table.loc["GPU-ok", "gpu_temp_vs_baseline_c"] == pytest.approx(0.0, abs=1e-3)
    assert table.loc["GPU-hot", "gpu_temp_vs_baseline_c"] == pytest.approx(10.0, abs=0.5)


def test_throttle_shares_read_the_bitmask() -> None:
    reasons = [0] * 6 + [0x20] * 3 + [0x40 | 0x8] * 3  # the last hour: half SW thermal, half HW thermal
    table = f.compute_features(gpu_frame(12, **{f.THROTTLE: reasons}))
    assert feature(table, "thermal_throttle_share_1h") == pytest.approx(0.5)
    assert feature(table, "hw_slowdown_share_1h") == pytest.approx(0.25)
    assert feature(table, "power_throttle_share_6h") == 0.0


def test_missing_samples_are_a_feature() -> None:
    present = [1] * 6 + [0] * 6
    temps = [50.0] * 6 + [np.nan] * 6
    table = f.compute_features(gpu_frame(12, present=present, **{f.GPU_TEMP: temps}))
    assert feature(table, "missing_share_1h") == pytest.approx(0.5)


def test_a_chronic_rate_is_not_a_change_against_the_gpus_own_baseline() -> None:
    n = 3 * 24 * 12
    chronic = gpu_frame(n, uuid="GPU-c", **{f.SBE_AGG: np.arange(n) * 5})  # 60/h for three days
    table = f.compute_features(chronic, last_only=True)
    assert feature(table, "sbe_rate_1h") == pytest.approx(60.0)
    assert feature(table, "sbe_surprise_6h_7d") == pytest.approx(0.0, abs=1e-5)
    assert feature(table, "sbe_accel_6h_24h") == pytest.approx(0.0, abs=1e-6)


def poisson_sbe_frame(per_h: np.ndarray, *, uuid: str, seed: int) -> pd.DataFrame:
    """One GPU's aggregate SBE counter with Poisson increments at `per_h` (one rate per 5-minute step)."""
    increments = np.random.default_rng(seed).poisson(per_h * STEP / 3600.0)
    return gpu_frame(len(per_h), uuid=uuid, **{f.SBE_AGG: np.cumsum(increments)})


@pytest.mark.parametrize("per_h", [0.1, 20.0, 100.0, 400.0])
def test_a_chronic_rate_reads_no_surprise_at_any_level(per_h: float) -> None:
    # A week at a steady Poisson rate, scored every 30 min over its last four days: each 6 h count is as
    # likely as the GPU's own rate says, whatever the level, so it stays inside the noise band: 0.
    n = 7 * 24 * 12
    frame = poisson_sbe_frame(np.full(n, per_h), uuid="GPU-c", seed=int(per_h * 10))
    table = f.compute_features(frame)
    scores = table["sbe_surprise_6h_7d"].to_numpy()[3 * 24 * 12 :: 6]
    assert len(scores) == 4 * 24 * 2
    assert float(np.mean(scores == 0.0)) >= 0.98
    assert scores.max() < 1.0


def test_a_step_up_reads_as_surprise_on_a_silent_and_on_a_chronic_gpu() -> None:
    # Three days at a rate, then the last 6 h at three times it (the chronic GPU) or 4/h (the silent one).
    n = 3 * 24 * 12 + 6 * 12
    chronic = np.r_[np.full(3 * 24 * 12, 100.0), np.full(6 * 12, 300.0)]
    silent = np.r_[np.zeros(3 * 24 * 12), np.full(6 * 12, 4.0)]
    for per_h, uuid in ((chronic, "GPU-c"), (silent, "GPU-s")):
        assert len(per_h) == n
        table = f.compute_features(poisson_sbe_frame(per_h, uuid=uuid, seed=1), last_only=True)
        assert feature(table, "sbe_surprise_6h_7d") > 3.0, uuid
    # The same 300/h with no change reads none: the level alone is not surprise.
    steady = f.compute_features(poisson_sbe_frame(np.full(n, 300.0), uuid="GPU-h", seed=2), last_only=True)
    assert feature(steady, "sbe_surprise_6h_7d") == 0.0


def test_surprise_is_clipped_and_missing_without_a_baseline_or_a_field() -> None:
    # A runaway (thousands of errors on a silent GPU) reads the clip (10 s.d., 7 past the noise band),
    # not an unbounded number.
    n = 24 * 12
    runaway = np.r_[np.zeros(n - 12), np.full(12, 1000.0)]
    table = f.compute_features(gpu_frame(n, **{f.SBE_AGG: np.cumsum(runaway)}))
    assert feature(table, "sbe_surprise_6h_7d") == pytest.approx(7.0)
    # Less history than the recent window itself: nothing to compare with.
    assert math.isnan(feature(table, "sbe_surprise_6h_7d", row=5 * 12))
    # No ECC field at all: missing (NaN), never zero.
    no_ecc = f.compute_features(gpu_frame(n, **{f.GPU_TEMP: 50.0}))
    assert no_ecc["sbe_surprise_6h_7d"].isna().all()
    assert no_ecc["sbe_rate_1h"].isna().all()


@pytest.mark.parametrize("empty_days", [0, 2, 6])
def test_grid_rows_without_samples_before_the_history_do_not_dilute_a_rate(empty_days: int) -> None:
    # A reader's grid (Prometheus, 7 days of look-back) carries NaN rows before a fleet's first sample:
    # 26 h of a chronic 150/h single-bit rate must read the same with or without them.
    history = 26 * 12
    counts = np.r_[np.full(empty_days * 24 * 12, np.nan), 400_000 + np.arange(history) * 12.5]
    present = np.r_[np.zeros(empty_days * 24 * 12, dtype=int), np.ones(history, dtype=int)]
    frame = gpu_frame(
        len(counts), uuid="GPU-c", present=present, **{f.SBE_AGG: counts, f.PCIE_REPLAY: counts / 1000}
    )
    table = f.compute_features(frame, last_only=True)
    assert feature(table, "sbe_rate_1h") == pytest.approx(150.0)
    assert feature(table, "sbe_surprise_6h_7d") == pytest.approx(0.0, abs=1e-5)
    assert feature(table, "sbe_accel_6h_24h") == pytest.approx(0.0, abs=1e-6)
    assert feature(table, "pcie_replay_vs_baseline_6h_7d") == pytest.approx(0.0, abs=1e-6)


def test_a_gap_inside_the_window_is_covered_by_the_increment_after_it() -> None:
    # 10/h for 10 h with a 2 h exporter gap in the middle: the counter kept counting through the gap,
    # and the 24 h rate is still 10/h (the increment after the gap spans it).
    n = 10 * 12 + 1
    counts = np.arange(n, dtype=float) * (10 / 12)
    counts[5 * 12 : 7 * 12] = np.nan
    frame = gpu_frame(n, uuid="GPU-g", **{f.SBE_AGG: counts})
    table = f.compute_features(frame, last_only=True)
    assert feature(table, "sbe_surprise_6h_7d") == pytest.approx(0.0, abs=1e-5)


def test_persistence_and_episodes_count_hours_and_bursts_not_errors() -> None:
    n = 2 * 24 * 12 + 1
    daily = np.zeros(n)
    daily[100::288] = 3000  # one big burst a day
    hourly = np.zeros(n)
    hourly[::12] = 1  # one replay every hour
    frame = pd.concat(
        [
            gpu_frame(n, uuid="GPU-d", **{f.PCIE_REPLAY: np.cumsum(daily)}),
            gpu_frame(n, gpu=1, uuid="GPU-h", **{f.PCIE_REPLAY: np.cumsum(hourly)}),
        ]
    )
    table = f.compute_features(frame, last_only=True).set_index("uuid")
    assert table.loc["GPU-d", "pcie_replay_persistence_24h"] == pytest.approx(1 / 24, abs=0.01)
    assert table.loc["GPU-h", "pcie_replay_persistence_24h"] == pytest.approx(1.0)
    assert table.loc["GPU-d", "pcie_replay_episodes_24h"] == 1
    assert table.loc["GPU-h", "pcie_replay_episodes_24h"] == 24


def test_link_errors_against_node_peers_cancel_a_noisy_node() -> None:
    n = 13
    noisy = [gpu_frame(n, gpu=g, uuid=f"GPU-{g}", **{f.PCIE_REPLAY: np.arange(n) * 50}) for g in range(4)]
    failing = gpu_frame(n, gpu=4, uuid="GPU-4", **{f.PCIE_REPLAY: np.arange(n) * 500})
    table = f.compute_features(pd.concat([*noisy, failing]), last_only=True).set_index("uuid")
    assert table.loc["GPU-0", "pcie_replay_vs_peers_1h"] == pytest.approx(0.0, abs=1e-6)
    assert table.loc["GPU-4", "pcie_replay_vs_peers_1h"] == pytest.approx(
        math.log(100.5 / 10.5), rel=0.01
    )  # with the floor


def test_missing_fields_names_what_the_frame_lacks() -> None:
    frame = gpu_frame(
        3,
        **{
            "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": 1.0,
            f.SBE_VOL: 0.0,
            f.NVLINK_CRC_FLIT: np.nan,
            f.MEMORY_TEMP: 9.3e18,
        },
    )
    missing = f.missing_fields(frame)
    assert f.PCIE_REPLAY not in missing  # under its DCGM 4.6 name
    assert f.SBE_AGG not in missing
    assert f.SBE_VOL not in missing
    assert f.NVLINK_CRC_FLIT in missing  # blank in every row
    assert f.MEMORY_TEMP in missing  # DCGM's blank value
    assert f.NVLINK_REPLAY in missing
    assert f.XID in missing
    assert set(missing) <= set(f.source_fields())
    assert f.missing_fields(frame, ["pcie_replay_rate_1h"]) == ()


def test_burstiness_separates_bursts_from_a_trickle() -> None:
    steady = gpu_frame(100, uuid="GPU-s", **{f.PCIE_REPLAY: np.arange(100) * 4})
    bursty_increments = np.zeros(100)
    bursty_increments[4::24] = 96
    bursty = gpu_frame(100, gpu=1, uuid="GPU-b", **{f.PCIE_REPLAY: np.cumsum(bursty_increments)})
    table = f.compute_features(pd.concat([steady, bursty]), last_only=True).set_index("uuid")
    assert table.loc["GPU-s", "pcie_replay_burstiness_6h"] == pytest.approx(0.0, abs=1e-6)
    assert table.loc["GPU-b", "pcie_replay_burstiness_6h"] > 3.0


def test_row_selection_every_last_and_tail() -> None:
    frame = gpu_frame(13, **{f.GPU_TEMP: 50})
    assert len(f.compute_features(frame, every_s=1800)) == 3  # minutes 0, 30 and 60
    last = f.compute_features(frame, last_only=True)
    assert len(last) == 1
    assert last["timestamp"].iloc[0] == T0 + 12 * STEP
    tail = f.compute_features(frame, tail_s=1800)
    assert tail["timestamp"].tolist() == [T0 + k * STEP for k in range(6, 13)]


def test_gpus_never_share_a_window_and_input_order_does_not_matter() -> None:
    a = gpu_frame(24, uuid="GPU-a", **{f.SBE_AGG: np.arange(24) * 10})
    b = gpu_frame(24, gpu=1, uuid="GPU-b", **{f.SBE_AGG: np.zeros(24)})
    frame = pd.concat([a, b], ignore_index=True).sample(frac=1.0, random_state=1)
    table = f.compute_features(frame, last_only=True).set_index("uuid")
    assert table.loc["GPU-b", "sbe_rate_1h"] == 0.0
    assert table.loc["GPU-a", "sbe_rate_1h"] == pytest.approx(120.0)


def test_a_replaced_board_starts_a_new_series() -> None:
    old = gpu_frame(12, uuid="GPU-old", **{f.SBE_AGG: np.arange(12) * 100})
    new = gpu_frame(12, uuid="GPU-new", **{f.SBE_AGG: np.zeros(12)})
    new["timestamp"] += 12 * STEP
    table = f.compute_features(pd.concat([old, new]), last_only=True).set_index("uuid")
    assert table.loc["GPU-new", "sbe_rate_1h"] == 0.0


def test_featurising_is_fast() -> None:
    rng = np.random.default_rng(0)
    gpus, n = 64, 2016  # 64 GPUs x 7 days at 5 minutes = 129k rows
    frames = [
        gpu_frame(
            n,
            node=f"n{g // 8}",
            gpu=g % 8,
            uuid=f"GPU-{g}",
            **{
                name: np.cumsum(rng.poisson(0.2, n))
                for name in (f.SBE_AGG, f.SBE_VOL, f.PCIE_REPLAY, f.NVLINK_CRC_FLIT, f.ENERGY)
            },
            **{
                f.GPU_TEMP: rng.normal(60, 3, n),
                f.MEMORY_TEMP: rng.normal(66, 3, n),
                f.XID: rng.choice([0, 13], n),
            },
        )
        for g in range(gpus)
    ]
    frame = pd.concat(frames, ignore_index=True)
    started = time.perf_counter()
    table = f.compute_features(frame)
    elapsed = time.perf_counter() - started
    assert len(table) == gpus * n
    # About 5 s per million rows on one core measured; a generous bound for a loaded CI machine.
    assert elapsed < 15.0


_temps = st.floats(min_value=-20.0, max_value=120.0)
_utils = st.floats(min_value=0.0, max_value=100.0)


@settings(max_examples=300, deadline=None)
@given(
    mean_w=_temps,
    u_w=st.one_of(st.just(math.nan), _utils),
    mean_t7=_temps,
    count=st.sampled_from([0.0, 1.0, 2016.0]),
    mu=_utils,
    mt=_temps,
    var_u=st.floats(min_value=0.0, max_value=2500.0),
    slope=st.floats(min_value=-5.0, max_value=5.0),
)
def test_the_recorded_line_gives_the_residual_the_moments_give(
    mean_w: float, u_w: float, mean_t7: float, count: float, mu: float, mt: float, var_u: float, slope: float
) -> None:
    """The rules record the 7-day line (`recorded_rules.LINE`) as its slope and its value at zero
    utilisation, fitted as `line_residual` fits the moments: the same residual, to rounding."""
    a = np.array
    cov = slope * var_u
    fitted = (cov / var_u if var_u > 1.0 else 0.0) if count > 0 else math.nan
    intercept = mt - fitted * mu if count > 0 else math.nan
    from_moments = thermal.line_residual(
        a([mean_w]),
        a([u_w]),
        a([mean_t7]),
        count=a([count]),
        mu=a([mu]),
        mt=a([mt]),
        var_u=a([var_u]),
        cov=a([cov]),
    )
    from_line = thermal.fitted_line_residual(
        a([mean_w]), a([u_w]), a([mean_t7]), slope=a([fitted]), intercept=a([intercept])
    )
    np.testing.assert_allclose(from_line, from_moments, rtol=1e-9, atol=1e-9)
