"""The lane of an inbox record, for the inbox to store as it appends it (`Inbox.open(lane_of=...)`).

The intake's hot path stores an alert without building its Signal (`app.ingest.admission`), so the lane is
read from the few fields it needs in the stored JSON — the alert's `alertname`, XID and `sickbay_class`
labels, the agent event's kind and XID, a serialised Signal's name, XID and labels — and decided by the
pure `app.classify.lanes.lane_of`. One `json.loads` per stored record; nothing is validated here (the
intake did that, the pipeline does it again), and anything unreadable is soft.
"""

from __future__ import annotations

import json
from typing import Any

from app.classify import classifier, lanes
from app.domain import Lane
from app.ingest.signals import XID_LABELS
from app.store import inbox

_INTERNAL_SOURCES = frozenset({"allocatable", "prediction", inbox.RECHECK_SOURCE})
_XID_DIGITS = 5  # XIDs are below 65536; a longer label is no XID (the intake refuses it)


def lane_of(record: inbox.Record, *, rules: classifier.Rules) -> Lane:
    return lanes.lane_of(marks_of(record), rules=rules)


def marks_of(record: inbox.Record) -> lanes.Marks:
    data = json.loads(record.payload)
    if not isinstance(data, dict):
        return lanes.Marks(firing=False)
    firing = record.status == "firing"
    if record.source == "agent":
        kind = data.get("kind")
        return lanes.Marks(
            firing=firing,
            name=f"agent:{kind}",
            xid=_xid(data.get("xid")),
            agent_kind=kind if isinstance(kind, str) else None,
        )
    labels = data.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    if record.source in _INTERNAL_SOURCES:  # a serialised Signal (app.store.codec)
        name, xid = data.get("name"), _xid(data.get("xid"))
    else:
        # The first XID label set, as `app.ingest.signals` reads it.
        name, xid = (
            labels.get("alertname"),
            next((_xid(labels[k]) for k in XID_LABELS if labels.get(k)), None),
        )
    class_label = labels.get(classifier.CLASS_LABEL)
    return lanes.Marks(
        firing=firing,
        name=name if isinstance(name, str) else "",
        xid=xid,
        class_label=class_label if isinstance(class_label, str) else None,
    )


def _xid(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) <= _XID_DIGITS:
        return int(text)
    return None
