"""Training's exporter field dropout (`prepare.drop_fields`) covers the fleets that lack NVLink's extended
counters: the replay, recovery and data-CRC fields go missing on some nodes while the flow-control CRC
counter stays, as with dcgm-exporter's files that enable one and not the others (issue 12)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.predict import features, prepare

EXTENDED = features.FIELD_GROUPS["nvlink_extended"]


def fleet(nodes: int) -> pd.DataFrame:
    rows = [
        {"node": f"n{i:03d}", "gpu": 0, "timestamp": t, features.NVLINK_CRC_FLIT: 10.0 * t}
        | {name: float(t) for name in EXTENDED}
        for i in range(nodes)
        for t in range(3)
    ]
    return pd.DataFrame(rows)


def test_some_nodes_lose_the_extended_nvlink_fields_and_keep_the_crc_counter() -> None:
    frame = fleet(200)
    dropped = prepare.drop_fields(frame, 0.25, seed=7, salt="random:s62")
    by_node = dropped.groupby("node")
    extended_lost = by_node[list(EXTENDED)].apply(lambda g: bool(g.isna().all().all()))
    flit_kept = by_node[features.NVLINK_CRC_FLIT].apply(lambda s: bool(s.notna().all()))
    crc_only = extended_lost & flit_kept
    # About 0.25 x 0.75 of the nodes are the "CRC counter only" case; the group goes as a whole.
    assert 20 <= int(crc_only.sum()) <= 60
    partly = by_node[list(EXTENDED)].apply(lambda g: bool(g.isna().any().any() and g.notna().any().any()))
    assert not partly.any()


def test_dropped_fields_are_missing_not_zero_and_the_draw_is_reproducible() -> None:
    frame = fleet(50)
    first = prepare.drop_fields(frame, 0.5, seed=1, salt="a")
    again = prepare.drop_fields(frame, 0.5, seed=1, salt="a")
    other = prepare.drop_fields(frame, 0.5, seed=1, salt="b")
    pd.testing.assert_frame_equal(first, again)
    assert not first.equals(other)
    values = first[list(EXTENDED)].to_numpy()
    assert np.isnan(values).any()
    assert (values[~np.isnan(values)] == frame[list(EXTENDED)].to_numpy()[~np.isnan(values)]).all()


def test_crc_features_carry_a_growing_link_error_rate_without_the_replay_fields() -> None:
    # A day of silence, then CRC errors growing tenfold every two hours for 6 h, no replay/recovery fields.
    step = 300.0
    quiet, growing = 24 * 12, 6 * 12
    per_s = np.r_[np.zeros(quiet), 0.05 * 10 ** (np.arange(growing) / 24)]
    frame = pd.DataFrame(
        {
            "node": "n1",
            "gpu": 0,
            "timestamp": 1_740_960_000.0 + step * np.arange(quiet + growing),
            features.NVLINK_CRC_FLIT: np.cumsum(per_s * step),
        }
    )
    table = features.compute_features(frame, last_only=True)
    assert table["nvlink_replay_rate_6h"].isna().all()
    assert table["nvlink_recovery_increase_24h"].isna().all()
    last = table.iloc[-1]
    assert last["nvlink_crc_rate_1h"] > 20.0
    assert last["nvlink_crc_vs_baseline_6h_7d"] > 1.0
    assert last["nvlink_crc_accel_1h_24h"] > 1.0
    assert last["nvlink_crc_persistence_24h"] > 0.2
