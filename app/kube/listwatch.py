"""List and watch one resource over the official client's transport: the two calls an informer makes.

`list_all` pages through the collection and keeps the first page's `metadata.resourceVersion`: a watch
from there replays whatever changed while later pages were read, so the store ends exact whether the
server's pages are a snapshot (kube-apiserver) or current state (the simulator). `watch` opens
`?watch=1&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=T` (`open_watch`; a non-200 answer
is the usual typed error, `responses`) and `events` yields each event's JSON as it arrives; an in-band
ERROR event is the informer's to read. Both take a token of the transport's bucket per request; the watch is not retried
here (the informer resumes it from where it stopped).

Events are split on newlines from raw chunks rather than `readline`, which refuses a line longer than
aiohttp's buffer (a Node with many images is tens of kilobytes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from app.kube import errors
from app.kube.responses import JsonObj, error_from_response
from app.kube.transport import Transport

# kube-apiserver ends a watch after --min-request-timeout (1800 s) to twice that; client-go's reflector
# asks for a random 5-10 minutes (reflector.go `minWatchTimeout`) so a stuck stream is replaced soon.
WATCH_TIMEOUT_S = 300
_READ_MARGIN_S = 30.0  # beyond the server's own timeout, before the client gives up on a silent stream


@dataclass(frozen=True, slots=True)
class Listed:
    items: list[JsonObj]
    resource_version: str


Opener = Callable[..., Awaitable[aiohttp.ClientResponse]]


class ListWatch:
    """One resource's list and watch: `resource` names it in logs and metrics (`nodes`, `pods`)."""

    def __init__(self, transport: Transport, resource: str, opener: Opener, *, page_size: int) -> None:
        self.resource = resource
        self._transport = transport
        self._open = opener
        self._page_size = page_size

    async def list_all(self) -> Listed:
        t = self._transport
        items: list[JsonObj] = []
        version = ""
        token: str | None = None
        while True:
            body = await t.send(
                f"LIST {self.resource}",
                lambda token=token: self._open(  # type: ignore[misc]
                    limit=self._page_size, _continue=token, _request_timeout=t.timeout
                ),
            )
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            meta = body.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                return Listed(items, version)

    async def open_watch(
        self, resource_version: str, *, timeout_s: int = WATCH_TIMEOUT_S
    ) -> aiohttp.ClientResponse:
        """Start a watch from `resource_version`: the open response, its events read by `events`."""
        what = f"WATCH {self.resource}"
        await self._transport.bucket.acquire()
        try:
            response = await self._open(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _request_timeout=timeout_s + _READ_MARGIN_S,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.UnavailableError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status != 200:
            try:
                body = await response.read()
            finally:
                response.release()
            raise error_from_response(what, response.status, body, response.headers)
        return response

    async def events(self, response: aiohttp.ClientResponse) -> AsyncIterator[JsonObj]:
        """Each event of an open watch as it arrives, until the server ends the stream."""
        what = f"WATCH {self.resource}"
        try:
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(what, line)
            if pending.strip():
                yield _event(what, pending)
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise errors.UnavailableError(f"{what} broke off: {type(exc).__name__}: {exc}") from exc
        finally:
            response.release()


def _event(what: str, line: bytes) -> JsonObj:
    try:
        parsed = json.loads(line)
    except ValueError as exc:
        raise errors.UnavailableError(f"{what} sent a line that is not JSON") from exc
    if not isinstance(parsed, dict) or "type" not in parsed:
        raise errors.UnavailableError(f"{what} sent something that is not a watch event")
    return parsed


def nodes(transport: Transport, *, page_size: int) -> ListWatch:
    return ListWatch(
        transport, "nodes", transport.core.list_node_without_preload_content, page_size=page_size
    )


def pods(transport: Transport, *, page_size: int) -> ListWatch:
    """Every pod in every namespace (`/api/v1/pods`)."""
    opener = transport.core.list_pod_for_all_namespaces_without_preload_content
    return ListWatch(transport, "pods", opener, page_size=page_size)
