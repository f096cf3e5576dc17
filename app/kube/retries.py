"""Bounded retries with jittered exponential backoff for calls to the API server.

What is retried is decided by meaning, not by HTTP code: `UnavailableError` (5xx, timeouts, connection
errors) and throttling `TooManyRequestsError` are retried; a 429 that says a PodDisruptionBudget forbids an
eviction is not (the drain logic owns that wait, until its own deadline), and neither are 404, 409, 403 or
any other 4xx, because asking again cannot change the answer. A 429's `Retry-After` replaces the computed
backoff for that attempt.

Sleeping and randomness are injectable so tests run on fake time. This module must not import `kubernetes`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app import backoff
from app.kube import errors

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try one API call.

    attempts: total tries, the first included (1 = never retry).
    base:     the first backoff in seconds; each further one doubles, up to `cap`.
    cap:      the longest computed backoff (a server's Retry-After may ask for longer and is honoured).
    jitter:   each backoff is stretched by a random factor in [1, 1 + jitter), so replicas do not retry in step.
    timeout:  seconds one HTTP attempt may take, from sending the request to reading the whole response.
    """

    attempts: int = 5
    base: float = 0.2
    cap: float = 5.0
    jitter: float = 0.5
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.base < 0 or self.cap < 0 or self.jitter < 0:
            raise ValueError("base, cap and jitter must not be negative")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")

    @property
    def waits(self) -> backoff.Backoff:
        """The backoff between attempts: `base` doubling up to `cap`, stretched by `jitter`."""
        return backoff.Backoff(base=self.base, cap=self.cap, jitter=self.jitter)


def is_retryable(error: errors.KubeError) -> bool:
    if isinstance(error, errors.TooManyRequestsError):
        return not error.budget
    return isinstance(error, errors.UnavailableError)


def describe(error: errors.KubeError, what: str) -> str:
    """How an attempt ended, for a log line about `what`: "failed with 503", "timed out after 10s"."""
    if error.status is not None:
        return f"failed with {error.status}"
    text = str(error)
    return text[len(what) :].strip() if text.startswith(what) else f"failed: {text}"


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    policy: RetryPolicy,
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    on_attempt: Callable[[], None] | None = None,
) -> T:
    """Run `attempt()` until it succeeds, fails for good, or `policy.attempts` are spent.

    `what` names the call in logs ("PATCH node gpu-1"). The last error is raised unchanged.
    """
    for number in range(1, policy.attempts + 1):
        if on_attempt is not None:
            on_attempt()
        try:
            return await attempt()
        except errors.KubeError as error:
            if not is_retryable(error):
                raise
            if number == policy.attempts:
                if policy.attempts > 1:
                    log.warning(
                        "giving up on %s after %d attempts; the last %s", what, number, describe(error, what)
                    )
                raise
            retry_after = error.retry_after if isinstance(error, errors.TooManyRequestsError) else None
            delay = retry_after if retry_after is not None else policy.waits.delay(number, rand=rand())
            log.info(
                "attempt %d/%d of %s %s; will retry in %.1fs",
                number,
                policy.attempts,
                what,
                describe(error, what),
                delay,
            )
            await sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
