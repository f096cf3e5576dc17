"""The one road every request to the API server takes: paced, retried, answered as JSON or a typed error.

- a client-side token bucket (client-go's 20 qps / burst 30 by default) taken by every HTTP attempt;
- bounded retries with jittered exponential backoff (`app.kube.retries`) on 5xx, timeouts, connection
  errors and throttling 429s (honouring `Retry-After`), never on 404/409/403/other 4xx, and never on an
  eviction a PodDisruptionBudget refuses;
- raw requests through the official client's transport (auth, TLS, kubeconfig) for the hot paths.

It knows no resource: `nodes`, `pods`, `events` and `custom_objects` build the calls, `KubeClient`
(`app.kube.client`) puts them together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence

import aiohttp
from kubernetes.aio import client as k8s

from app.kube import errors, retries
from app.kube.ratelimit import Clock, Sleep, TokenBucket, loop_clock
from app.kube.responses import JsonObj, Request, request_json
from app.kube.retries import RetryPolicy

log = logging.getLogger(__name__)

COMPONENT = "sickbay"  # the field manager and Event source of every write
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
LIST_RESTARTS = 2  # a list that expires again while starting over meets a churn no retry outruns
Page = Callable[[str | None], Awaitable[aiohttp.ClientResponse]]


class _ContinueExpired(Exception):
    """A later page of a list was refused 410: its snapshot is gone (the first page's 410 is not this)."""

    def __init__(self, error: errors.KubeError) -> None:
        super().__init__(str(error))
        self.error = error


class Transport:
    """Sends requests on one `ApiClient`: `send` for a request built by a generated method, `direct` to
    build one without it, `list_all` for paged lists, `call` for a raw API path."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        qps: float = 20.0,
        burst: int = 30,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, so one shared default is safe
        clock: Clock = loop_clock,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.api = api
        self.retry = retry
        self.bucket = TokenBucket(qps=qps, burst=burst, clock=clock, sleep=sleep)
        self.attempts = 0  # HTTP attempts made, retries included
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.sleep = sleep
        self.rand = rand

    @property
    def timeout(self) -> float:
        return float(self.retry.timeout)

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
        return await self.send(
            what,
            lambda: self.direct(method, path, body=body, limit_s=policy.timeout, path_params=path_params),
            retry=policy,
        )

    async def direct(
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
        limit = self.timeout if limit_s is None else limit_s
        response = await self.api.call_api(*params, _request_timeout=limit)
        return response.response  # type: ignore[no-any-return]

    async def list_all(self, what: str, page: Page) -> list[JsonObj]:
        """All items of a list, page by page (each page is one request, paced and retried on its own).

        Every page reads the first page's snapshot; once the server's history no longer holds it, a later
        page is refused with 410 Expired. The list then starts over, as client-go's pager does
        (tools/pager/pager.go, `FullListIfExpired`), but still in pages: a single unpaged list of a
        100,000-pod fleet is the load paging exists to avoid. Never the error's own continue token: it
        finishes against current state, so the pages would not be one consistent list."""
        restarts = 0
        while True:
            try:
                return await self._pages(what, page)
            except _ContinueExpired as expired:
                if restarts >= LIST_RESTARTS:
                    raise expired.error from expired
                restarts += 1
                exc = expired.error
                log.warning(
                    "%s: continue token expired mid-list (%s); listing again from the start", what, exc
                )

    async def _pages(self, what: str, page: Page) -> list[JsonObj]:
        items: list[JsonObj] = []
        token: str | None = None
        while True:
            try:
                body = await self.send(what, functools.partial(page, token))
            except errors.KubeError as exc:
                if token is not None and exc.status == 410:
                    raise _ContinueExpired(exc) from exc
                raise
            items.extend(item for item in body.get("items") or [] if isinstance(item, dict))
            token = (body.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def send(self, what: str, request: Request, *, retry: RetryPolicy | None = None) -> JsonObj:
        """One logical call: paced, retried per `retry` (default `self.retry`), answered as JSON or a typed
        error. Every request of the client, and of the leader elector through `call`, goes through here."""
        policy = retry or self.retry

        async def attempt() -> JsonObj:
            await self.bucket.acquire()
            return await request_json(what, request, limit_s=float(policy.timeout))

        return await retries.call_with_retries(
            attempt, what=what, policy=policy, sleep=self.sleep, rand=self.rand, on_attempt=self._count
        )

    def _count(self) -> None:
        self.attempts += 1
