"""glibc's mmap threshold, fixed for risk scoring's large arrays.

glibc serves an allocation of at least the mmap threshold with its own `mmap`, returned to the kernel
when freed; below it, from the heap, whose freed space is reused but rarely returned. The threshold
starts at 128 KiB and, by default, rises to the size of each mmapped block freed (up to 32 MiB), so after
a scoring cycle's first large arrays are freed its later ones, 1-8 MB each at 80,000 GPUs, come from the
heap and fragment it between long-lived objects: at 10,000 nodes a later cycle peaked ~140 MiB above the
first, and both ~190 MiB above a fixed 1 MiB threshold, for ~1-2 s more CPU a cycle (`docs/benchmarks.md`).
Fixing the threshold (`mallopt(M_MMAP_THRESHOLD)`, which also stops it rising; glibc's `mallopt(3)`) is
the same as the environment variable `MALLOC_MMAP_THRESHOLD_`, which, where set, is left to rule.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
MAX_THRESHOLD = 32 * 2**20  # glibc's HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses more
ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"


def fix_mmap_threshold(size: int) -> bool:
    """Fix glibc's mmap threshold at `size` bytes (0: leave glibc's own); True when it was set here.

    Not set where the environment variable already sets it, or the C library is not glibc (musl's
    `mallopt` does nothing): said in the log either way."""
    if size <= 0:
        return False
    if ENVIRONMENT in os.environ:
        log.info("malloc's mmap threshold is %s from the environment; not changed", os.environ[ENVIRONMENT])
        return False
    if not 0 < size <= MAX_THRESHOLD:
        raise ValueError(f"an mmap threshold of {size} bytes is outside glibc's (0, {MAX_THRESHOLD}]")
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.info("no mallopt in this C library: malloc's mmap threshold left as it is")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, size) != 1:
        log.info("mallopt refused an mmap threshold of %d bytes: left as it is", size)
        return False
    log.info("malloc's mmap threshold fixed at %d bytes for risk scoring's arrays", size)
    return True
