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


LEVELS = RULES.parent / "tests" / "recorded-levels.rules.yml"


def levels_group() -> dict[str, object]:
    """The rules that read recorded series, as recorded-levels.yaml tests them: every 1d (an `offset`
    reads the same sample at any interval; a week of 5-minute rounds would take promtool minutes)."""
    group = recorded_rules.rule_group()
    upper = [r for r in group["rules"] if not _reads_rows_or_exporter(str(r["expr"]))]
    return {"name": f"{recorded_rules.GROUP}-levels", "interval": "1d", "rules": upper}


def _reads_rows_or_exporter(expr: str) -> bool:
    """A row rule (reads the exporter), an hourly or a daily one (read rows): recorded.yaml and
    recorded-short.yaml test those."""
    reads_rows = (f"[{recorded_rules.HOUR_RANGE}]", f"[{recorded_rules.DAY_RANGE}]")
    return f"[{recorded_rules.ROW_RANGE}:" in expr or any(r in expr for r in reads_rows)


def test_the_levels_test_holds_the_bundles_rules_over_recorded_series() -> None:
    copied = yaml.safe_load(LEVELS.read_text(encoding="utf-8"))["groups"]
    assert copied == [levels_group()]
    lower = [r for r in recorded_rules.rules() if _reads_rows_or_exporter(r.expr)]
    assert len(lower) + len(copied[0]["rules"]) == len(recorded_rules.rules())
