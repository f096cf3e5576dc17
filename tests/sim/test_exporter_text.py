"""The simulated /metrics text is dcgm-exporter's: names, types, labels, presence, resets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from app import dcgm_fields
from app.sim.fleet import metrics
from app.sim.fleet.exposition import render_kube_state, render_node
from app.sim.fleet.metrics import Field
from tests.sim.helpers import gpu_obs, quiet_sim, run, value

RULES = Path(__file__).resolve().parents[2] / "rules" / "prometheus" / "sickbay-rules.yaml"
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


def _text(nodes: int = 2) -> str:
    sim = quiet_sim(nodes=nodes)
    run(sim, seconds=600)
    return render_node(sim.observe_node(sim.node_names[0]))


def test_text_parses_with_prometheus_client_and_has_the_exporter_labels() -> None:
    families = {f.name: f for f in text_string_to_metric_families(_text())}
    # prometheus_client keeps the family names and appends `_total` to counter sample names.
    assert set(families) == set(metrics.all_family_names())
    samples = [s for f in families.values() for s in f.samples]
    for sample in samples:
        assert list(sample.labels)[: len(LABELS)] == LABELS
        assert {"container", "namespace", "pod"} <= set(sample.labels)
    xid = families["DCGM_FI_DEV_XID_ERRORS"].samples
    assert len(xid) == 8
    assert all({"err_code", "err_msg"} <= set(s.labels) for s in xid)
    health = families["DCGM_EXP_GPU_HEALTH_STATUS"].samples
    assert len(health) == 8 * len(metrics.HEALTH_WATCHES)
    assert families["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"].type == "counter"
    assert families["DCGM_FI_DEV_GPU_TEMP"].type == "gauge"


def test_exposes_every_metric_the_rule_bundle_reads() -> None:
    rules = "\n".join(line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#"))
    # Recorded series (`level:metric:operations`) are the rules' own output, not the exporter's: a name such
    # as gpu:DCGM_FI_DEV_VOLATILE_COUNTERS:resets1h sums several exporter fields under one metric part.
    exporter_text = re.sub(r"\b[a-z_]+:[A-Za-z0-9_]+:[A-Za-z0-9_]+\b", " ", rules)
    read = set(re.findall(r"\b(DCGM_[A-Z0-9_]+)\b", exporter_text)) - {"DCGM_FI_DRIVER_VERSION"}
    # Only the DCGM 4.6 aliases may be absent: the rules accept either spelling.
    aliases = set(dcgm_fields.RENAMED_IN_4_6.values()) | {
        "DCGM_FI_DEV_XID_ERROR",
        "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_FAILED",
        "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
        "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
        "DCGM_FR_VOLATILE_DBE_DETECTED",
        "DCGM_FR_CLOCK_THROTTLE_THERMAL",
        "DCGM_FR_OK",
    }
    emitted = set(metrics.all_family_names())
    assert read - aliases <= emitted, sorted(read - aliases - emitted)
    assert "kube_node_status_allocatable" in rules
    assert "kube_node_status_capacity" in rules
    ksm = render_kube_state(quiet_sim(nodes=2).gpu_capacity())
    families = {f.name for f in text_string_to_metric_families(ksm)}
    assert families == {"kube_node_status_capacity", "kube_node_status_allocatable"}


def test_promtool_check_metrics_accepts_the_text(promtool: Path) -> None:
    result = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=_text(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    output = result.stdout + result.stderr
    # Exit 3 is "lint problems" (the exporter's names break conventions: camelCase labels, no `_total`).
    assert result.returncode in (0, 3), output
    assert "error while linting" not in output
    assert "parsing error" not in output


def test_hostname_switch_spells_the_host_label() -> None:
    sim = quiet_sim(nodes=1)
    node = sim.observe_node(sim.node_names[0])
    newer = render_node(node, hostname_label="hostname")
    assert 'hostname="gpu-node-000"' in newer
    assert "Hostname=" not in newer
    assert 'Hostname="gpu-node-000"' in render_node(node)
    dropped = render_node(node, hostname_label=None)
    assert "ostname=" not in dropped


def test_idle_gpus_have_empty_pod_labels_busy_ones_name_the_pod() -> None:
    sim = quiet_sim(nodes=4)
    sim.drain(sim.node_names[0])
    run(sim, seconds=120)
    texts = "".join(render_node(sim.observe_node(n)) for n in sim.node_names)
    assert 'container="",namespace="",pod=""' in texts
    assert re.search(r'namespace="[a-z-]+",pod="[a-z0-9-]+"', texts)


def test_a_vanished_gpu_loses_its_series_while_the_others_stay() -> None:
    sim = quiet_sim()
    node = sim.node_names[1]
    sim.inject(node, 6, "gpu-vanish")
    text = render_node(sim.observe_node(node))
    uuid = sim.node(node).gpus[6].identity.uuid
    assert uuid not in text
    assert text.count('DCGM_FI_DEV_GPU_TEMP{gpu="') == 7
    assert sim.gpu_capacity()[1].allocatable == 7
    sim.step(60)
    assert gpu_obs(sim, node, 6) is None
    sim.inject(node, None, "reboot")
    run(sim, seconds=600)
    assert gpu_obs(sim, node, 6) is not None, "a reboot brings a lost GPU back"


def test_exporter_restart_removes_all_of_a_nodes_series_for_a_while() -> None:
    sim = quiet_sim()
    node, other = sim.node_names[0], sim.node_names[1]
    sim.inject(node, 0, "app-xid", xid=13)
    sim.inject(node, None, "exporter-restart", duration_s=90)
    observed = sim.observe_node(node)
    assert not observed.exporter_up
    assert observed.gpus == ()
    assert len(observed.missing) == 8
    assert render_node(observed) == ""
    assert sim.observe_node(other).exporter_up
    sim.step(60)
    assert not sim.observe_node(node).exporter_up
    sim.step(60)
    back = sim.observe_node(node)
    assert back.exporter_up
    assert len(back.gpus) == 8
    assert all(g.last_xid == 0 for g in back.gpus), "the restarted exporter's DCGM forgot the last XID"


def test_reboot_resets_volatile_counters_only() -> None:
    sim = quiet_sim()
    node = sim.node_names[0]
    sim.inject(node, 2, "hbm", lead_time_s=3600)
    run(sim, seconds=3660)
    before = {f: value(sim, node, 2, f) for f in Field}
    assert before[Field.ECC_SBE_VOL_TOTAL] > 0
    assert before[Field.ECC_DBE_VOL_TOTAL] > 0
    sim.inject(node, None, "reboot")
    assert not sim.observe_node(node).exporter_up, "the exporter is down while the node reboots"
    run(sim, seconds=600)
    after = {f: value(sim, node, 2, f) for f in Field}
    for volatile in (Field.ECC_SBE_VOL_TOTAL, Field.ECC_DBE_VOL_TOTAL, Field.PCIE_REPLAY_COUNTER):
        assert after[volatile] == 0
    assert after[Field.ROW_REMAP_PENDING] == 0, "the reset applies the pending remap"
    for aggregate in (
        Field.ECC_SBE_AGG_TOTAL,
        Field.ECC_DBE_AGG_TOTAL,
        Field.CORRECTABLE_REMAPPED_ROWS,
        Field.UNCORRECTABLE_REMAPPED_ROWS,
    ):
        assert after[aggregate] == before[aggregate]
    assert after[Field.TOTAL_ENERGY_CONSUMPTION] < before[Field.TOTAL_ENERGY_CONSUMPTION]
    obs = gpu_obs(sim, node, 2)
    assert obs is not None
    assert obs.last_xid == 0
