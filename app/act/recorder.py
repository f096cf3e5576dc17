"""Makes every action visible: an Outcome in the journal, a metric, a log line, and a Kubernetes Event.

Event reasons are stable (`SickbayQuarantined`, `SickbayEvicted`, …) because operators alert on them.
A failure to write an Event is logged and counted, never allowed to fail the action it describes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from app.domain import Action, Outcome, OutcomeStatus, PodRef
from app.kube import errors, port
from app.obs.metrics import Metrics

log = logging.getLogger("app.act")


class Recorder:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        metrics: Metrics,
        clock: Callable[[], datetime],
        events: bool = True,
    ) -> None:
        self._kube = kube
        self._metrics = metrics
        self._clock = clock
        self._events = events

    def outcome(self, action: Action, status: OutcomeStatus, detail: str, *, attempts: int = 1) -> Outcome:
        self._metrics.actions.labels(kind=action.kind.value, outcome=status.value).inc()
        target = str(action.pod) if action.pod else action.node
        level = logging.WARNING if status in (OutcomeStatus.FAILED, OutcomeStatus.BLOCKED) else logging.INFO
        log.log(level, "%s %s on %s: %s", status.value, action.kind.value, target, detail)
        return Outcome(action=action, status=status, detail=detail, at=self._clock(), attempts=attempts)

    async def node_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> bool:
        return await self._emit(
            port.EventSpec(
                kind="Node",
                name=node,
                namespace="default",
                reason=reason,
                message=message,
                type="Warning" if warning else "Normal",
            )
        )

    async def pod_event(
        self, pod: PodRef, reason: str, message: str, *, uid: str = "", warning: bool = False
    ) -> bool:
        return await self._emit(
            port.EventSpec(
                kind="Pod",
                name=pod.name,
                namespace=pod.namespace,
                reason=reason,
                message=message,
                type="Warning" if warning else "Normal",
                uid=uid,
            )
        )

    async def owner_event(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        api_version: str,
        reason: str,
        message: str,
        uid: str = "",
        warning: bool = False,
    ) -> bool:
        return await self._emit(
            port.EventSpec(
                kind=kind,
                name=name,
                namespace=namespace,
                reason=reason,
                message=message,
                type="Warning" if warning else "Normal",
                uid=uid,
                api_version=api_version,
            )
        )

    async def _emit(self, event: port.EventSpec) -> bool:
        """False when the Event could not be written (or Events are off): the caller may say so."""
        if not self._events:
            return False
        try:
            await self._kube.create_event(event)
        except errors.KubeError as exc:
            self._metrics.kube_errors.labels(kind="event").inc()
            log.warning("could not write Event %s on %s %s: %s", event.reason, event.kind, event.name, exc)
            return False
        return True
