"""Fleet personalities: classic is the original simulator, drawn ones are reproducible and differ, healthy
GPUs of a noisy fleet are noisy and do not fail, the exporter view shows in the outputs."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from app.sim.fleet import (
    FleetSim,
    SimConfig,
    backfill,
    backfill_source,
    backfill_text,
    datasets,
    fieldsets,
    personality,
)
from app.sim.fleet.background import TRAP_NVLINK, TRAP_PCIE
from app.sim.fleet.params import ExporterView

from .helpers import quiet_config, run

DAY = 86400.0


def _quiet(p: personality.Personality) -> SimConfig:
    config = quiet_config(p.config())
    return replace(config, background=replace(config.background, recovered_per_1000_gpu_days=0.0))


def _background(sim: FleetSim) -> tuple[int, int]:
    gpus = [gpu for node in sim.nodes for gpu in node.gpus]
    return sum(g.pcie_replay for g in gpus), sum(g.nvlink_flit + g.nvlink_data for g in gpus)


def test_classic_is_the_original_simulator() -> None:
    config = personality.named("classic").config()
    assert config == SimConfig()  # the recorded personality does not take part in the comparison
    plain, classic = FleetSim(nodes=3, seed=11), FleetSim(nodes=3, seed=11, config=config)
    for _ in range(6):
        plain.step(600.0)
        classic.step(600.0)
        assert plain.observe() == classic.observe()
    assert plain.truth().failures == classic.truth().failures
    assert classic.truth().as_dict()["personality"]["name"] == "classic"


def test_a_drawn_personality_is_reproducible_by_seed_and_differs_across_seeds() -> None:
    assert personality.draw(5) == personality.draw(5)
    assert personality.draw(5).as_dict() != personality.draw(6).as_dict()
    assert personality.named("random", seed=5) == personality.draw(5)
    json.dumps(personality.draw(5).as_dict())  # JSON-ready for the ground truth


def test_every_name_builds_a_configuration() -> None:
    for name in personality.NAMES:
        assert personality.named(name, seed=1).config().personality is not None
    with pytest.raises(ValueError, match="unknown personality"):
        personality.named("nope")


def test_healthy_gpus_of_a_noisy_fleet_log_link_errors_and_do_not_fail() -> None:
    sim = FleetSim(nodes=16, seed=3, config=_quiet(personality.named("noisy-links")))
    run(sim, seconds=2 * DAY, step=3600.0)
    replays, crc = _background(sim)
    truth = sim.truth()
    assert replays > 0
    assert crc > 0
    assert truth.failures == ()
    kinds = {trap.kind for trap in truth.traps}
    assert {TRAP_PCIE, TRAP_NVLINK} <= kinds


def test_stress_10x_has_ten_times_the_background_of_its_base() -> None:
    base = personality.named("noisy-links")
    assert personality.named("stress-10x", seed=4) == replace(
        personality.draw(4), name="stress-10x", noise=10.0
    )
    totals = []
    for p in (base, replace(base, noise=10.0)):
        sim = FleetSim(nodes=16, seed=3, config=_quiet(p))
        run(sim, seconds=2 * DAY, step=3600.0)
        totals.append(_background(sim))
    (base_replays, base_crc), (loud_replays, loud_crc) = totals
    assert 6.0 < loud_replays / base_replays < 16.0
    assert 6.0 < loud_crc / base_crc < 16.0


def test_a_recovered_precursor_is_a_trap_that_never_fails() -> None:
    p = personality.named("weak-precursors")
    config = quiet_config(p.config())
    config = replace(config, background=replace(config.background, recovered_per_1000_gpu_days=400.0))
    sim = FleetSim(nodes=8, seed=2, config=config)
    run(sim, seconds=4 * DAY, step=3600.0)
    truth = sim.truth(include_pending=True)
    recovered = [trap for trap in truth.traps if trap.kind == "recovered-precursor"]
    assert recovered
    assert all(trap.time is not None and trap.until is not None for trap in recovered)
    assert truth.failures == ()
    assert truth.pending == ()


def _dataset(tmp_path: Path, p: personality.Personality) -> tuple[pd.DataFrame, str]:
    datasets.write_dataset(
        tmp_path, nodes=2, duration_s=1800.0, step_s=600.0, seed=1, config=p.config(),
        formats=("csv", "openmetrics"),
    )  # fmt: skip
    return pd.read_csv(tmp_path / "timeseries.csv"), (tmp_path / "metrics.om").read_text(encoding="utf-8")


def test_an_unexposed_field_is_absent_from_the_dataset_and_the_openmetrics(tmp_path: Path) -> None:
    table, text = _dataset(tmp_path, personality.named("default-counters"))
    for absent in ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"):
        assert absent not in table.columns
        assert absent not in text
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in table.columns
    assert "\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{" in text
    truth = json.loads((tmp_path / "truth.json").read_text(encoding="utf-8"))
    assert truth["personality"]["exporter"]["field_set"] == "default"


def test_the_label_spelling_shows_in_the_outputs(tmp_path: Path) -> None:
    view = ExporterView(host_label="kubernetes_node", metric_names="4.6", table_host=True)
    table, text = _dataset(tmp_path, replace(personality.named("classic"), name="x", exporter=view))
    assert "kubernetes_node" in table.columns
    assert "node" not in table.columns
    assert 'kubernetes_node="gpu-node-000"' in text
    assert "Hostname=" not in text
    assert "DCGM_FI_DEV_XID_ERROR" in table.columns
    assert "DCGM_FI_DEV_XID_ERRORS" not in table.columns
    assert "\nDCGM_FI_DEV_GPU_TEMP_CELSIUS{" in text
    assert "\nDCGM_FI_DEV_GPU_TEMP{" not in text


def test_a_backfill_carries_the_personality_s_fields_and_host_label(tmp_path: Path) -> None:
    view = ExporterView(
        fields=fieldsets.DEFAULT_FIELDS, field_set="default", host_label="kubernetes_node", table_host=True
    )
    p = replace(personality.named("classic"), name="x", exporter=view)
    datasets.write_dataset(
        tmp_path, nodes=2, duration_s=1800.0, step_s=600.0, seed=1, config=p.config(), formats=("csv",)
    )
    host_label, needs_instance = backfill.dataset_host_label(tmp_path)
    assert (host_label, needs_instance) == ("kubernetes_node", False)
    source = backfill_source.open_source(tmp_path)
    out = io.BytesIO()
    stats = backfill_text.write_window(
        source.window(0.0, 1e12), out, host=source.host, uuid=source.uuid, columns=source.columns,
        host_label=host_label,
    )  # fmt: skip
    text = out.getvalue().decode()
    assert stats.samples > 0
    assert 'kubernetes_node="gpu-node-001"' in text
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{" in text
    assert "NVLINK" not in text
    assert "ECC_SBE" not in text
