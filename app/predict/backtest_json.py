"""A backtest's alarms and failures as JSON-ready dicts (times ISO-8601 UTC, NaN as null)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np


def iso(t: float) -> str | None:
    if not np.isfinite(t):
        return None
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return round(float(value), 6) if np.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def alarm_dict(a: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "node": str(a["node"]),
        "gpu": int(a["gpu"]),
        "uuid": str(a["uuid"]),
        "first_flag": iso(float(a["first"])),
        "last_flag": iso(float(a["last"])),
        "steps": int(a["steps"]),
        "peak": jsonable(float(a["peak"])),
        "outcome": str(a["outcome"]),
        "acted": bool(a["acted"]),
        "acted_from": iso(float(a["acted_from"])),
        "hold_end": iso(float(a["hold_end"])),
        "trap": str(a["trap"]) or None,
        "failure_id": a["failure_id"] if isinstance(a["failure_id"], str) else None,
        "lead_h": jsonable(float(a["lead_h"])),
        "drivers": [[str(name), jsonable(float(w))] for name, w in (a["drivers"] or ())],
    }


def failure_dict(f: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(f["id"]),
        "node": str(f["node"]),
        "gpu": int(f["gpu"]),
        "mode": str(f["mode"]) or None,
        "fault_class": str(f["fault_class"]),
        "failure_time": iso(float(f["failure_time"])),
        "precursor_start": iso(float(f["precursor_start"])),
        "has_precursor": bool(f["has_precursor"]),
        "scored": bool(f["scored"]),
        "caught": bool(f["caught"]),
        "acted": bool(f["acted"]),
        "acted_lead_h": jsonable(float(f["acted_lead_h"])),
        "first_flag": iso(float(f["first_flag"])),
        "lead_h": jsonable(float(f["lead_h"])),
    }
