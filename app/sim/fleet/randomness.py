"""Seeded randomness for the simulator: separate streams, Poisson draws and observation noise.

Two kinds of randomness, for determinism:
- *Streams* (`random.Random`, one per concern, derived from the seed) drive state changes. Keeping the
  failure process on its own stream makes the failures of a seed the same whatever the step size.
- *Observation noise* is a pure function of (seed, GPU, time, field): reading the metrics any number of
  times (scrapes, datasets) never consumes a stream, so observing cannot change what happens.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

_MASK = (1 << 21) - 1
_SCALE = 2.0 / _MASK


@dataclass(frozen=True, slots=True)
class Streams:
    """The simulator's independent random streams."""

    failures: random.Random
    workloads: random.Random
    ops: random.Random
    precursors: random.Random
    identity: random.Random


def make_streams(seed: int) -> Streams:
    def stream(name: str) -> random.Random:
        return random.Random(f"{seed}:{name}")  # noqa: S311 - simulation, not cryptography

    return Streams(
        failures=stream("failures"),
        workloads=stream("workloads"),
        ops=stream("ops"),
        precursors=stream("precursors"),
        identity=stream("identity"),
    )


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw: Knuth's method for small means, a rounded normal for large ones."""
    if lam <= 0.0:
        return 0
    if lam < 30.0:
        limit = math.exp(-lam)
        count = 0
        product = rng.random()
        while product > limit:
            count += 1
            product *= rng.random()
        return count
    return max(0, round(rng.gauss(lam, math.sqrt(lam))))


def exponential_after(rng: random.Random, now: float, rate_per_s: float) -> float:
    """The time of the next event of a Poisson process with this rate (infinity when the rate is 0)."""
    if rate_per_s <= 0.0:
        return math.inf
    return now + rng.expovariate(rate_per_s)


def choose_weighted(rng: random.Random, items: Sequence[tuple[int, float]]) -> int:
    values = [value for value, _ in items]
    weights = [weight for _, weight in items]
    return rng.choices(values, weights=weights)[0]


def noise(seed: int, serial: int, tick: int, salt: int) -> float:
    """Roughly standard-normal noise that depends only on its arguments (sum of three uniforms).

    Python hashes tuples of ints the same way in every process (PYTHONHASHSEED only affects str/bytes).
    """
    h = hash((seed, serial, tick, salt)) & ((1 << 63) - 1)
    total = (h & _MASK) + ((h >> 21) & _MASK) + ((h >> 42) & _MASK)
    return total * _SCALE - 3.0


def unit(seed: int, serial: int, tick: int, salt: int) -> float:
    """A uniform number in [0, 1) that depends only on its arguments."""
    h = hash((seed, serial, tick, salt, 1)) & ((1 << 63) - 1)
    return (h & 0xFFFFFFFF) / 4294967296.0


def gpu_uuid(rng: random.Random) -> str:
    """A GPU UUID in NVML's spelling: GPU-8-4-4-4-12 lowercase hex digits."""
    digits = f"{rng.getrandbits(128):032x}"
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
