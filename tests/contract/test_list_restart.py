"""A paged list whose snapshot expires between pages starts over, as client-go's pager does.

Over HTTP with the official client's transport against the simulator, whose etcd-like history can be
compacted between two pages (kube-apiserver then answers the later page 410 Expired).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from kubernetes.aio import client as aclient

from app.kube import errors
from app.kube.transport import LIST_RESTARTS, Transport
from app.sim.kubeapi import KubeApiServer
from tests.contract.conftest import PodFactory


class OnePodPages:
    """Pages of one pod each; `after_first(pass_number)` runs after each pass's first page."""

    def __init__(
        self, transport: Transport, namespace: str, after_first: Callable[[int], Awaitable[None]]
    ) -> None:
        self.requests = 0
        self.passes = 0
        self._transport = transport
        self._namespace = namespace
        self._after_first = after_first

    async def __call__(self, token: str | None) -> aiohttp.ClientResponse:
        t = self._transport
        response: aiohttp.ClientResponse = await t.core.list_namespaced_pod_without_preload_content(
            self._namespace, limit=1, _continue=token, _request_timeout=t.timeout
        )
        self.requests += 1
        if token is None:
            self.passes += 1
            await self._after_first(self.passes)
        return response


async def test_an_expired_continue_token_lists_again_from_the_start(
    sim: KubeApiServer,
    api_client: aclient.ApiClient,
    namespace: str,
    make_pod: PodFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in ("a", "b", "c"):
        await make_pod(name=name)

    async def write_then_compact(passes: int) -> None:
        if passes == 1:  # a write after the first snapshot, then etcd's compaction forgets the snapshot
            await make_pod(name="b2")
            sim.compact_watch_history()

    page = OnePodPages(Transport(api_client), namespace, write_then_compact)
    with caplog.at_level(logging.WARNING, logger="app.kube.transport"):
        items = await Transport(api_client).list_all("LIST pods", page)

    assert [item["metadata"]["name"] for item in items] == ["a", "b", "b2", "c"]  # one list, nothing twice
    assert page.requests == 1 + 1 + 4  # the first page, its refused successor, then a whole second pass
    assert "expired mid-list" in caplog.text


async def test_a_list_that_keeps_expiring_raises_the_410(
    sim: KubeApiServer, api_client: aclient.ApiClient, namespace: str, make_pod: PodFactory
) -> None:
    for name in ("a", "b"):
        await make_pod(name=name)

    async def churn(passes: int) -> None:
        await make_pod(name=f"n{passes}")
        sim.compact_watch_history()

    page = OnePodPages(Transport(api_client), namespace, churn)
    with pytest.raises(errors.KubeError) as caught:
        await Transport(api_client).list_all("LIST pods", page)
    assert caught.value.status == 410
    assert page.passes == 1 + LIST_RESTARTS  # the first pass and each restart, then it gives up
