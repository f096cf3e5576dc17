"""`--truth`: ground truth for a backtest, its documented format (`commands.TRUTH_HELP` says it in a line),
and an error that names what is wrong.

A dataset directory (its `truth.json`) or a JSON file shaped like the simulator's `truth.json`:

    {"failures": [{"id": "F00001", "node": "node-007", "gpu": 3, "uuid": "GPU-...",
                   "failure_time_ts": 1767225600, "fault_class": "replace",
                   "precursor_start_ts": 1767182400, "mode": "hbm-degradation"}, ...],
     "ops": [{"node": "node-007", "time_ts": 1767229200, "kind": "replace"}],
     "traps": [{"kind": "stable-high-sbe", "node": "node-011", "gpu": 0, "uuid": "GPU-..."},
               {"kind": "recovered-precursor", "node": "node-012", "gpu": 5, "uuid": "GPU-...",
                "time_ts": 1767139200, "until_ts": 1767182400}]}

Required per failure: `id`, `node`, `gpu`, `failure_time_ts` (Unix seconds) and `fault_class` (or
`expected_class`): reset-gpu, reboot-node or replace count as hardware. Optional: `uuid`,
`precursor_start_ts` (a known precursor: recall with precursors, early alarms), `mode`. `ops` of kind
reboot or replace are the repairs; `pending` (failures after the range, by XID), `ops` and `traps` may be
left out. A trap with `time_ts` is an episode (`until_ts`: when it stopped; none: it did not): its GPU is
that trap from then until a day after it stopped (`dataset.trap_kinds`); one without is a trap throughout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.predict import dataset
from app.predict.cli_common import Usage

REQUIRED = ("id", "node", "gpu", "failure_time_ts")


def read(path: Path) -> dataset.Truth:
    """The truth at `path`; `Usage` says what is wrong with it (exit 2)."""
    file = path / "truth.json" if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise Usage(f"--truth {file}: cannot read it ({exc.strerror or exc})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Usage(f"--truth {file}: not JSON ({exc.msg} at line {exc.lineno})") from None
    problem = check(raw)
    if problem:
        raise Usage(f"--truth {file}: {problem}")
    try:
        return dataset.truth_from_dict(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise Usage(f"--truth {file}: {exc!r}") from None


def check(raw: Any) -> str | None:
    """What is wrong with a parsed truth document, or None."""
    if not isinstance(raw, dict):
        return f"expected a JSON object with a 'failures' list, got {type(raw).__name__}"
    if "failures" not in raw:
        return "no 'failures' list (expected {\"failures\": [...], ...})"
    for key in ("failures", "pending", "ops", "traps"):
        if key in raw and not isinstance(raw[key], list):
            return f"'{key}' must be a list"
    for i, record in enumerate(raw["failures"]):
        if not isinstance(record, dict):
            return f"failures[{i}] is not an object"
        absent = [k for k in REQUIRED if k not in record]
        if not ("fault_class" in record or "expected_class" in record):
            absent.append("fault_class")
        if absent:
            return f"failures[{i}] lacks {', '.join(absent)}"
        try:
            float(record["failure_time_ts"])
            int(record["gpu"])
        except (TypeError, ValueError):
            return f"failures[{i}]: failure_time_ts must be Unix seconds and gpu an index"
    return None
