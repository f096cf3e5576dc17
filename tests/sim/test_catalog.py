"""The simulator's ground truth reads the shipped rules/xid-catalog.yaml (and policy), never a cluster's
override, and resolves the `depends` XIDs it emits the way the classifier would."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from app.agent import xid as agent_xid
from app.config import rules
from app.domain import FaultClass
from app.sim.fleet import catalog, params

RULES = Path(__file__).resolve().parents[2] / "rules"


def _emitted_xids() -> set[int]:
    hardware = {xid for entry in params.DEFAULT_MIX for xid, _ in entry.xids}
    (app_xids,) = [f.default for f in dataclasses.fields(params.WorkloadParams) if f.name == "app_xids"]
    assert isinstance(app_xids, tuple)
    return hardware | {xid for xid, _ in app_xids}


def test_classes_are_the_shipped_catalogs() -> None:
    raw = yaml.safe_load((RULES / "xid-catalog.yaml").read_text())
    shipped = {int(xid): entry["class"] for xid, entry in raw["xids"].items()}
    assert {xid: catalog.xid_class(xid).value for xid in shipped} == shipped
    policy = yaml.safe_load((RULES / "policy.yaml").read_text())
    assert catalog.xid_class(999).value == policy["classification"]["unknown_xid"]


def test_every_xid_the_simulator_emits_is_in_the_catalog() -> None:
    # An emitted XID the catalog lacked would score the simulator against the unknown-XID policy.
    missing = sorted(x for x in _emitted_xids() if catalog.shipped_catalog().entry(x) is None)
    assert not missing, f"the simulator emits XIDs the catalog does not list: {missing}"


def test_a_clusters_catalog_override_does_not_move_ground_truth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    override = tmp_path / "xid-catalog.yaml"
    override.write_text(
        "version: 1\nxids:\n  79: {class: ignore, nvidia_action: IGNORE, name: x, source: a site's runbook}\n"
    )
    monkeypatch.setenv("SICKBAY_XID_CATALOG_FILE", str(override))
    overridden = rules.load_catalog(override).entry(79)
    assert overridden is not None
    assert overridden.fault_class is FaultClass.IGNORE
    assert catalog.xid_class(79) is FaultClass.REBOOT_NODE


@pytest.mark.parametrize(
    ("xid", "row_remap_failure", "expected"),
    [
        (48, False, "reset-gpu"),
        (48, True, "replace"),
        (74, False, "reset-gpu"),
        (145, False, "reset-gpu"),
        (154, False, "reset-gpu"),
        (45, False, "ignore"),
        (171, False, "reset-gpu"),
        (79, False, "reboot-node"),
        (13, False, "restart-workload"),
    ],
)
def test_depends_resolves_as_the_catalog_describes(xid: int, row_remap_failure: bool, expected: str) -> None:
    assert catalog.expected_class(xid, row_remap_failure=row_remap_failure).value == expected


def test_err_msg_is_the_agents_name() -> None:
    assert catalog.describe(48) == agent_xid.describe_xid(48) == "Double Bit ECC Error"
    assert catalog.describe(999) == agent_xid.UNKNOWN
