"""Client-side request pacing: a token bucket like client-go's (20 requests/s, bursts of 30 by default).

The API server protects itself with API Priority and Fairness and answers 429 when a client is too eager; a
well-behaved client paces itself first, so a burst of work (draining fifty pods, a reconcile sweep) does not
crowd out other controllers. Every HTTP attempt, retries included, takes one token.

Time comes from injectable callables (the event loop's clock and `asyncio.sleep` by default), so tests can
measure the pacing on a fake clock. This module must not import `kubernetes` or do any I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


def loop_clock() -> float:
    """Seconds on the running event loop's monotonic clock."""
    return asyncio.get_running_loop().time()


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; `acquire()` waits for one.

    Callers reserve a token first and then sleep until it is due (golang.org/x/time/rate's reservation
    model), so concurrent callers are served in arrival order and never wake up just to wait again.
    """

    def __init__(
        self,
        *,
        qps: float,
        burst: int,
        clock: Clock = loop_clock,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated: float | None = None

    def _refill(self) -> None:
        now = self._clock()
        if self._updated is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    def reserve(self) -> float:
        """Take one token now and return how long the caller must wait before using it (0 if none)."""
        self._refill()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def reserve_within(self, max_wait: float) -> float | None:
        """Like `reserve`, but only when the token is due within `max_wait` seconds: the wait, or None
        (and nothing taken) when the line is longer than that."""
        self._refill()
        wait = 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.qps
        if wait > max_wait:
            return None
        self._tokens -= 1.0
        return wait

    def try_take(self) -> bool:
        """Take one token if one is saved up now; never waits, never borrows from the future.

        For work that should rather be refused than queued (a flood of readers): it cannot push back the
        callers that `reserve` serves in order.
        """
        self._refill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def acquire(self) -> float:
        """Wait for a token; returns the seconds waited (0 when one was saved up)."""
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
        return delay
