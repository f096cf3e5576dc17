"""Kueue `Workload` calls (kueue.x-k8s.io/v1beta1, through the official client's CustomObjectsApi): find
a job's Workload by its `kueue.x-k8s.io/job-uid` label, list those Sickbay holds deactivated, read one,
and switch `spec.active`.

The switch is one JSON merge patch guarded by the read `resourceVersion` (409 when Kueue wrote the object
meanwhile: read again), carrying Sickbay's label `sickbay.io/requeued` and annotation `sickbay.io/requeued-from` with
it, so that Sickbay reactivates only what it deactivated, and a new leader finds what the old one left. Fields: https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta1/
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import aiohttp

from app.domain import WorkloadState
from app.domain.queueing import REQUEUED, REQUEUED_FROM, WORKLOAD_GROUP, WORKLOAD_PLURAL, WORKLOAD_VERSION
from app.kube import convert, names
from app.kube.responses import JsonObj
from app.kube.transport import COMPONENT, MERGE_PATCH, Transport


def workload_state(obj: Mapping[str, Any]) -> WorkloadState:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    admission = status.get("admission") or {}
    assignments = admission.get("podSetAssignments") or []
    return WorkloadState(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        active=spec.get("active") is not False,  # the API defaults it to true
        queue_name=str(spec.get("queueName") or ""),
        conditions=tuple(
            convert.condition_of(c) for c in status.get("conditions") or [] if isinstance(c, dict)
        ),
        admitted_to=str(admission.get("clusterQueue") or ""),
        topology=any(isinstance(a, dict) and a.get("topologyAssignment") for a in assignments),
        unhealthy_nodes=tuple(
            str(n.get("name")) for n in status.get("unhealthyNodes") or [] if isinstance(n, dict)
        ),
        requeued_from=str((meta.get("annotations") or {}).get(REQUEUED_FROM) or ""),
        owner=next(
            (convert.owner_of(o) for o in meta.get("ownerReferences") or [] if isinstance(o, dict)), None
        ),
    )


def active_patch(*, active: bool, requeued_from: str | None, resource_version: str) -> JsonObj:
    """`spec.active`, Sickbay's label and annotation (None removes both) and the read resourceVersion, in
    one patch."""
    return {
        "metadata": {
            "resourceVersion": resource_version,
            "labels": {REQUEUED: "true" if requeued_from is not None else None},
            "annotations": {REQUEUED_FROM: requeued_from},
        },
        "spec": {"active": active},
    }


class WorkloadCalls:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def list_workloads(self, namespace: str, *, job_uid: str) -> list[WorkloadState]:
        names.check_namespace(namespace)
        t = self._transport

        def page(token: str | None) -> Awaitable[aiohttp.ClientResponse]:
            return t.custom.list_namespaced_custom_object_without_preload_content(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                namespace,
                WORKLOAD_PLURAL,
                label_selector=f"kueue.x-k8s.io/job-uid={job_uid}",
                _continue=token,
                _request_timeout=t.timeout,
            )

        items = await t.list_all(f"LIST workloads in {namespace} for job {job_uid}", page)
        return [workload_state(item) for item in items]

    async def list_requeued_workloads(self) -> list[WorkloadState]:
        """Every Workload Sickbay holds deactivated (label `sickbay.io/requeued`), in all namespaces."""
        t = self._transport

        def page(token: str | None) -> Awaitable[aiohttp.ClientResponse]:
            return t.custom.list_cluster_custom_object_without_preload_content(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                WORKLOAD_PLURAL,
                label_selector=REQUEUED,
                _continue=token,
                _request_timeout=t.timeout,
            )

        items = await t.list_all("LIST workloads Sickbay requeues", page)
        return [workload_state(item) for item in items]

    async def get_workload(self, namespace: str, name: str) -> WorkloadState:
        names.check_pod(namespace, name)
        t = self._transport
        body = await t.send(
            f"GET workload {namespace}/{name}",
            lambda: t.custom.get_namespaced_custom_object_without_preload_content(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, name, _request_timeout=t.timeout
            ),
        )
        return workload_state(body)

    async def set_workload_active(
        self, workload: WorkloadState, *, active: bool, requeued_from: str | None
    ) -> WorkloadState:
        names.check_pod(workload.namespace, workload.name)
        body = active_patch(
            active=active, requeued_from=requeued_from, resource_version=workload.resource_version
        )
        t = self._transport
        answer = await t.send(
            f"PATCH workload {workload.namespace}/{workload.name} active={str(active).lower()}",
            lambda: t.custom.patch_namespaced_custom_object_without_preload_content(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                workload.namespace,
                WORKLOAD_PLURAL,
                workload.name,
                body,
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=t.timeout,
            ),
        )
        return workload_state(answer)
