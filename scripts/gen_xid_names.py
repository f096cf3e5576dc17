#!/usr/bin/env python3
"""Writes the NVML agent's XID names (app/agent/xid_table.py) from the `name` column of rules/xid-catalog.yaml.

The catalog is the one place an XID is named. The agent cannot read it at run time: the package ships
`app` only (rules/ is not in it) and the agent's DaemonSet mounts no catalog, so it gets a generated copy.
The simulator's exporter takes its `err_msg` from the agent, so all three say the same.
`tests/agent/test_xid_names.py` fails when the copy is stale.

    python scripts/gen_xid_names.py           # rewrite app/agent/xid_table.py
    python scripts/gen_xid_names.py --check   # exit 1 if it is stale

Needs PyYAML (a dependency of the project).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "rules" / "xid-catalog.yaml"
TARGET = ROOT / "app" / "agent" / "xid_table.py"
# Not an XID: the value DCGM_FI_DEV_XID_ERRORS holds when the GPU has reported none.
NO_ERROR = (0, "No Error")

HEAD = '''"""XID names for the NVML agent, generated from rules/xid-catalog.yaml: do not edit.

Change the `name` of an XID in the catalog, then run `python scripts/gen_xid_names.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

XID_NAMES: Mapping[int, str] = {
'''


def names() -> dict[int, str]:
    raw = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    return {
        int(xid): str(entry["name"]) for xid, entry in sorted(raw["xids"].items(), key=lambda kv: int(kv[0]))
    }


def render() -> str:
    rows = [NO_ERROR, *names().items()]
    body = "".join(f"    {xid}: {json.dumps(name, ensure_ascii=False)},\n" for xid, name in rows)
    return HEAD + body + "}\n"


def stale() -> bool:
    return not TARGET.exists() or TARGET.read_text(encoding="utf-8") != render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the generated table is stale")
    args = parser.parse_args(argv)
    if args.check:
        if stale():
            print(f"{TARGET.relative_to(ROOT)} is stale: run scripts/gen_xid_names.py")
            return 1
        return 0
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
