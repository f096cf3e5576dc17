"""The agent's XID names are the catalog's: app/agent/xid_table.py is generated from rules/xid-catalog.yaml
(the agent ships without rules/), and a stale copy fails here with the command that fixes it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from app.agent import xid
from app.config import rules
from app.config.settings import RULES_DIR

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "gen_xid_names.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_xid_names", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_table_is_fresh() -> None:
    assert not _generator().stale(), "app/agent/xid_table.py is stale: run `python scripts/gen_xid_names.py`"


def test_every_catalogued_xid_has_the_catalogs_name_in_the_agent() -> None:
    catalog = rules.load_catalog(RULES_DIR / "xid-catalog.yaml")
    assert {x: xid.describe_xid(x) for x in catalog.xids} == {x: e.name for x, e in catalog.xids.items()}
    assert set(xid.XID_NAMES) == {0, *catalog.xids}


def test_no_error_and_unknown_codes() -> None:
    assert xid.describe_xid(0) == "No Error"
    assert xid.describe_xid(250) == xid.UNKNOWN
