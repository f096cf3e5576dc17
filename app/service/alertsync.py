"""Reconciles the inbox with Alertmanager's own list of alerts (`GET /api/v2/alerts`).

A new leader, or a replica back from an outage, may have missed notifications: Alertmanager retries a
webhook only for a while. Its API lists what is firing now, so every active alert is (re)appended to the
inbox — dedup makes a repeat harmless — and every alert the journal still believes firing but that
Alertmanager no longer lists gets a synthetic `resolved` row, so release is not blocked forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import aiohttp
import pydantic

from app.ingest import payloads, signals
from app.store.inbox import Inbox, Record
from app.store.journal import Journal

log = logging.getLogger(__name__)


class AlertSyncError(RuntimeError):
    """Alertmanager could not be read; the caller logs it and tries again next round."""


async def fetch_active(
    url: str, *, receiver: str | None, request_timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    params = {"active": "true", "silenced": "false", "inhibited": "false"}
    if receiver:
        params["receiver"] = receiver
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=request_timeout_s)) as session,
            session.get(url.rstrip("/") + "/api/v2/alerts", params=params) as response,
        ):
            if response.status != 200:
                raise AlertSyncError(f"Alertmanager answered {response.status}")
            data = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise AlertSyncError(f"cannot read {url}: {exc}") from exc
    if not isinstance(data, list):
        raise AlertSyncError("Alertmanager's alert list is not a JSON array")
    return [a for a in data if isinstance(a, dict)]


async def sync(
    *,
    url: str,
    receiver: str | None,
    inbox: Inbox,
    journal: Journal,
    keys: signals.NodeKeys,
    clock: Callable[[], datetime],
) -> tuple[int, int]:
    """Append what Alertmanager says is firing, resolve what it no longer lists; (stored, resolved)."""
    active = await fetch_active(url, receiver=receiver)
    now = clock()
    records: list[Record] = []
    listed: set[str] = set()
    for raw in active:
        try:
            alert = payloads.AlertmanagerAlert.model_validate({**raw, "status": "firing"})
            signal = signals.from_alert(alert, keys=keys, received_at=now)
        except (pydantic.ValidationError, signals.SignalError) as exc:
            log.warning("skipping an alert from Alertmanager's list that does not validate: %s", exc)
            continue
        listed.add(alert.fingerprint)
        records.append(_record(alert, node=signal.node, received_at=now))
    for fingerprint, signal_json in await journal.firing_alerts():
        if fingerprint in listed:
            continue
        try:
            resolved = payloads.AlertmanagerAlert.model_validate(
                {
                    "status": "resolved",
                    "labels": signal_json.get("labels", {}),
                    "annotations": signal_json.get("annotations", {}),
                    "startsAt": signal_json["starts_at"],
                    "endsAt": now.isoformat(),
                    "fingerprint": fingerprint,
                }
            )
        except (pydantic.ValidationError, KeyError):
            continue
        records.append(_record(resolved, node=signal_json.get("node"), received_at=now))
    result = await inbox.append(records)
    resolved_count = len(records) - len(listed)
    log.info(
        "reconciled with Alertmanager: %d active listed, %d new rows, %d missed resolutions",
        len(listed),
        result.stored,
        resolved_count,
    )
    return result.stored, resolved_count


def _record(alert: payloads.AlertmanagerAlert, *, node: str | None, received_at: datetime) -> Record:
    starts = alert.starts_at
    return Record(
        source="alertmanager",
        fingerprint=alert.fingerprint,
        starts_at=signals.utc(starts).isoformat(),
        status=alert.status,
        node=node,
        payload=alert.model_dump_json(by_alias=True),
        received_at=received_at.isoformat(),
    )
