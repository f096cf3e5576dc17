"""Builders of Alertmanager webhook payloads as Alertmanager 0.25 sends them, shared by the tests."""

from __future__ import annotations

import copy
from typing import Any


def alert(
    *,
    fingerprint: str = "a1b2c3d4e5f60718",
    status: str = "firing",
    starts_at: str = "2026-11-29T09:14:03.512Z",
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
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-29T10:00:00Z",
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
