"""Every XID in the design's fault-class table classifies to its class, through the shipped catalog."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
import yaml

from app.classify.classifier import UNKNOWN_XID_RULE, Rules, classify
from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import plans
from app.domain import FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping

# The design's table (ARCHITECTURE.md, "Fault classes and the XID table"), copied as the contract.
DESIGN_TABLE: dict[str, list[int]] = {
    "ignore": [38, 43, 63, 92, 121, 157, 160],
    "restart-workload": [8, 13, 31, 32, 68, 69, 94],
    "reset-gpu": [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158],
    "reboot-node": [79, 151],
    "replace": [54],
    "depends": [45, 48, 74, 144, 145, 146, 147, 148, 149, 150, 154],
}
T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def shipped() -> Rules:
    return Rules(
        catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        policy=rules.load_policy(RULES_DIR / "policy.yaml"),
    )


def xid_signal(xid: int, **labels: str) -> Signal:
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=f"fp-{xid}",
        status=SignalStatus.FIRING,
        name="GpuXid",
        starts_at=T0,
        received_at=T0,
        node="gpu-node-1",
        gpu=0,
        xid=xid,
        labels=freeze_mapping({"xid": str(xid), **labels}),
    )


def test_catalog_file_covers_every_xid_of_the_design() -> None:
    raw = yaml.safe_load((RULES_DIR / "xid-catalog.yaml").read_text())
    listed = {int(x): entry["class"] for x, entry in raw["xids"].items()}
    for cls, xids in DESIGN_TABLE.items():
        for xid in xids:
            assert xid in listed, f"XID {xid} of the design's table is missing from rules/xid-catalog.yaml"
            assert listed[xid] == cls, f"XID {xid}: catalog says {listed[xid]}, design says {cls}"


@pytest.mark.parametrize(
    ("xid", "expected"),
    [(x, cls) for cls, xids in DESIGN_TABLE.items() if cls != "depends" for x in xids],
)
def test_plain_xids_classify_to_their_class(shipped: Rules, xid: int, expected: str) -> None:
    fault = classify(xid_signal(xid), rules=shipped)
    assert fault.fault_class == FaultClass(expected)
    assert f"XID {xid}" in fault.reason


def test_xid_48_is_reset_gpu_without_remap_failure(shipped: Rules) -> None:
    assert classify(xid_signal(48), rules=shipped).fault_class is FaultClass.RESET_GPU


def test_xid_48_with_remap_failure_label_is_replace(shipped: Rules) -> None:
    fault = classify(xid_signal(48, row_remap_failure="1"), rules=shipped)
    assert fault.fault_class is FaultClass.REPLACE
    assert "row-remap failure" in fault.reason


def test_xid_48_with_remap_failure_alert_in_context_is_replace(shipped: Rules) -> None:
    remap = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="remap",
        status=SignalStatus.FIRING,
        name="GpuRowRemapFailure",
        starts_at=T0,
        received_at=T0,
        node="gpu-node-1",
        gpu=0,
    )
    fault = classify(xid_signal(48), rules=shipped, context=[remap])
    assert fault.fault_class is FaultClass.REPLACE
    assert fault.evidence


def test_remap_failure_on_another_gpu_does_not_count(shipped: Rules) -> None:
    other = replace(xid_signal(48, row_remap_failure="1"), gpu=5, fingerprint="x")
    assert classify(xid_signal(48), rules=shipped, context=[other]).fault_class is FaultClass.RESET_GPU


def test_xid_45_alone_is_ignored(shipped: Rules) -> None:
    fault = classify(xid_signal(45), rules=shipped)
    assert fault.fault_class is FaultClass.IGNORE
    assert "never a root cause" in fault.reason


@pytest.mark.parametrize(
    ("companion", "expected"), [(79, "reboot-node"), (13, "restart-workload"), (95, "reset-gpu")]
)
def test_xid_45_takes_the_class_of_its_companion(shipped: Rules, companion: int, expected: str) -> None:
    fault = classify(xid_signal(45), rules=shipped, context=[xid_signal(companion)])
    assert fault.fault_class == FaultClass(expected)


def test_xid_45_takes_the_worst_companion(shipped: Rules) -> None:
    fault = classify(xid_signal(45), rules=shipped, context=[xid_signal(13), xid_signal(79)])
    assert fault.fault_class is FaultClass.REBOOT_NODE


@pytest.mark.parametrize(
    ("action", "expected"),
    [("0", "ignore"), ("1", "reset-gpu"), ("2", "reboot-node"), ("4", "reset-gpu"), ("7", "reboot-node")],
)
def test_xid_154_follows_the_recovery_action(shipped: Rules, action: str, expected: str) -> None:
    fault = classify(xid_signal(154, recovery_action=action), rules=shipped)
    assert fault.fault_class == FaultClass(expected)


def test_xid_154_without_action_falls_back(shipped: Rules) -> None:
    fault = classify(xid_signal(154), rules=shipped)
    assert fault.fault_class is FaultClass.RESET_GPU
    assert "without the driver's recovery action" in fault.reason


def test_xid_74_is_transient_until_the_link_repeats(shipped: Rules) -> None:
    first = classify(xid_signal(74, link="2"), rules=shipped)
    assert first.fault_class is FaultClass.TRANSIENT
    earlier = [replace(xid_signal(74, link="2"), fingerprint=f"old-{i}") for i in range(2)]
    repeated = classify(xid_signal(74, link="2"), rules=shipped, context=earlier)
    assert repeated.fault_class is FaultClass.RESET_GPU
    other_link = [replace(xid_signal(74, link="5"), fingerprint=f"l-{i}") for i in range(2)]
    assert (
        classify(xid_signal(74, link="2"), rules=shipped, context=other_link).fault_class
        is FaultClass.TRANSIENT
    )


def test_unknown_xid_takes_the_policys_class_visibly(shipped: Rules) -> None:
    fault = classify(xid_signal(999), rules=shipped)
    assert fault.fault_class is FaultClass(shipped.policy.classification.unknown_xid)
    assert fault.fault_class is FaultClass.TRANSIENT  # the shipped default
    assert fault.rule == UNKNOWN_XID_RULE == "xid-unknown"
    assert "XID 999 is not in the catalog" in fault.reason
    assert "classification.unknown_xid" in fault.reason


@pytest.mark.parametrize("unknown_xid", ["reset-gpu", "ignore", "replace"])
def test_unknown_xid_class_is_a_policy_setting(shipped: Rules, unknown_xid: str) -> None:
    classification = shipped.policy.classification.model_copy(update={"unknown_xid": unknown_xid})
    policy = shipped.policy.model_copy(update={"classification": classification})
    fault = classify(xid_signal(250), rules=Rules(catalog=shipped.catalog, policy=policy))
    assert fault.fault_class == FaultClass(unknown_xid)
    assert fault.rule == UNKNOWN_XID_RULE
    assert f"classified {unknown_xid}" in fault.reason
    # A catalogued XID is untouched by the setting.
    assert classify(xid_signal(79), rules=Rules(catalog=shipped.catalog, policy=policy)).rule == "xid"


# XIDs added from NVIDIA's full catalog, with the class each must have (NVIDIA's bucket in the comment).
NEW_XIDS = [
    (11, "restart-workload"),  # RESTART_APP: invalid or corrupted push buffer stream
    (39, "restart-workload"),  # RESTART_APP: copy engine exception
    (105, "restart-workload"),  # RESTART_APP: NVJPG7 error
    (14, "ignore"),  # IGNORE: fake or injected error
    (137, "ignore"),  # IGNORE: NVLink privilege error
    (61, "replace"),  # CONTACT_SUPPORT: unused on current GPUs
    (78, "replace"),  # UPDATE_SWFW: vGPU start error
    (159, "reset-gpu"),  # CHECK_UVM: Sickbay cannot see UVM use, takes the reset branch
    (162, "ignore"),  # no bucket: power smoothing re-engaged
    (166, "transient"),  # no bucket: confidential-computing link error
    (167, "reboot-node"),  # no bucket: PCIe fatal timeout, like 79
    (168, "replace"),  # no bucket: WPR errors with ECC off
    (169, "reset-gpu"),  # no bucket: micro-controller halt, like 62
]


@pytest.mark.parametrize(("xid", "expected"), NEW_XIDS)
def test_newly_catalogued_xids_classify_to_their_class(shipped: Rules, xid: int, expected: str) -> None:
    fault = classify(xid_signal(xid), rules=shipped)
    assert fault.fault_class == FaultClass(expected)
    assert fault.rule == "xid"
    entry = shipped.catalog.entry(xid)
    assert entry is not None
    assert f"XID {xid} ({entry.name})" in fault.reason


@pytest.mark.parametrize("xid", [171, 172])
def test_dram_and_sram_detail_follows_its_xid_48(shipped: Rules, xid: int) -> None:
    alone = classify(xid_signal(xid), rules=shipped)
    assert alone.fault_class is FaultClass.RESET_GPU
    assert alone.rule == "xid-follows-others"
    assert "without the XID it accompanies" in alone.reason
    with_48 = classify(xid_signal(xid), rules=shipped, context=[xid_signal(48)])
    assert with_48.fault_class is FaultClass.RESET_GPU
    assert with_48.evidence == ("XID 48",)
    with_79 = classify(xid_signal(xid), rules=shipped, context=[xid_signal(48), xid_signal(79)])
    assert with_79.fault_class is FaultClass.REBOOT_NODE


def test_the_catalog_covers_nvidias_catalog_without_gaps(shipped: Rules) -> None:
    # NVIDIA's public catalog (the source of every shipped entry) documents XIDs 1 to 172.
    assert sorted(shipped.catalog.xids) == list(range(1, 173))


def test_every_xid_has_a_class_a_source_and_nvidias_bucket() -> None:
    raw = yaml.safe_load((RULES_DIR / "xid-catalog.yaml").read_text())
    known_buckets = set(rules.NVIDIA_ACTION_CLASSES) | {"CHECK_UVM"}
    for xid, entry in raw["xids"].items():
        assert entry.get("class"), f"XID {xid} has no class"
        assert str(entry.get("source", "")).strip(), f"XID {xid} has no source"
        assert "docs.nvidia.com/deploy/xid-errors" in entry["source"], f"XID {xid}: {entry['source']}"
        assert "nvidia_action" in entry, f"XID {xid} does not say NVIDIA's bucket (null when NVIDIA has none)"
        action = entry["nvidia_action"]
        assert action is None or action in known_buckets, f"XID {xid}: unknown bucket {action!r}"
        if action is None:
            assert entry.get("note"), f"XID {xid}: NVIDIA gives no bucket, so the note must say why"


def test_classes_follow_nvidias_bucket_or_say_why(shipped: Rules) -> None:
    for xid, entry in shipped.catalog.xids.items():
        expected = rules.NVIDIA_ACTION_CLASSES.get(entry.nvidia_action or "")
        if expected != (entry.fault_class, entry.rule):
            assert entry.note, f"XID {xid} differs from NVIDIA's {entry.nvidia_action} without a note"


def test_agent_event_and_alert_for_the_same_xid_are_one_fault(shipped: Rules) -> None:
    agent = replace(xid_signal(79), source=SignalSource.AGENT, fingerprint="gpu-node-1-abc")
    alert = xid_signal(79)
    first = classify(agent, rules=shipped)
    second = classify(alert, rules=shipped, context=[agent])
    assert first.rule == "xid"
    assert second.rule == "duplicate"
    assert "already reported by agent" in second.reason
    assert plans.plan_for(second, policy=shipped.policy, now=T0).is_noop
    # A different XID, or the same source again, is not a duplicate.
    assert classify(xid_signal(95), rules=shipped, context=[agent]).rule == "xid"
    assert classify(replace(alert, fingerprint="x"), rules=shipped, context=[alert]).rule == "xid"
