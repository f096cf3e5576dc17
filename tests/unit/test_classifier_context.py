"""The classifier's own decisions: which context is the same GPU, when two sources report one fault, and the
sentence each path gives."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.classify.classifier import DUPLICATE_RULE, Rules, classify
from app.config import rules
from app.config.settings import RULES_DIR
from app.domain import FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping

NOW = datetime.now(UTC)
SHIPPED = Rules(
    catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
    policy=rules.load_policy(RULES_DIR / "policy.yaml"),
)
WINDOW = SHIPPED.policy.classification.context_window


def alert(
    name: str = "GpuXid",
    *,
    xid: int | None = None,
    source: SignalSource = SignalSource.ALERTMANAGER,
    fp: str = "am-1",
    ago: timedelta = timedelta(0),
    status: SignalStatus = SignalStatus.FIRING,
    node: str = "gpu-node-1",
    gpu: int | None = 0,
    annotations: dict[str, str] | None = None,
    **labels: str,
) -> Signal:
    return Signal(
        source=source,
        fingerprint=fp,
        status=status,
        name=name,
        starts_at=NOW - ago,
        received_at=NOW - ago,
        node=node,
        gpu=gpu,
        xid=xid,
        labels=freeze_mapping(labels),
        annotations=freeze_mapping(annotations or {}),
    )


def agent_event(xid: int, *, ago: timedelta = timedelta(0), **kw: object) -> Signal:
    return alert("xid", xid=xid, source=SignalSource.AGENT, fp="agent-1", ago=ago, **kw)  # type: ignore[arg-type]


def test_the_agent_event_and_its_alert_merge_within_the_window_only() -> None:
    at_the_edge = classify(alert(xid=79), rules=SHIPPED, context=[agent_event(79, ago=WINDOW)])
    assert at_the_edge.rule == DUPLICATE_RULE
    assert at_the_edge.fault_class is FaultClass.REBOOT_NODE
    assert at_the_edge.evidence == ("agent:agent-1",)
    twin = agent_event(79, ago=WINDOW)
    assert at_the_edge.reason == (
        f"the same XID 79 on GPU 0 was already reported by agent at {twin.starts_at.isoformat()}: one fault, "
        f"not two (XID 79 ({SHIPPED.catalog.xids[79].name}) is reboot-node in the XID catalog)"
    )
    # Later than the window (either way round): two faults.
    late = classify(
        alert(xid=79), rules=SHIPPED, context=[agent_event(79, ago=WINDOW + timedelta(seconds=1))]
    )
    assert late.rule == "xid"
    early = classify(
        alert(xid=79, ago=WINDOW + timedelta(seconds=1)), rules=SHIPPED, context=[agent_event(79)]
    )
    assert early.rule == "xid"


def test_no_merge_with_a_resolved_twin_or_for_a_resolved_signal() -> None:
    resolved_twin = agent_event(79, status=SignalStatus.RESOLVED)
    assert classify(alert(xid=79), rules=SHIPPED, context=[resolved_twin]).rule == "xid"
    resolved = classify(alert(xid=79, status=SignalStatus.RESOLVED), rules=SHIPPED, context=[agent_event(79)])
    assert resolved.rule == "xid"
    assert resolved.reason.startswith("resolved: XID 79 ")


def test_context_from_another_node_or_gpu_is_not_this_gpus() -> None:
    elsewhere = [agent_event(79, node="gpu-node-2"), agent_event(79, gpu=1)]
    assert classify(alert(xid=79), rules=SHIPPED, context=elsewhere).rule == "xid"
    # Nor does it decode a depends XID here.
    assert classify(alert(xid=45), rules=SHIPPED, context=elsewhere).fault_class is FaultClass.IGNORE
    here = [agent_event(79)]
    assert classify(alert(xid=45), rules=SHIPPED, context=here).fault_class is FaultClass.REBOOT_NODE


def test_the_signal_itself_in_its_context_is_not_its_own_twin() -> None:
    signal = alert(xid=74, link="1")
    fault = classify(signal, rules=SHIPPED, context=[signal])
    assert fault.rule == "xid-per-link"
    assert "occurrence 1 of" in fault.reason


def test_the_same_source_again_is_not_a_twin() -> None:
    other = replace(alert(xid=79), fingerprint="am-2")
    assert classify(alert(xid=79), rules=SHIPPED, context=[other]).rule == "xid"


def test_an_unknown_xid_reason_names_the_policy_setting() -> None:
    fault = classify(alert(xid=999), rules=SHIPPED)
    assert fault.reason == (
        "XID 999 is not in the catalog: classified transient by the policy's classification.unknown_xid; "
        "add XID 999 to the catalog once NVIDIA documents it"
    )


def test_a_depends_xid_says_its_rule() -> None:
    fault = classify(alert(xid=48), rules=SHIPPED)
    assert fault.rule == "xid-dbe-remap"
    assert fault.evidence == ()
    remap = classify(alert(xid=48, row_remap_failure="1"), rules=SHIPPED)
    assert remap.evidence == ("GpuXid (alertmanager)",)


@pytest.mark.parametrize(
    ("labels", "annotations", "reason", "rule"),
    [
        (
            {"sickbay_class": "reset-gpu"},
            {"summary": "GPU 0 ECC"},
            "the alert rule GpuEcc classifies it as reset-gpu: GPU 0 ECC",
            "label",
        ),
        ({"sickbay_class": "reset-gpu"}, {}, "the alert rule GpuEcc classifies it as reset-gpu", "label"),
        (
            {"sickbay_class": "bogus"},
            {},
            "label sickbay_class='bogus' names no known class; recorded as transient",
            "unknown-class-label",
        ),
        (
            {"sickbay_class": "depends"},
            {},
            "GpuEcc says 'depends' but carries no XID to decode; recorded as transient",
            "depends-without-xid",
        ),
        (
            {},
            {"summary": "hot"},
            "no XID, class label or policy entry for 'GpuEcc': treated as transient (retry, re-check)",
            "default",
        ),
    ],
)
def test_reasons_of_the_label_and_default_paths(
    labels: dict[str, str], annotations: dict[str, str], reason: str, rule: str
) -> None:
    fault = classify(alert("GpuEcc", annotations=annotations, **labels), rules=SHIPPED)
    assert fault.reason == reason
    assert fault.rule == rule


def test_the_policys_name_table_reason_carries_the_summary() -> None:
    name, cls = next(iter(SHIPPED.policy.alerts.items()))
    fault = classify(
        alert(name, annotations={"description": "x", "summary": "remaps ran out"}), rules=SHIPPED
    )
    assert fault.fault_class is cls
    assert fault.reason == f"policy maps alert {name} to {cls.value}: remaps ran out"
    assert fault.rule == "policy"
