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
        now = self._now().replace(microsecond=0).isoformat()
        cluster_scoped = event.kind in CLUSTER_SCOPED_KINDS
        involved = {
            "apiVersion": event.api_version,
            "kind": event.kind,
            "name": event.name,
            "namespace": None if cluster_scoped else event.namespace,
            "uid": event.uid or None,
        }
        name = f"{event.name[:230]}.{secrets.token_hex(8)}"
        # The JSON the generated `CoreV1Event` would serialise to (unset fields left out), written out:
        # `direct` skips the generated method's per-call validation, and every pod restart sends one.
        body = {
            "metadata": {"name": name, "namespace": event.namespace},
            "involvedObject": {key: value for key, value in involved.items() if value is not None},
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        t = self._transport
        try:
            await t.send(
                f"CREATE event about {event.kind} {event.name}",
                lambda: t.direct(
                    "POST",
                    "/api/v1/namespaces/{namespace}/events",
                    path_params={"namespace": event.namespace},
                    query=(("fieldManager", COMPONENT),),
                    body=body,
                ),
            )
        except errors.ConflictError:
            # The name is random, so AlreadyExists can only mean an earlier attempt of ours got through.
            log.debug("event %s already exists; an earlier attempt created it", name)
