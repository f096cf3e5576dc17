"""glibc's mmap threshold, lowered while Prometheus' answers are read into arrays.

glibc serves an allocation of at least the mmap threshold with its own `mmap`, returned to the kernel
when freed; below it, from the heap, whose freed space is reused but rarely returned. The threshold
starts at 128 KiB and, by default, rises to the size of each mmapped block freed (up to 32 MiB), so after
a scoring cycle's first large arrays are freed its later ones, 1-8 MB each at 80,000 GPUs, come from the
heap and fragment it between long-lived objects: at 10,000 nodes a later cycle peaked ~140 MiB above the
first, and the first ~200 MiB above what it peaks at with the threshold fixed at 1 MiB while it reads
(`docs/benchmarks.md`). Only while it reads: computing features from a raw window makes many short-lived
temporaries of a few MB, and each one mmapped afresh (zeroed pages, faulted in) made that 2-2.5x slower.
So the threshold is `size` while any reader is inside `lowered()`, and glibc's largest, 32 MiB (where its
own threshold ends up), between reads; the heap's trim threshold twice either, as glibc keeps it.

Set with `mallopt(M_MMAP_THRESHOLD)` (glibc's `mallopt(3)`); nothing is changed where the environment
sets `MALLOC_MMAP_THRESHOLD_` (it rules), where `size` is 0, or where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MAX_THRESHOLD = 32 * 2**20  # glibc's HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses more
ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"

_lock = threading.Lock()
_readers = 0  # readers inside `lowered()`, in every thread


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's mallopt, or None (said once) where the threshold is not this module's to set."""
    if ENVIRONMENT in os.environ:
        log.info("malloc's mmap threshold is %s from the environment; not changed", os.environ[ENVIRONMENT])
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.info("no mallopt in this C library: malloc's mmap threshold left as it is")
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    setter: Callable[[int, int], int] = mallopt
    return setter


def check(size: int) -> int:
    """`size` where glibc would take it (0: leave the threshold alone), else ValueError."""
    if not 0 <= size <= MAX_THRESHOLD:
        raise ValueError(f"an mmap threshold of {size} bytes is outside glibc's [0, {MAX_THRESHOLD}]")
    return size


@contextmanager
def lowered(size: int) -> Iterator[bool]:
    """Inside: glibc's mmap threshold at `size` bytes (for every thread, while any reader is inside);
    after the last reader leaves, at 32 MiB. Yields whether the threshold is this module's to set."""
    global _readers  # noqa: PLW0603 - the threshold is the process'; so is the count of readers inside
    mallopt = _mallopt() if check(size) else None
    if mallopt is None:
        yield False
        return
    with _lock:
        _readers += 1
        if _readers == 1:
            _set(mallopt, size)
    try:
        yield True
    finally:
        with _lock:
            _readers -= 1
            if _readers == 0:
                _set(mallopt, MAX_THRESHOLD)


def _set(mallopt: Callable[[int, int], int], size: int) -> None:
    """The mmap threshold at `size`, and the heap's top trimmed above twice that, as glibc's own sliding
    threshold keeps them (setting one stops glibc moving either; a trim threshold left at 128 KiB would
    hand the heap's top back after every large temporary, to fault it in again for the next)."""
    mallopt(M_MMAP_THRESHOLD, size)
    mallopt(M_TRIM_THRESHOLD, 2 * size)
