"""Each failure mode shows its precursor signature first, then its XID, and lands in the ground truth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.dcgm_fields import THROTTLE_HW_THERMAL, THROTTLE_SW_THERMAL
from app.sim.fleet import FleetSim, InjectionError, SimConfig
from app.sim.fleet.exposition import render_node
from app.sim.fleet.metrics import HEALTH_FAIL, Field
from tests.sim.helpers import gpu_obs, quiet_sim, run, value

HOUR = 3600.0
LEAD = 6 * HOUR


def _inject(sim: FleetSim, mode: str, **kwargs: object) -> str:
    node = sim.node_names[0]
    sim.inject(node, 3, mode, lead_time_s=LEAD, **kwargs)  # type: ignore[arg-type]
    return node


def _hbm_config(weak_fraction: float) -> SimConfig:
    base = SimConfig()
    return replace(base, shapes=replace(base.shapes, hbm_weak_fraction=weak_fraction))


def test_hbm_sbe_accelerates_rows_remap_then_double_bit_error() -> None:
    sim = quiet_sim(config=_hbm_config(0.0))
    node = _inject(sim, "hbm")
    run(sim, seconds=LEAD / 2)
    early = value(sim, node, 3, Field.ECC_SBE_VOL_TOTAL)
    run(sim, seconds=LEAD / 2 - 120)
    late = value(sim, node, 3, Field.ECC_SBE_VOL_TOTAL)
    assert late - early > early, "the second half of the precursor must bring more SBEs than the first"
    assert value(sim, node, 3, Field.ECC_SBE_AGG_TOTAL) >= late
    assert value(sim, node, 3, Field.CORRECTABLE_REMAPPED_ROWS) > 0
    assert value(sim, node, 3, Field.ROW_REMAP_PENDING) == 1
    assert value(sim, node, 3, Field.ECC_DBE_VOL_TOTAL) == 0
    assert not sim.truth().failures
    run(sim, seconds=240)
    obs = gpu_obs(sim, node, 3)
    assert obs is not None
    assert obs.last_xid == 48
    assert obs.values[Field.ECC_DBE_VOL_TOTAL] >= 1
    assert obs.values[Field.UNCORRECTABLE_REMAPPED_ROWS] >= 1
    assert ("MEM", HEALTH_FAIL) in {(watch, status) for watch, status, _ in obs.health}
    (failure,) = sim.truth().failures
    assert failure.mode == "hbm"
    assert failure.xid == 48
    assert failure.fault_class == "depends"
    assert failure.expected_class in ("reset-gpu", "replace")
    assert failure.failure_time - (failure.precursor_start or 0) == pytest.approx(LEAD)


def test_some_hbm_failures_have_only_a_weak_precursor() -> None:
    sim = quiet_sim(config=_hbm_config(1.0))
    node = _inject(sim, "hbm")
    run(sim, seconds=LEAD + 120)
    (failure,) = sim.truth().failures
    assert failure.detail == "weak precursor"
    assert value(sim, node, 3, Field.ECC_SBE_AGG_TOTAL) < 60


@pytest.mark.parametrize("xid", [95, 94])
def test_hbm_can_end_in_uncontained_or_contained_ecc(xid: int) -> None:
    sim = quiet_sim()
    node = _inject(sim, "hbm", xid=xid)
    run(sim, seconds=LEAD + 120)
    (failure,) = sim.truth().failures
    assert failure.xid == xid
    assert failure.fault_class == ("reset-gpu" if xid == 95 else "restart-workload")
    assert value(sim, node, 3, Field.ECC_DBE_VOL_TOTAL) >= 1


def test_thermal_creeps_throttles_then_falls_off_the_bus_and_vanishes() -> None:
    sim = quiet_sim()
    node = _inject(sim, "thermal")
    run(sim, seconds=60)
    start_temp = value(sim, node, 3, Field.MEMORY_TEMP)
    run(sim, seconds=LEAD - 180)
    obs = gpu_obs(sim, node, 3)
    assert obs is not None
    throttle = int(obs.values[Field.CLOCK_THROTTLE_REASONS])
    assert throttle & THROTTLE_SW_THERMAL
    assert throttle & THROTTLE_HW_THERMAL
    assert obs.values[Field.MEMORY_TEMP] > start_temp + 15
    assert obs.values[Field.THERMAL_VIOLATION] > 0
    run(sim, seconds=120)
    after = gpu_obs(sim, node, 3)
    assert after is not None
    assert after.last_xid == 79, "XID 79 is visible before the GPU's series vanish"
    run(sim, seconds=120)
    assert gpu_obs(sim, node, 3) is None
    others = [g.identity.index for g in sim.observe_node(node).gpus]
    assert others == [0, 1, 2, 4, 5, 6, 7]
    (failure,) = sim.truth().failures
    assert failure.vanished
    assert failure.xid == 79
    assert failure.expected_class == "reboot-node"


@pytest.mark.parametrize("xid", [79, 62])
def test_pcie_replay_bursts_grow_then_xid(xid: int) -> None:
    sim = quiet_sim()
    node = _inject(sim, "pcie", xid=xid)
    run(sim, seconds=LEAD / 2)
    half = value(sim, node, 3, Field.PCIE_REPLAY_COUNTER)
    run(sim, seconds=LEAD / 2 - 600)
    before = value(sim, node, 3, Field.PCIE_REPLAY_COUNTER)
    run(sim, seconds=300)
    per_min = (value(sim, node, 3, Field.PCIE_REPLAY_COUNTER) - before) / 5
    assert per_min > 31, "late in the precursor the replay rate crosses DCGM's Gen5 threshold"
    assert before - half > half
    assert value(sim, node, 3, Field.PCIE_MAX_LINK_GEN) == 5
    run(sim, seconds=420)
    (failure,) = sim.truth().failures
    assert failure.xid == xid
    assert failure.vanished == (xid == 79)


def test_nvlink_crc_errors_rise_then_xid_74() -> None:
    sim = quiet_sim()
    node = _inject(sim, "nvlink")
    run(sim, seconds=LEAD - 600)

    def crc() -> float:
        return value(sim, node, 3, Field.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL) + value(
            sim, node, 3, Field.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
        )

    before = crc()
    run(sim, seconds=300)
    assert (crc() - before) / 300 >= 100, "CRC errors cross DCGM's 100/s threshold before the failure"
    assert value(sim, node, 3, Field.NVLINK_REPLAY_ERROR_COUNT_TOTAL) > 0
    run(sim, seconds=420)
    obs = gpu_obs(sim, node, 3)
    assert obs is not None
    assert obs.last_xid == 74
    (failure,) = sim.truth().failures
    assert failure.fault_class == "depends"
    assert failure.expected_class == "reset-gpu"
    assert failure.detail.startswith("nvlink=")


def test_gsp_fails_without_counter_precursor() -> None:
    sim = quiet_sim()
    node = _inject(sim, "gsp", xid=120)
    run(sim, seconds=LEAD - 300)
    assert value(sim, node, 3, Field.ECC_SBE_VOL_TOTAL) == 0
    assert value(sim, node, 3, Field.PCIE_REPLAY_COUNTER) == 0
    run(sim, seconds=600)
    (failure,) = sim.truth().failures
    assert failure.xid == 120
    assert failure.fault_class == "reset-gpu"


def test_sudden_xid_fails_at_once_with_no_precursor() -> None:
    sim = quiet_sim()
    node = sim.node_names[1]
    injected = sim.inject(node, 5, "sudden-xid", xid=95)
    assert injected.failure_time == sim.time_s
    obs = gpu_obs(sim, node, 5)
    assert obs is not None
    assert obs.last_xid == 95
    (failure,) = sim.truth().failures
    assert failure.precursor_start is None
    assert failure.lead_time_s is None
    assert failure.expected_class == "reset-gpu"
    assert sim.node(node).faulted, "a hardware fault takes the node out of the pool"
    assert all(gpu.pod is None for gpu in sim.node(node).gpus), "its workloads moved"


def test_xid_value_and_labels_on_the_series() -> None:
    sim = quiet_sim()
    node = sim.node_names[0]
    sim.inject(node, 2, "sudden-xid", xid=62)
    text = render_node(sim.observe_node(node))
    (line,) = [ln for ln in text.splitlines() if ln.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="2"')]
    assert 'err_code="62",err_msg="Internal micro-controller halt"' in line
    assert line.endswith(" 62")


def test_driver_mismatch_changes_the_driver_label() -> None:
    sim = quiet_sim()
    node = sim.node_names[2]
    sim.inject(node, None, "driver-mismatch", version="535.1.1")
    assert sim.observe_node(node).driver_version == "535.1.1"
    assert sim.observe_node(sim.node_names[0]).driver_version != "535.1.1"


def test_bad_injections_are_refused() -> None:
    sim = quiet_sim()
    with pytest.raises(InjectionError):
        sim.inject("no-such-node", 0, "hbm")
    with pytest.raises(InjectionError):
        sim.inject(sim.node_names[0], 99, "hbm")
    with pytest.raises(InjectionError):
        sim.inject(sim.node_names[0], 0, "meteor-strike")


def test_auto_repair_reboots_and_replaces_what_must_be_replaced() -> None:
    sim = quiet_sim()
    node = sim.node_names[0]
    old_uuid = sim.node(node).gpus[1].identity.uuid
    sim.inject(node, 1, "sudden-xid", xid=79)
    run(sim, seconds=7 * HOUR)
    state = sim.node(node)
    assert not state.faulted
    assert state.gpus[1].present
    assert state.gpus[1].identity.uuid == old_uuid
    kinds = [op.kind for op in sim.truth().ops if op.node == node]
    assert "reboot" in kinds


def test_row_remap_failure_means_replace_and_repair_swaps_the_board() -> None:
    base = SimConfig()
    config = replace(
        base,
        shapes=replace(base.shapes, hbm_row_remap_failure_p=1.0),
        ops=replace(base.ops, auto_repair_after_s=None),
    )
    sim = quiet_sim(config=config)
    node = sim.node_names[0]
    old = sim.node(node).gpus[4].identity.uuid
    sim.inject(node, 4, "sudden-xid", xid=48)
    (failure,) = sim.truth().failures
    assert failure.row_remap_failure
    assert failure.expected_class == "replace"
    assert value(sim, node, 4, Field.ROW_REMAP_FAILURE) == 1
    run(sim, seconds=12 * HOUR)
    assert sim.node(node).faulted, "without auto-repair the node waits for a remediation"
    sim.repair(node)
    run(sim, seconds=600)
    assert sim.node(node).gpus[4].identity.uuid != old
    assert value(sim, node, 4, Field.ROW_REMAP_FAILURE) == 0
    assert value(sim, node, 4, Field.ECC_DBE_AGG_TOTAL) == 0
    assert any(op.kind == "replace" and op.detail == f"was {old}" for op in sim.truth().ops)
