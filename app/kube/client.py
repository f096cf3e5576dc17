"""`KubeClient`: the `KubePort` on top of the official async client (`kubernetes.aio`).

The official client supplies what is hard to get right: kubeconfig and in-cluster credentials (with token
refresh), TLS, and the generated endpoint methods. This module adds what Sickbay needs around each call:

- a client-side token bucket (client-go's 20 qps / burst 30 by default) taken by every HTTP attempt;
- bounded retries with jittered exponential backoff on 5xx, timeouts, connection errors and throttling 429s
  (honouring `Retry-After`), never on 404/409/403/other 4xx, and never on an eviction a PodDisruptionBudget
  refuses (that 429 goes straight back to the drain logic, which owns the wait);
- typed errors (`app.kube.errors`) instead of HTTP codes;
- domain values instead of API objects (`app.kube.convert`).

Calls use the generated `*_without_preload_content` methods and read the JSON themselves: reads stay tolerant
of fields a newer server adds (the generated models forbid unknown fields), and status codes are checked in
one place. It must not import `app.sim`, and nothing outside `app.kube` may import `kubernetes`.

Custom objects: the plural in the URL is the kind lower-cased plus "s" (`RemediationRequest` →
`remediationrequests`) unless `plurals` maps the kind (or `Kind.group`) to the real one; an object is
namespaced exactly when its manifest has `metadata.namespace`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import secrets
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiohttp
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config
from kubernetes.aio.client.exceptions import OpenApiException

from app import kubenames
from app.domain import Condition, NodePatch, NodeState, PodState
from app.kube import conflicts, convert, errors, retries
from app.kube.port import EventSpec, KubePort
from app.kube.ratelimit import Clock, Sleep, TokenBucket, loop_clock
from app.kube.retries import RetryPolicy

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]
Request = Callable[[], Awaitable[aiohttp.ClientResponse]]

COMPONENT = "sickbay"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
LIST_PAGE_SIZE = 500
CLUSTER_SCOPED_KINDS = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "CustomResourceDefinition"}
)
_CONDITION_WRITE_TRIES = 3
_TAINT_MEMORY = 1024


def utc_now() -> datetime:
    return datetime.now(UTC)


def error_from_response(what: str, status: int, body: bytes, headers: Mapping[str, str]) -> errors.KubeError:
    """The typed error for a non-2xx answer; the API server's `Status.message` becomes the message."""
    text = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        parsed = {}
    status_obj: JsonObj = parsed if isinstance(parsed, dict) else {}
    message = f"{what} failed with {status}: {status_obj.get('message') or text[:200] or 'no message'}"
    if status == 404:
        return errors.NotFoundError(message, status=status)
    if status == 409:
        return errors.ConflictError(message, status=status)
    if status == 403:
        return errors.ForbiddenError(message, status=status)
    if status == 429:
        details = status_obj.get("details") or {}
        causes = (details.get("causes") or []) if isinstance(details, dict) else []
        budget = any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes)
        budget = budget or "disruption budget" in str(status_obj.get("message", "")).lower()
        retry_after = _retry_after(headers.get("Retry-After"))
        if retry_after is None and isinstance(details, dict):
            retry_after = _retry_after(details.get("retryAfterSeconds"))
        return errors.TooManyRequestsError(message, retry_after=retry_after, budget=budget)
    if status >= 500:
        return errors.UnavailableError(message, status=status)
    return errors.KubeError(message, status=status)


async def request_json(what: str, request: Request, *, limit_s: float) -> JsonObj:
    """One HTTP attempt: send, read the whole answer within `limit_s` seconds, return its JSON or raise a typed error."""
    try:
        async with asyncio.timeout(limit_s):
            response = await request()
            try:
                body = await response.read()
            finally:
                response.release()
    except TimeoutError as exc:
        raise errors.UnavailableError(f"{what} timed out after {limit_s:g}s") from exc
    except aiohttp.ClientError as exc:
        raise errors.UnavailableError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    except OpenApiException as exc:  # raised by the client itself, e.g. for a body it cannot send
        raise errors.KubeError(f"{what} failed: {exc}", status=getattr(exc, "status", None) or None) from exc
    if not 200 <= response.status < 300:
        raise error_from_response(what, response.status, body, response.headers)
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise errors.UnavailableError(
            f"{what} answered {response.status} with a body that is not JSON"
        ) from exc
    return parsed if isinstance(parsed, dict) else {"items": parsed}


def _retry_after(raw: object) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds; an HTTP date is ignored)."""
    try:
        seconds = float(str(raw))
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def plural_of(kind: str, group: str, plurals: Mapping[str, str]) -> str:
    """The resource name of a custom kind: `plurals["Kind.group"]`, `plurals["Kind"]`, or `kind.lower() + "s"`."""
    return plurals.get(f"{kind}.{group}") or plurals.get(kind) or kind.lower() + "s"


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
        self.api = api
        self.retry = retry
        self.bucket = TokenBucket(qps=qps, burst=burst, clock=clock, sleep=sleep)
        self.gpu_resources = tuple(gpu_resources)
        self.plurals = dict(plurals or {})
        self.instance = instance or socket.gethostname()
        self.page_size = page_size
        self.attempts = 0  # HTTP attempts made, retries included
        self._core = k8s.CoreV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)
        self._sleep = sleep
        self._rand = rand
        self._now = now
        # Raw taints of recently read nodes by (name, resourceVersion), so a patch that rewrites the taint
        # list keeps the `timeAdded` of taints it leaves in place.
        self._taints: OrderedDict[tuple[str, str], list[JsonObj]] = OrderedDict()

    async def close(self) -> None:
        await self.api.close()  # type: ignore[no-untyped-call]

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    # --- nodes ---------------------------------------------------------------------------------------

    async def get_node(self, name: str) -> NodeState:
        return self._node_state(await self._get_node_json(name))

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        items = await self._list(
            "LIST nodes",
            lambda token: self._core.list_node_without_preload_content(
                label_selector=label_selector,
                limit=self.page_size,
                _continue=token,
                _request_timeout=self._timeout,
            ),
        )
        return [self._node_state(item) for item in items]

    async def patch_node(self, patch: NodePatch) -> NodeState:
        """One merge patch with labels, annotations, taints and cordon, guarded by the read resourceVersion."""
        _node_name(patch.node)
        if patch.empty:
            return await self.get_node(patch.node)
        body = convert.node_merge_patch(
            patch, previous_taints=self._taints.get((patch.node, patch.resource_version), ())
        )
        updated = await self._send(
            f"PATCH node {patch.node}",
            lambda: self._direct(
                "PATCH",
                "/api/v1/nodes/{name}",
                path_params={"name": patch.node},
                query=(("fieldManager", COMPONENT),),
                body=body,
                content_type=MERGE_PATCH,
            ),
        )
        return self._node_state(updated)

    async def set_node_condition(self, node: str, condition: Condition) -> None:
        """Set one `status.conditions` entry (merged by type); the transition time moves only on a status change.

        The node is read first to know the current status; the write carries that read's resourceVersion, and a
        409 (the kubelet wrote in between) re-reads and tries again.
        """

        async def attempt(number: int) -> None:
            raw = await self._get_node_json(node)
            current = convert.node_state(raw, gpu_resources=self.gpu_resources).condition(condition.type)
            body = convert.condition_patch(
                condition,
                current=current,
                now=self._now(),
                resource_version=str((raw.get("metadata") or {}).get("resourceVersion") or ""),
            )
            await self._patch_node_status(node, body)

        await conflicts.retry_on_conflict(
            attempt, what=f"node {node}", tries=_CONDITION_WRITE_TRIES, sleep=self._sleep, rand=self._rand
        )

    async def _patch_node_status(self, node: str, body: JsonObj) -> None:
        _node_name(node)
        await self._send(
            f"PATCH node {node}/status",
            lambda: self._core.patch_node_status_without_preload_content(
                node,
                body,
                field_manager=COMPONENT,
                _content_type=STRATEGIC_MERGE_PATCH,
                _request_timeout=self._timeout,
            ),
        )

    # --- pods ----------------------------------------------------------------------------------------

    async def list_pods(
        self,
        *,
        node: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[PodState]:
        if node:
            _node_name(node)
        if namespace:
            _namespace(namespace)
        field_selector = f"spec.nodeName={node}" if node else None
        where = (f" in {namespace}" if namespace else "") + (f" on node {node}" if node else "")

        def page(token: str | None) -> Awaitable[aiohttp.ClientResponse]:
            if namespace:
                return self._core.list_namespaced_pod_without_preload_content(
                    namespace,
                    field_selector=field_selector,
                    label_selector=label_selector,
                    limit=self.page_size,
                    _continue=token,
                    _request_timeout=self._timeout,
                )
            query: list[tuple[str, str | int]] = [("limit", self.page_size)]
            query += [
                (k, v)
                for k, v in (
                    ("fieldSelector", field_selector),
                    ("labelSelector", label_selector),
                    ("continue", token),
                )
                if v
            ]
            return self._direct("GET", "/api/v1/pods", query=query)

        items = await self._list(f"LIST pods{where}", page)
        return [convert.pod_state(item, gpu_resources=self.gpu_resources) for item in items]

    async def evict_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """policy/v1 Eviction. A PDB refusal raises `TooManyRequestsError(budget=True)` at once, without retries.

        With `uid`, only that incarnation is evicted: the eviction's DeleteOptions carry it as a precondition,
        and a pod recreated under the same name answers 409 (ConflictError).
        """
        _pod_name(namespace, name)
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)) if uid else None
        body = k8s.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=options,
        )
        await self._send(
            f"EVICT pod {namespace}/{name}",
            lambda: self._core.create_namespaced_pod_eviction_without_preload_content(
                name, namespace, body, field_manager=COMPONENT, _request_timeout=self._timeout
            ),
        )

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete a pod; with `uid`, only that incarnation of it (409 ConflictError if the name was reused)."""
        _pod_name(namespace, name)
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)) if uid else None
        await self._send(
            f"DELETE pod {namespace}/{name}",
            lambda: self._core.delete_namespaced_pod_without_preload_content(
                name, namespace, body=options, _request_timeout=self._timeout
            ),
        )

    async def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> None:
        _pod_name(namespace, name)
        body = convert.labels_patch(labels)
        await self._send(
            f"PATCH pod {namespace}/{name}",
            lambda: self._core.patch_namespaced_pod_without_preload_content(
                name,
                namespace,
                body,
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=self._timeout,
            ),
        )

    # --- events and custom objects -------------------------------------------------------------------

    async def create_event(self, event: EventSpec) -> None:
        """A core/v1 Event from component "sickbay", named `<object>.<random hex>` like client-go's recorder.

        It is a legacy-style Event (first/last timestamp and count, no `eventTime`), which every reader of
        core/v1 Events understands; setting `eventTime` would make the API server require the events.k8s.io
        fields (`action`, `reportingController`) as well.
        """
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
            reporting_instance=self.instance[:128],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            await self._send(
                f"CREATE event about {event.kind} {event.name}",
                lambda: self._core.create_namespaced_event_without_preload_content(
                    event.namespace, body, field_manager=COMPONENT, _request_timeout=self._timeout
                ),
            )
        except errors.ConflictError:
            # The name is random, so AlreadyExists can only mean an earlier attempt of ours got through.
            log.debug("event %s already exists; an earlier attempt created it", body.metadata.name)

    async def create_custom_object(self, manifest: Mapping[str, object]) -> None:
        """Create any custom resource from its manifest (see the module docstring for the plural and scope)."""
        api_version = str(manifest.get("apiVersion") or "")
        kind = str(manifest.get("kind") or "")
        metadata = manifest.get("metadata")
        meta: Mapping[str, object] = metadata if isinstance(metadata, Mapping) else {}
        group, _, version = api_version.rpartition("/")
        if not group or not version or not kind:
            raise ValueError(
                f"a custom object needs apiVersion group/version and kind, got {api_version!r}/{kind!r}"
            )
        plural = plural_of(kind, group, self.plurals)
        namespace = str(meta.get("namespace") or "")
        body = dict(manifest)
        what = f"CREATE {kind} {namespace + '/' if namespace else ''}{meta.get('name') or meta.get('generateName')}"
        if namespace:
            await self._send(
                what,
                lambda: self._custom.create_namespaced_custom_object_without_preload_content(
                    group,
                    version,
                    namespace,
                    plural,
                    body,
                    field_manager=COMPONENT,
                    _request_timeout=self._timeout,
                ),
            )
        else:
            await self._send(
                what,
                lambda: self._custom.create_cluster_custom_object_without_preload_content(
                    group, version, plural, body, field_manager=COMPONENT, _request_timeout=self._timeout
                ),
            )

    # --- plumbing ------------------------------------------------------------------------------------

    @property
    def _timeout(self) -> float:
        return float(self.retry.timeout)

    def _node_state(self, raw: JsonObj) -> NodeState:
        state = convert.node_state(raw, gpu_resources=self.gpu_resources)
        taints = (raw.get("spec") or {}).get("taints") or []
        self._taints[(state.name, state.resource_version)] = [t for t in taints if isinstance(t, dict)]
        while len(self._taints) > _TAINT_MEMORY:
            self._taints.popitem(last=False)
        return state

    async def _get_node_json(self, name: str) -> JsonObj:
        _node_name(name)
        return await self._send(
            f"GET node {name}",
            lambda: self._direct("GET", "/api/v1/nodes/{name}", path_params={"name": name}),
        )

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
        """One logical call on a raw API path (`/apis/…/leases/{name}`), for the callers in `app.kube` that
        have no generated method worth its cost: paced by the token bucket, retried per `retry` (the client's
        own policy by default), answered as JSON or a typed error. The leader elector's Lease calls use it."""
        policy = retry or self.retry
        return await self._send(
            what,
            lambda: self._direct(method, path, body=body, limit_s=policy.timeout, path_params=path_params),
            retry=policy,
        )

    async def _direct(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str | int]] = (),
        body: JsonObj | None = None,
        content_type: str = "application/json",
        limit_s: float | None = None,
        path_params: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """One request through the official client's transport (auth, TLS, kubeconfig), without the generated
        method around it: those validate every argument with pydantic on each call, which is most of the CPU a
        storm of node reads and writes costs. The one place a raw request is built: the quarantine path and
        `call` use it."""
        params = await self.api.param_serialize(
            method=method,
            resource_path=path,
            path_params=dict(path_params or {}),
            query_params=list(query),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        limit = self._timeout if limit_s is None else limit_s
        response = await self.api.call_api(*params, _request_timeout=limit)
        return response.response  # type: ignore[no-any-return]

    async def _list(
        self, what: str, page: Callable[[str | None], Awaitable[aiohttp.ClientResponse]]
    ) -> list[JsonObj]:
        """All items of a list, page by page (each page is one request, paced and retried on its own)."""
        items: list[JsonObj] = []
        token: str | None = None
        while True:
            body = await self._send(what, functools.partial(page, token))
            items.extend(item for item in body.get("items") or [] if isinstance(item, dict))
            token = (body.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def _send(self, what: str, request: Request, *, retry: RetryPolicy | None = None) -> JsonObj:
        """One logical call: paced, retried per `retry` (default `self.retry`), answered as JSON or a typed
        error. Every request of the client, and of the leader elector through `call`, goes through here."""
        policy = retry or self.retry

        async def attempt() -> JsonObj:
            await self.bucket.acquire()
            return await self._attempt(what, request, limit_s=float(policy.timeout))

        return await retries.call_with_retries(
            attempt, what=what, policy=policy, sleep=self._sleep, rand=self._rand, on_attempt=self._count
        )

    def _count(self) -> None:
        self.attempts += 1

    async def _attempt(self, what: str, request: Request, *, limit_s: float) -> JsonObj:
        return await request_json(what, request, limit_s=limit_s)


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
    return KubeClient(
        k8s.ApiClient(configuration=configuration),
        qps=qps,
        burst=burst,
        retry=retry,
        gpu_resources=gpu_resources,
        plurals=plurals,
        now=now,
    )


if TYPE_CHECKING:  # mypy proves that the real client is a `KubePort`

    def _is_a_port(client: KubeClient) -> KubePort:
        return client


def _checked(check: Callable[[str], str | None], value: str, *, what: str) -> None:
    """Names reach URL paths: anything that is not a Kubernetes name is refused before a request is built
    (`..` would otherwise address the collection or the namespace above it)."""
    problem = check(value)
    if problem is not None:
        raise errors.InvalidNameError(f"refused to call the API with an invalid {what} name: {problem}")


def _node_name(name: str) -> None:
    _checked(kubenames.subdomain_problem, name, what="node")


def _namespace(name: str) -> None:
    _checked(kubenames.label_problem, name, what="namespace")


def _pod_name(namespace: str, name: str) -> None:
    _namespace(namespace)
    _checked(kubenames.subdomain_problem, name, what="pod")
