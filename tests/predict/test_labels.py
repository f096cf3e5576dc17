"""Labels: hardware faults within the horizon, exclusions after a failure, ambiguous and early rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.predict import labels
from app.predict.labels import Status

H = 3600.0


def rows(hours: list[float], *, node: str = "n1", gpu: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"node": node, "gpu": gpu, "timestamp": np.array(hours) * H})


def failures(*records: dict[str, object]) -> pd.DataFrame:
    base = {"node": "n1", "gpu": 0, "precursor_start": np.nan, "id": "F1"}
    return pd.DataFrame([{**base, **r} for r in records])


def test_positive_within_the_horizon_negative_outside() -> None:
    table = rows([0, 10, 30, 47, 48, 60])
    fails = failures({"failure_time": 48 * H, "fault_class": "reset-gpu"})
    lab = labels.label_rows(table, fails, horizon_s=24 * H, censor_early=False)
    # 30 h and 47 h are within 24 h before the failure at 48 h; the row at 48 h is the failure itself.
    assert lab.label.tolist() == [0, 0, 1, 1, 0, 0]
    assert lab.status[4] == Status.AFTER_FAILURE  # no repair: excluded to the end
    assert lab.status[5] == Status.AFTER_FAILURE
    assert lab.time_to_failure_s[2] == pytest.approx(18 * H)
    assert lab.failure_id[2] == "F1"


@pytest.mark.parametrize("fault_class", ["reset-gpu", "reboot-node", "replace"])
def test_every_hardware_class_is_positive(fault_class: str) -> None:
    lab = labels.label_rows(rows([40]), failures({"failure_time": 48 * H, "fault_class": fault_class}))
    assert lab.label.tolist() == [1]


def test_rows_after_a_failure_are_excluded_until_repair_and_settling() -> None:
    table = rows([48.5, 53.5, 54.5, 55.5])
    fails = failures({"failure_time": 48 * H, "fault_class": "reboot-node"})
    repairs = pd.DataFrame({"node": ["n1"], "time": [54 * H]})
    lab = labels.label_rows(table, fails, repairs=repairs, settle_s=H)
    assert lab.status.tolist() == [
        Status.AFTER_FAILURE,
        Status.AFTER_FAILURE,
        Status.AFTER_FAILURE,
        Status.NEGATIVE,
    ]
    assert not lab.usable[:3].any()
    assert lab.usable[3]


def test_a_repair_before_the_failure_does_not_end_its_exclusion() -> None:
    repairs = pd.DataFrame({"node": ["n1"], "time": [10 * H]})
    lab = labels.label_rows(
        rows([50]), failures({"failure_time": 48 * H, "fault_class": "reset-gpu"}), repairs=repairs
    )
    assert lab.status.tolist() == [Status.AFTER_FAILURE]


def test_non_hardware_failures_make_their_precursor_and_horizon_ambiguous() -> None:
    table = rows([0, 20, 30, 47])
    fails = failures({"failure_time": 48 * H, "fault_class": "restart-workload", "precursor_start": 10 * H})
    lab = labels.label_rows(table, fails)
    assert lab.status.tolist() == [Status.NEGATIVE, Status.AMBIGUOUS, Status.AMBIGUOUS, Status.AMBIGUOUS]
    assert lab.label.sum() == 0


def test_early_rows_of_a_long_precursor_are_censored_unless_asked() -> None:
    table = rows([0, 50, 80])
    fails = failures({"failure_time": 96 * H, "fault_class": "replace", "precursor_start": 40 * H})
    early = labels.label_rows(table, fails)
    assert early.status.tolist() == [Status.NEGATIVE, Status.EARLY, Status.POSITIVE]
    plain = labels.label_rows(table, fails, censor_early=False)
    assert plain.status.tolist() == [Status.NEGATIVE, Status.NEGATIVE, Status.POSITIVE]


def test_labels_follow_the_slot_not_other_gpus_or_nodes() -> None:
    table = pd.concat([rows([40], gpu=0), rows([40], gpu=1), rows([40], node="n2")], ignore_index=True)
    lab = labels.label_rows(table, failures({"failure_time": 48 * H, "fault_class": "reset-gpu"}))
    assert lab.label.tolist() == [1, 0, 0]


def test_end_of_data_is_censored_when_asked() -> None:
    lab = labels.label_rows(
        rows([0, 90]), failures({"failure_time": 500 * H, "fault_class": "reset-gpu"}), label_end=100 * H
    )
    assert lab.status.tolist() == [Status.NEGATIVE, Status.CENSORED]


def test_row_order_is_kept_and_counts_add_up() -> None:
    table = rows([47, 0, 30]).sample(frac=1.0, random_state=3).reset_index(drop=True)
    lab = labels.label_rows(table, failures({"failure_time": 48 * H, "fault_class": "reset-gpu"}))
    expected = (table["timestamp"] >= 24 * H).astype(int).tolist()
    assert lab.label.tolist() == expected
    assert sum(lab.counts().values()) == len(table)


def test_no_failures_means_all_negative() -> None:
    empty = pd.DataFrame(columns=["node", "gpu", "failure_time", "fault_class"])
    lab = labels.label_rows(rows([0, 1, 2]), empty)
    assert lab.status.tolist() == [Status.NEGATIVE] * 3


def test_failures_need_the_columns_labels_read() -> None:
    with pytest.raises(ValueError, match="failure_time"):
        labels.label_rows(rows([0]), pd.DataFrame({"node": ["n1"], "gpu": [0]}))
