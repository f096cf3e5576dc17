"""The acceptance's split of precursor failures by whether the fleet exports what their precursor moves."""

from __future__ import annotations

from typing import Any

from app.sim.fleet import modes
from app.sim.fleet.params import FailureMode
from tests.perf import backtest_acceptance as acceptance

NVLINK_FIELDS = sorted(modes.PRECURSOR_FIELDS[FailureMode.NVLINK])


def failure(mode: str, *, caught: bool, scored: bool = True, precursor: bool = True) -> dict[str, Any]:
    return {"mode": mode, "caught": caught, "scored": scored, "has_precursor": precursor}


def body(failures: list[dict[str, Any]], missing: list[str]) -> dict[str, Any]:
    return {"failures": failures, "source": {"missing_fields": missing}}


def test_a_mode_whose_every_field_is_missing_is_counted_apart() -> None:
    seen = acceptance.visibility(
        body(
            [
                failure("nvlink", caught=False),
                failure("nvlink", caught=False),
                failure("hbm", caught=True),
                failure("pcie", caught=False),
            ],
            NVLINK_FIELDS,
        )
    )
    assert (seen.caught, seen.visible, seen.invisible) == (1, 2, 2)
    assert seen.invisible_by_mode == {"nvlink": 2}
    assert seen.recall == 0.5


def test_one_exported_field_of_the_mode_is_enough_to_see_it() -> None:
    seen = acceptance.visibility(body([failure("nvlink", caught=True)], NVLINK_FIELDS[1:]))
    assert (seen.caught, seen.visible, seen.invisible) == (1, 1, 0)


def test_unscored_sudden_and_unknown_modes() -> None:
    seen = acceptance.visibility(
        body(
            [
                failure("hbm", caught=True, scored=False),
                failure("sudden-xid", caught=False, precursor=False),
                failure("made-up", caught=True),
            ],
            [],
        )
    )
    # Only the scored failure with a precursor counts; a mode the simulator does not know is visible.
    assert (seen.caught, seen.visible, seen.invisible) == (1, 1, 0)


def test_no_failures_has_no_recall() -> None:
    assert acceptance.visibility(body([], [])).recall is None
