"""The one read-modify-write loop: read an object, compute the change from what was read, write it with the
read's resourceVersion, and on a 409 (someone else wrote in between) do it all again.

client-go's `retry.RetryOnConflict`, with its `DefaultRetry` waits: a lost race is retried a few times
after a short jittered pause, never by overwriting the other writer's change. Anything but a 409 ends the
loop at once; after the last try the caller's `gave_up` answers, or the 409 is raised. This module only
loops: what is read, decided and written is the caller's `attempt`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app import backoff
from app.kube import errors
from app.kube.ratelimit import Sleep

log = logging.getLogger(__name__)

T = TypeVar("T")
TRIES = 5
# client-go's retry.DefaultRetry: 10 ms, not growing, up to 10 % longer.
WAITS = backoff.Backoff(base=0.01, factor=1.0, jitter=0.1)


async def retry_on_conflict(
    attempt: Callable[[int], Awaitable[T]],
    *,
    what: str,
    tries: int = TRIES,
    waits: backoff.Backoff = WAITS,
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    gave_up: Callable[[], T] | None = None,
) -> T:
    """Run `attempt(n)` (n from 1: read, compute, write with the read's resourceVersion) until it does not
    end in a `ConflictError`, at most `tries` times; then `gave_up()`, or without one the last conflict is
    raised.

    `what` names the object in logs ("node gpu-1"). `n` lets an attempt reuse a read it already holds on
    the first try only, and report how many tries the write took.
    """
    if tries < 1:
        raise ValueError(f"tries must be at least 1, got {tries}")
    for number in range(1, tries + 1):
        try:
            return await attempt(number)
        except errors.ConflictError:
            if number == tries:
                log.info("%s kept changing under us; gave up after %d conflicts", what, tries)
                if gave_up is None:
                    raise
                return gave_up()
            log.info("%s changed under us (attempt %d); reading it again", what, number)
            await sleep(waits.delay(number, rand=rand()))
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
