"""Pod calls: list (on a node, in a namespace, by labels), evict, delete, and label one pod.

An eviction a PodDisruptionBudget refuses raises `TooManyRequestsError(budget=True)` at once, without
retries (the drain logic owns that wait). With a `uid`, an eviction or a delete touches only that
incarnation of the pod: a pod recreated under the same name answers 409.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence

import aiohttp
from kubernetes.aio import client as k8s

from app.domain import PodState
from app.kube import convert, names
from app.kube.transport import COMPONENT, MERGE_PATCH, Transport


class PodCalls:
    def __init__(self, transport: Transport, *, gpu_resources: Sequence[str], page_size: int) -> None:
        self._transport = transport
        self._gpu_resources = tuple(gpu_resources)
        self._page_size = page_size

    async def list_pods(
        self,
        *,
        node: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        facts: bool = False,
    ) -> list[PodState]:
        if node:
            names.check_node(node)
        if namespace:
            names.check_namespace(namespace)
        field_selector = f"spec.nodeName={node}" if node else None
        where = (f" in {namespace}" if namespace else "") + (f" on node {node}" if node else "")
        t = self._transport

        def page(token: str | None) -> Awaitable[aiohttp.ClientResponse]:
            if namespace:
                return t.core.list_namespaced_pod_without_preload_content(
                    namespace,
                    field_selector=field_selector,
                    label_selector=label_selector,
                    limit=self._page_size,
                    _continue=token,
                    _request_timeout=t.timeout,
                )
            query: list[tuple[str, str | int]] = [("limit", self._page_size)]
            query += [
                (k, v)
                for k, v in (
                    ("fieldSelector", field_selector),
                    ("labelSelector", label_selector),
                    ("continue", token),
                )
                if v
            ]
            return t.direct("GET", "/api/v1/pods", query=query)

        items = await t.list_all(f"LIST pods{where}", page)
        return [convert.pod_state(item, gpu_resources=self._gpu_resources, facts=facts) for item in items]

    async def evict_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """policy/v1 Eviction. A PDB refusal raises `TooManyRequestsError(budget=True)` at once, without retries.

        With `uid`, only that incarnation is evicted: the eviction's DeleteOptions carry it as a precondition,
        and a pod recreated under the same name answers 409 (ConflictError).
        """
        names.check_pod(namespace, name)
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)) if uid else None
        body = k8s.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=options,
        )
        t = self._transport
        await t.send(
            f"EVICT pod {namespace}/{name}",
            lambda: t.core.create_namespaced_pod_eviction_without_preload_content(
                name, namespace, body, field_manager=COMPONENT, _request_timeout=t.timeout
            ),
        )

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete a pod; with `uid`, only that incarnation of it (409 ConflictError if the name was reused)."""
        names.check_pod(namespace, name)
        # DeleteOptions as JSON (what the generated V1DeleteOptions serialises to), through `direct`: the
        # generated method validates every argument on each call, and every pod restart is one.
        options = {"preconditions": {"uid": uid}} if uid else None
        t = self._transport
        await t.send(
            f"DELETE pod {namespace}/{name}",
            lambda: t.direct(
                "DELETE",
                "/api/v1/namespaces/{namespace}/pods/{name}",
                path_params={"namespace": namespace, "name": name},
                body=options,
            ),
        )

    async def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> None:
        names.check_pod(namespace, name)
        body = convert.labels_patch(labels)
        t = self._transport
        await t.send(
            f"PATCH pod {namespace}/{name}",
            lambda: t.core.patch_namespaced_pod_without_preload_content(
                name,
                namespace,
                body,
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=t.timeout,
            ),
        )
