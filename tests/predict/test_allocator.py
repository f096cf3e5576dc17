"""glibc's mmap threshold fixed for scoring (`allocator.fix_mmap_threshold`): where glibc runs, a block
between the fixed threshold and a larger one freed before is mmapped (returned to the kernel when freed),
where glibc's own sliding threshold would have put it on the heap; the environment variable, where set,
rules; 0 leaves glibc's; a size glibc refuses is an error. Each case runs in a fresh interpreter: the
threshold is the process'."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from app.predict import allocator

# A 4 MiB block freed, then a 2 MiB one allocated: mmapped or not, read from glibc's mallinfo2.
PROBE = """
import ctypes, sys
from app.predict import allocator
fixed = allocator.fix_mmap_threshold(int(sys.argv[1]))
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo2().hblkhd
block = libc.malloc(2 << 20)
print(fixed, libc.mallinfo2().hblkhd - before >= 2 << 20)
libc.free(block)
"""


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


def _probe(size: int, **env: str) -> tuple[bool, bool]:
    clean = {k: v for k, v in os.environ.items() if k != allocator.ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(size)],
        env=clean | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    fixed, mmapped = done.stdout.split()
    return fixed == "True", mmapped == "True"


@pytest.mark.skipif(not _glibc(), reason="mallopt and mallinfo2 are glibc's (2.33+); this C library has none")
def test_a_fixed_threshold_mmaps_what_the_sliding_one_would_put_on_the_heap() -> None:
    assert _probe(2**20) == (True, True)
    assert _probe(0) == (False, False)  # glibc's own: the 4 MiB freed raised it above 2 MiB
    # The environment's setting (8 MiB here, above the block) rules, and is left alone.
    assert _probe(2**20, MALLOC_MMAP_THRESHOLD_="8388608") == (False, False)


def test_a_threshold_glibc_would_refuse_is_an_error() -> None:
    if allocator.ENVIRONMENT in os.environ:
        pytest.skip(f"{allocator.ENVIRONMENT} is set in this environment, so nothing is checked")
    with pytest.raises(ValueError, match="outside"):
        allocator.fix_mmap_threshold(allocator.MAX_THRESHOLD + 1)
