"""A failure under way can be made to happen now, and a process can carry its own precursor shapes.

Both exist for the demo, which plants an HBM degradation in the fleet's simulated past (with the
simulator's own shape, not the demo's compressed one) and cannot wait hours for its failure.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.sim.fleet import InjectionError
from app.sim.fleet.metrics import Field
from app.sim.fleet.params import FailureMode, PrecursorShapes
from tests.sim.helpers import gpu_obs, quiet_sim, run, value

HOUR = 3600.0


def test_fail_early_applies_the_process_own_failure_with_its_precursor_in_the_truth() -> None:
    sim = quiet_sim()
    node = sim.node_names[1]
    gpu = sim.node(node).gpus[2]
    onset = sim.time_s
    sim.begin(gpu, FailureMode.HBM, onset=onset, fail_at=onset + 10 * HOUR, xid=48, category="injected")
    run(sim, seconds=4 * HOUR)

    record = sim.fail_early(node, 2)

    assert record.mode == "hbm"
    assert record.xid == 48
    assert record.precursor_start == onset
    assert record.lead_time_s == pytest.approx(4 * HOUR)
    assert record.injected
    assert sim.truth().failures == (record,)
    assert gpu.process is None
    obs = gpu_obs(sim, node, 2)
    assert obs is not None
    assert obs.last_xid == 48
    assert value(sim, node, 2, Field.ECC_DBE_VOL_TOTAL) >= 1
    run(sim, seconds=12 * HOUR)
    assert len(sim.truth().failures) == 1, "the original failure time must not fail it again"


def test_fail_early_without_a_failure_under_way_is_refused() -> None:
    sim = quiet_sim()
    with pytest.raises(InjectionError, match="no failure under way"):
        sim.fail_early(sim.node_names[0], 0)


def test_a_process_may_carry_its_own_shapes_leaving_the_fleet_unchanged() -> None:
    sim = quiet_sim()
    fleet_shapes = sim.config.shapes
    own = replace(PrecursorShapes(), hbm_remap_per_sbe=0.0, hbm_sbe_start_per_h=50.0, hbm_weak_fraction=0.0)
    node = sim.node_names[0]
    onset = sim.time_s
    process = sim.begin(
        sim.node(node).gpus[0],
        FailureMode.HBM,
        onset=onset,
        fail_at=onset + 6 * HOUR,
        xid=48,
        category="injected",
        shapes=own,
    )
    default = sim.begin(
        sim.node(node).gpus[1],
        FailureMode.HBM,
        onset=onset,
        fail_at=onset + 6 * HOUR,
        xid=48,
        category="injected",
    )
    run(sim, seconds=5 * HOUR)

    assert process.shapes is own
    assert default.shapes is fleet_shapes
    assert value(sim, node, 0, Field.ECC_SBE_VOL_TOTAL) > 100
    assert value(sim, node, 0, Field.CORRECTABLE_REMAPPED_ROWS) == 0
