"""Delivers spooled events to the service, oldest first, at most 100 per request, until each is accepted.

2xx removes a batch from the spool; the service admits each event on its own, so a 2xx may still name
events it refused (`rejected`, kept in its dead-letter list): those are logged and counted as rejected.
5xx (a follower answers 503 during failover), 429, timeouts and connection errors keep it and retry after
a capped, jittered exponential backoff (or the server's Retry-After, capped the same). Any other 4xx is a
permanent rejection: logged and dropped, never retried, so one bad event can't block the queue. An event's id never changes, so a batch resent after a lost 2xx
is deduplicated by the service. This module does no NVML and builds no events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import aiohttp
import pydantic

from app import backoff
from app.agent import wire
from app.agent.selfmetrics import AgentMetrics
from app.agent.spool import Spool, SpooledEvent

log = logging.getLogger(__name__)


def delivery_backoff(initial_s: float, max_s: float) -> backoff.Backoff:
    """The wait before retry n (from 1): between half and all of min(max_s, initial_s · 2^(n-1)).

    The one backoff on half the values, stretched by up to double, so agents that lost the service together
    do not come back in step; its `longest` is `max_s`.
    """
    return backoff.Backoff(base=initial_s / 2, cap=max_s / 2, jitter=1.0)


class Outcome(StrEnum):
    IDLE = "idle"
    DELIVERED = "delivered"
    RETRY = "retry"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class PushResult:
    outcome: Outcome
    # Seconds the server asked us to wait (Retry-After), already capped; None to use the backoff.
    retry_after_s: float | None = None
    # Of a delivered batch, how many events the service refused one by one (its answer's `rejected`).
    refused: int = 0


@dataclass(frozen=True, slots=True)
class TokenSource:
    """The bearer token, inline or from a file read at every push so a rotated Secret is picked up."""

    token: str | None = None
    token_file: Path | None = None

    def read(self) -> str | None:
        if self.token_file is not None:
            return self.token_file.read_text(encoding="utf-8").strip() or None
        return self.token


class Pusher:
    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        url: str,
        node: str,
        spool: Spool,
        metrics: AgentMetrics,
        tokens: TokenSource,
        backoff: backoff.Backoff,
        rng: random.Random,
        timeout_s: float = 10.0,
    ) -> None:
        self._session = session
        self._url = url
        self._node = node
        self._spool = spool
        self._metrics = metrics
        self._tokens = tokens
        self._backoff = backoff
        self._rng = rng
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._batch_max = wire.MAX_EVENTS_PER_REQUEST
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """New events are in the spool; wakes an idle pusher (a pusher in backoff keeps waiting)."""
        self._wake.set()

    async def run(self) -> None:
        attempt = 0
        while True:
            self._wake.clear()
            try:
                result = await self.push_once()
            except Exception:
                # A spool or serialisation fault must not end delivery for good; it is retried like an outage.
                log.exception("push failed unexpectedly")
                result = self._retry()
            if result.outcome is Outcome.IDLE:
                await self._wake.wait()
            elif result.outcome is Outcome.RETRY:
                delay = result.retry_after_s
                if delay is None:
                    delay = self._backoff.delay(attempt + 1, rand=self._rng.random())
                attempt += 1
                log.info("push attempt %d failed; will retry in %.2fs", attempt, delay)
                await asyncio.sleep(delay)
            else:
                attempt = 0

    async def push_once(self) -> PushResult:
        """Send the oldest batch once and settle the spool for it."""
        rows = await asyncio.to_thread(self._spool.peek, self._batch_max)
        if not rows:
            return PushResult(Outcome.IDLE)
        events, unreadable = _parse(rows)
        if unreadable:
            log.error("dropping %d unreadable spooled events", len(unreadable))
            await self._settle(unreadable)
        if not events:
            return PushResult(Outcome.REJECTED)
        try:
            token = await asyncio.to_thread(self._tokens.read)
        except OSError as exc:
            log.error("cannot read the bearer token file: %s; events stay spooled", exc)
            return self._retry()
        result = await self._post(events, token)
        if result.outcome is Outcome.DELIVERED:
            self._metrics.delivered.inc(len(events) - result.refused)
            self._metrics.rejected.inc(result.refused)
        elif result.outcome is Outcome.REJECTED:
            self._metrics.rejected.inc(len(events))
        if result.outcome is not Outcome.RETRY:
            await self._settle([row.seq for row in rows if row.seq not in unreadable])
        return result

    async def _post(self, events: Sequence[wire.EventPayload], token: str | None) -> PushResult:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = wire.batch_body(self._node, events)
        try:
            async with self._session.post(
                self._url, data=body, headers=headers, timeout=self._timeout
            ) as resp:
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
                text = await resp.text()
                detail = text[:300] if status >= 400 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("service unreachable at %s: %s", self._url, exc or type(exc).__name__)
            return self._retry()
        if 200 <= status < 300:
            self._metrics.push_attempts.labels(outcome="delivered").inc()
            self._batch_max = wire.MAX_EVENTS_PER_REQUEST
            return PushResult(Outcome.DELIVERED, refused=_refused(text, sent=len(events)))
        if status == 413 and len(events) > 1:
            self._batch_max = max(1, len(events) // 2)
            log.warning(
                "service refused %d events as too large; retrying %d at a time", len(events), self._batch_max
            )
            return self._retry(0.0)
        if 400 <= status < 500 and status != 429:
            self._metrics.push_attempts.labels(outcome="rejected").inc()
            log.error(
                "service rejected %d events with HTTP %d (dropped, not retried): %s",
                len(events),
                status,
                detail,
            )
            return PushResult(Outcome.REJECTED)
        log.warning("service answered HTTP %d; %d events stay spooled", status, len(events))
        return self._retry(self._retry_after(retry_after))

    def _retry(self, after_s: float | None = None) -> PushResult:
        self._metrics.push_attempts.labels(outcome="retry").inc()
        return PushResult(Outcome.RETRY, after_s)

    def _retry_after(self, header: str | None) -> float | None:
        if header is None:
            return None
        try:
            seconds = float(header)
        except ValueError:
            return None  # an HTTP date: rare from our own service, the backoff will do
        return max(0.0, min(seconds, self._backoff.longest))

    async def _settle(self, seqs: Sequence[int]) -> None:
        await asyncio.to_thread(self._spool.remove, seqs)
        depth = await asyncio.to_thread(self._spool.depth)
        self._metrics.spool_events.set(depth.events)
        self._metrics.spool_bytes.set(depth.bytes)


def _parse(rows: Sequence[SpooledEvent]) -> tuple[list[wire.EventPayload], list[int]]:
    events: list[wire.EventPayload] = []
    unreadable: list[int] = []
    for row in rows:
        try:
            events.append(wire.EventPayload.model_validate_json(row.body))
        except pydantic.ValidationError:
            unreadable.append(row.seq)
    return events, unreadable


def _refused(answer: str, *, sent: int) -> int:
    """How many events of a 2xx the service refused one by one; 0 when its answer does not say."""
    try:
        body = json.loads(answer)
    except ValueError:
        return 0
    refused = body.get("rejected") if isinstance(body, dict) else None
    if not isinstance(refused, int) or isinstance(refused, bool) or refused <= 0:
        return 0
    rejections = body.get("rejections")
    first = rejections[0] if isinstance(rejections, list) and rejections else None
    log.error(
        "service refused %d of %d events (kept in its GET /api/v1/rejected, not retried); first: %s",
        refused,
        sent,
        json.dumps(first)[:300],
    )
    return min(refused, sent)
