"""The one exponential backoff: how long to wait before the n-th retry of anything.

Every retry in Sickbay waits by this arithmetic: API calls (`kube.retries`), node writes that lost a race
(`kube.conflicts`), evictions a budget refused (`decide.drain_deadline`), polls for departing pods (`act.departures`),
inbox rows that failed (`pipeline`), restarts of a workload and re-checks of a soft signal (`decide`, from
the policy's `retry`), the agent's deliveries (`agent.pusher`), the leader's renewals and crashed
background jobs. Callers own what is retried and when to stop; this value only says how long to wait.

Pure and standard-library only, so every layer may import it: randomness is passed in as a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """The n-th wait is base · factor^(n-1), at most `cap`, stretched by a random factor in [1, 1 + jitter).

    base:   seconds of the first wait.
    factor: growth from one wait to the next (1 keeps every wait at `base`).
    cap:    the longest wait before jitter (infinite by default).
    jitter: how far a wait may be stretched, so replicas and agents do not retry in step (0: never).
    """

    base: float
    factor: float = 2.0
    cap: float = math.inf
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not self.base >= 0 or not self.cap >= 0 or not self.jitter >= 0:
            raise ValueError(f"base, cap and jitter must not be negative: {self}")
        if not self.factor >= 1:
            raise ValueError(f"factor must be at least 1 (waits never shrink), got {self.factor}")

    def delay(self, n: int, *, rand: float = 0.0) -> float:
        """Seconds to wait before retry `n` (1 = the first retry); `rand` is uniform in [0, 1)."""
        if n < 1:
            raise ValueError(f"retries count from 1, got {n}")
        if not 0.0 <= rand < 1.0:
            raise ValueError(f"rand must be in [0, 1), got {rand}")
        try:
            grown = self.base * self.factor ** (n - 1)
        except OverflowError:  # a very long outage: far past any cap
            grown = math.inf if self.base > 0 else 0.0
        return min(self.cap, grown) * (1.0 + self.jitter * rand)

    @property
    def longest(self) -> float:
        """The longest wait this backoff can give (a server's Retry-After is capped by it where asked)."""
        return self.cap * (1.0 + self.jitter)
