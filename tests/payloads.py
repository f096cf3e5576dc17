"""Builders of Alertmanager webhook payloads as Alertmanager 0.25 sends them, shared by the tests.

Times are relative to now, never calendar dates: the service measures its windows (escalation, release,
retries) against its clock, so a fixed `startsAt` would fall out of them once enough real days had passed.
`STARTS_AT` is fixed once per test process, so two `alert()` calls describe the same alert (the same
`startsAt`, as Alertmanager resends it) and the inbox sees a repeat as a duplicate.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

# Alertmanager's "not resolved" endsAt: Go's zero time, not a calendar date of ours.
ZERO_TIME = "0001-01-01T00:00:00Z"


def iso(moment: datetime) -> str:
    """`moment` the way Alertmanager writes it: RFC 3339 in UTC, milliseconds, a `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ago(delta: timedelta) -> str:
    """The RFC 3339 time `delta` before now."""
    return iso(datetime.now(UTC) - delta)


STARTS_AT = ago(timedelta(minutes=1))


def alert(
    *,
    fingerprint: str = "a1b2c3d4e5f60718",
    status: str = "firing",
    starts_at: str = STARTS_AT,
    **labels: str,
) -> dict[str, Any]:
    base = {
        "alertname": "GpuXidFatal",
        "node": "gpu-node-1",
        "gpu": "3",
        "xid": "79",
        "sickbay_class": "reboot-node",
    }
    base.update(labels)
    return {
        "status": status,
        "labels": base,
        "annotations": {"summary": "test"},
        "startsAt": starts_at,
        "endsAt": ZERO_TIME if status == "firing" else iso(datetime.now(UTC)),
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": fingerprint,
    }


def webhook(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuXidFatal"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "sickbay",
        "groupLabels": {"alertname": "GpuXidFatal"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [copy.deepcopy(a) for a in alerts] or [alert()],
    }
