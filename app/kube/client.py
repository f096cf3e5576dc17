"""`KubeClient`: the `KubePort` on top of the official async client (`kubernetes.aio`).

The official client supplies what is hard to get right: kubeconfig and in-cluster credentials (with token
refresh), TLS, and the generated endpoint methods. Around each call Sickbay adds pacing, bounded retries
and typed errors (`transport`, `responses`), refuses names that are not Kubernetes names before they reach
a URL (`names`), and answers with domain values instead of API objects (`convert`). The calls themselves
live by resource: `nodes`, `pods`, `events`, `custom_objects`, `jobs`, `workloads`, `reviews`; this module puts them behind one port.

Calls use the generated `*_without_preload_content` methods and read the JSON themselves: reads stay tolerant
of fields a newer server adds (the generated models forbid unknown fields), and status codes are checked in
one place. It must not import `app.sim`, and nothing outside `app.kube` may import `kubernetes`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from app.domain import Condition, JobRun, JobState, NodePatch, NodeState, PodState, WorkloadState
from app.domain.identity import AccessRequest, AccessReview, TokenReview, UserInfo
from app.kube import convert, errors, proxies, views
from app.kube.custom_objects import CustomObjectCalls
from app.kube.events import EventCalls
from app.kube.informer import Hooks
from app.kube.jobs import JobCalls
from app.kube.nodes import NodeCalls
from app.kube.pods import PodCalls
from app.kube.port import AuditPort, EventSpec, KubePort, QueuePort, ReviewPort
from app.kube.ratelimit import Clock, Sleep, TokenBucket, loop_clock
from app.kube.responses import JsonObj
from app.kube.retries import RetryPolicy
from app.kube.reviews import REVIEW_BURST, REVIEW_QPS, REVIEW_RETRY, ReviewCalls
from app.kube.transport import Transport
from app.kube.workloads import WorkloadCalls

LIST_PAGE_SIZE = 500


def utc_now() -> datetime:
    return datetime.now(UTC)


class KubeClient:
    """The real `KubePort`. Build it with `connect()`; close it with `await client.close()` (or `async with`)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        qps: float = 20.0,
        burst: int = 30,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, so one shared default is safe
        gpu_resources: Sequence[str] = (convert.GPU_RESOURCE,),
        plurals: Mapping[str, str] | None = None,
        instance: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
        clock: Clock = loop_clock,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.transport = Transport(
            api, qps=qps, burst=burst, retry=retry, clock=clock, sleep=sleep, rand=rand
        )
        # Kept for `with_own_limiter`, which builds the same client on another bucket.
        self._sibling = functools.partial(
            KubeClient,
            api,
            retry=retry,
            gpu_resources=gpu_resources,
            plurals=plurals,
            instance=instance,
            page_size=page_size,
            clock=clock,
            sleep=sleep,
            rand=rand,
            now=now,
        )
        self.gpu_resources = tuple(gpu_resources)
        self._nodes = NodeCalls(self.transport, gpu_resources=gpu_resources, page_size=page_size, now=now)
        self._pods = PodCalls(self.transport, gpu_resources=gpu_resources, page_size=page_size)
        self._jobs = JobCalls(self.transport, gpu_resources=gpu_resources, page_size=page_size)
        self._events = EventCalls(self.transport, instance=instance or socket.gethostname(), now=now)
        self._custom = CustomObjectCalls(self.transport, plurals=plurals or {})
        self._workloads = WorkloadCalls(self.transport)
        # Reviews of callers' tokens pace on a bucket of their own: a flood of made-up tokens then costs the
        # API server a bounded rate and never delays a quarantine or an eviction.
        self.review_transport = Transport(
            api, qps=REVIEW_QPS, burst=REVIEW_BURST, retry=REVIEW_RETRY, clock=clock, sleep=sleep, rand=rand
        )
        self._reviews = ReviewCalls(self.review_transport)

    def with_own_limiter(self, *, qps: float, burst: int) -> KubeClient:
        """The same client (credentials, connection pool, options) pacing on a token bucket of its own.

        The read routes use one so that their calls never take a token the remediation path is waiting
        for. It shares this client's `ApiClient`: close this one, not the sibling.
        """
        return self._sibling(qps=qps, burst=burst)

    def cluster_view(self, *, qps: float, burst: int, hooks: Hooks = Hooks()) -> views.ClusterView:  # noqa: B008
        """A view of the nodes and GPU pods kept by watches (`app.kube.views`), on a token bucket of its own
        (its start-up lists are many pages); start it with `view.start()`."""
        own = self.with_own_limiter(qps=qps, burst=burst)
        return views.cluster_view(own.transport, gpu_resources=self.gpu_resources, hooks=hooks)

    @property
    def api(self) -> k8s.ApiClient:
        return self.transport.api

    @property
    def bucket(self) -> TokenBucket:
        return self.transport.bucket

    @property
    def attempts(self) -> int:
        """HTTP attempts made, retries included."""
        return self.transport.attempts

    async def close(self) -> None:
        await self.api.close()  # type: ignore[no-untyped-call]

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def get_node(self, name: str) -> NodeState:
        return await self._nodes.get_node(name)

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        return await self._nodes.list_nodes(label_selector=label_selector)

    async def patch_node(self, patch: NodePatch) -> NodeState:
        return await self._nodes.patch_node(patch)

    async def set_node_condition(self, node: str, condition: Condition) -> None:
        await self._nodes.set_node_condition(node, condition)

    async def list_pods(
        self,
        *,
        node: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        facts: bool = False,
    ) -> list[PodState]:
        return await self._pods.list_pods(
            node=node, namespace=namespace, label_selector=label_selector, facts=facts
        )

    async def list_jobs(self, *, namespace: str | None = None) -> list[JobState]:
        return await self._jobs.list_jobs(namespace=namespace)

    async def evict_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        await self._pods.evict_pod(namespace, name, uid=uid)

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        await self._pods.delete_pod(namespace, name, uid=uid)

    async def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> None:
        await self._pods.patch_pod_labels(namespace, name, labels)

    async def create_event(self, event: EventSpec) -> None:
        await self._events.create_event(event)

    async def create_custom_object(self, manifest: Mapping[str, object]) -> None:
        await self._custom.create_custom_object(manifest)

    async def create_job(self, manifest: Mapping[str, object]) -> None:
        await self._jobs.create_job(manifest)

    async def get_job(self, namespace: str, name: str) -> JobRun | None:
        return await self._jobs.get_job(namespace, name)

    async def list_workloads(self, namespace: str, *, job_uid: str) -> list[WorkloadState]:
        return await self._workloads.list_workloads(namespace, job_uid=job_uid)

    async def list_requeued_workloads(self) -> list[WorkloadState]:
        return await self._workloads.list_requeued_workloads()

    async def get_workload(self, namespace: str, name: str) -> WorkloadState:
        return await self._workloads.get_workload(namespace, name)

    async def set_workload_active(
        self, workload: WorkloadState, *, active: bool, requeued_from: str | None
    ) -> WorkloadState:
        return await self._workloads.set_workload_active(workload, active=active, requeued_from=requeued_from)

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
        return await self._reviews.review_token(token, audiences=audiences)

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview:
        return await self._reviews.review_access(user, request)

    async def pod_node(self, namespace: str, name: str) -> str | None:
        return await self._reviews.pod_node(namespace, name)

    async def call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: JsonObj | None = None,
        retry: RetryPolicy | None = None,
        path_params: Mapping[str, str] | None = None,
    ) -> JsonObj:
        """One paced, retried call on a raw API path (`Transport.call`): the leader elector's Lease calls."""
        return await self.transport.call(
            method, path, what=what, body=body, retry=retry, path_params=path_params
        )


async def connect(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    qps: float = 20.0,
    burst: int = 30,
    retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, so one shared default is safe
    gpu_resources: Sequence[str] = (convert.GPU_RESOURCE,),
    plurals: Mapping[str, str] | None = None,
    now: Callable[[], datetime] = utc_now,
) -> KubeClient:
    """A `KubeClient` with in-cluster credentials, or those of a kubeconfig (the default one when None).

    `now` stamps what the client writes (condition heartbeats and transitions, taints' `timeAdded`, Events):
    the service passes its own clock, so everything it writes reads one clock.

    Raises `KubeError` when no credentials can be loaded. The official client's own retries stay off: this
    client retries, with its own policy.
    """
    configuration = k8s.Configuration()
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (k8s_config.ConfigException, OSError, ValueError) as exc:
        source = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise errors.KubeError(f"cannot load Kubernetes credentials from the {source}: {exc}") from exc
    configuration.retries = None
    # The environment's proxy, read once here rather than by aiohttp on every request (see `proxies`).
    if not configuration.proxy and (found := proxies.env_proxy(str(configuration.host))) is not None:
        configuration.proxy, configuration.proxy_headers = found.url, found.headers
    configuration.client_session_kwargs = {**(configuration.client_session_kwargs or {}), "trust_env": False}
    return KubeClient(
        k8s.ApiClient(configuration=configuration),
        qps=qps,
        burst=burst,
        retry=retry,
        gpu_resources=gpu_resources,
        plurals=plurals,
        now=now,
    )


if TYPE_CHECKING:  # mypy proves the real client is a `KubePort`, a `ReviewPort`, an `AuditPort`

    def _is_a_port(client: KubeClient) -> KubePort:
        return client

    def _is_a_review_port(client: KubeClient) -> ReviewPort:
        return client

    def _is_an_audit_port(client: KubeClient) -> AuditPort:
        return client

    def _is_a_queue_port(client: KubeClient) -> QueuePort:
        return client
