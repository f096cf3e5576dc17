"""Events: a core/v1 Event from component "sickbay" about any object, named like client-go's recorder.

It is a legacy-style Event (first/last timestamp and count, no `eventTime`), which every reader of core/v1
Events understands; setting `eventTime` would make the API server require the events.k8s.io fields
(`action`, `reportingController`) as well.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import datetime

from kubernetes.aio import client as k8s

from app.kube import errors
from app.kube.port import EventSpec
from app.kube.transport import COMPONENT, Transport

log = logging.getLogger(__name__)

CLUSTER_SCOPED_KINDS = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "CustomResourceDefinition"}
)


class EventCalls:
    def __init__(self, transport: Transport, *, instance: str, now: Callable[[], datetime]) -> None:
        self._transport = transport
        self._instance = instance
        self._now = now

    async def create_event(self, event: EventSpec) -> None:
        """A core/v1 Event named `<object>.<random hex>` (see the module docstring for its shape)."""
        now = self._now().replace(microsecond=0)
        cluster_scoped = event.kind in CLUSTER_SCOPED_KINDS
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(
                name=f"{event.name[:230]}.{secrets.token_hex(8)}", namespace=event.namespace
            ),
            involved_object=k8s.V1ObjectReference(
                api_version=event.api_version,
                kind=event.kind,
                name=event.name,
                namespace=None if cluster_scoped else event.namespace,
                uid=event.uid or None,
            ),
            reason=event.reason,
            message=event.message,
            type=event.type,
            source=k8s.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self._instance[:128],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        t = self._transport
        try:
            await t.send(
                f"CREATE event about {event.kind} {event.name}",
                lambda: t.core.create_namespaced_event_without_preload_content(
                    event.namespace, body, field_manager=COMPONENT, _request_timeout=t.timeout
                ),
            )
        except errors.ConflictError:
            # The name is random, so AlreadyExists can only mean an earlier attempt of ours got through.
            log.debug("event %s already exists; an earlier attempt created it", body.metadata.name)
