"""The simulator's XID table agrees with the shipped rules/xid-catalog.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.sim.fleet import catalog

CATALOG = Path(__file__).resolve().parents[2] / "rules" / "xid-catalog.yaml"


def test_classes_match_the_shipped_catalog() -> None:
    raw = yaml.safe_load(CATALOG.read_text())
    shipped = {int(xid): entry["class"] for xid, entry in raw["xids"].items()}
    ours = {xid: cls.value for xid, cls in catalog.XID_CLASSES.items()}
    assert ours == shipped
    assert catalog.xid_class(999).value == raw["default_class"]


def test_depends_resolves_as_the_catalog_describes() -> None:
    assert catalog.expected_class(48).value == "reset-gpu"
    assert catalog.expected_class(48, row_remap_failure=True).value == "replace"
    assert catalog.expected_class(74).value == "reset-gpu"
    assert catalog.expected_class(79).value == "reboot-node"
