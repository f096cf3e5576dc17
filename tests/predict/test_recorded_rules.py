"""The shipped rule bundle holds the recording rules `app.predict.recorded_rules` generates."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.predict import recorded_rules

RULES = Path(__file__).resolve().parents[2] / "rules" / "prometheus" / "sickbay-rules.yaml"


def test_the_bundle_holds_the_generated_group() -> None:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    shipped = [g for g in groups if g["name"] == recorded_rules.GROUP]
    assert len(shipped) == 1
    got = [{"record": r["record"], "expr": r["expr"].strip()} for r in shipped[0]["rules"]]
    assert shipped[0]["interval"] == recorded_rules.INTERVAL
    assert got == recorded_rules.rule_group()["rules"]
