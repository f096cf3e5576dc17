"""glibc's mmap threshold lowered while answers are read (`allocator.lowered`): inside, a block between
the lowered threshold and a larger one freed before is mmapped (returned to the kernel when freed),
where glibc's sliding threshold would have put it on the heap; after the last reader leaves, such a
block comes from the heap again (32 MiB threshold), so temporaries between reads are not mmapped afresh.
The environment's `MALLOC_MMAP_THRESHOLD_` rules where set; 0 leaves glibc's; a size glibc refuses is an
error. Each case runs in a fresh interpreter: the threshold is the process'."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest

from app.predict import allocator

# A 4 MiB block freed (glibc's own threshold rises to it), then a 2 MiB one allocated inside `lowered`
# and one after: whether each was mmapped, read from glibc's mallinfo2.
PROBE = """
import ctypes, sys
from app.predict import allocator
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
def mmapped():
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(2 << 20)
    got = libc.mallinfo2().hblkhd - before >= 2 << 20
    libc.free(block)
    return got
libc.free(libc.malloc(4 << 20))
with allocator.lowered(int(sys.argv[1])) as lowered:
    inside = mmapped()
print(lowered, inside, mmapped())
"""


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


def _probe(size: int, **env: str) -> tuple[str, ...]:
    clean = {k: v for k, v in os.environ.items() if k != allocator.ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(size)],
        env=clean | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return tuple(done.stdout.split())


@pytest.mark.skipif(not _glibc(), reason="mallopt and mallinfo2 are glibc's (2.33+); this C library has none")
def test_blocks_are_mmapped_while_reading_and_come_from_the_heap_after() -> None:
    assert _probe(2**20) == ("True", "True", "False")
    assert _probe(0) == ("False", "False", "False")  # glibc's own: the 4 MiB freed raised it above 2 MiB
    # The environment's setting rules, and is left alone: 1 MiB there mmaps the block in and out.
    assert _probe(8 << 20, MALLOC_MMAP_THRESHOLD_="1048576") == ("False", "True", "True")


def test_the_threshold_stays_lowered_until_the_last_reader_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(allocator, "_mallopt", lambda: lambda _option, size: calls.append(size) or 1)
    entered, leave = threading.Event(), threading.Event()

    def other_reader() -> None:
        with allocator.lowered(2**20):
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other_reader)
    thread.start()
    entered.wait(10)
    with allocator.lowered(2**20):
        pass
    assert calls == [2**20, 2**21]  # the other reader is still inside
    leave.set()
    thread.join(10)
    assert calls == [2**20, 2**21, allocator.MAX_THRESHOLD, 2 * allocator.MAX_THRESHOLD]


def test_a_threshold_glibc_would_refuse_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside"), allocator.lowered(allocator.MAX_THRESHOLD + 1):
        pass
