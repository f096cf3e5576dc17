"""Loaded by every Python process of the year-ahead run (scripts/year-ahead.sh puts this folder first on
PYTHONPATH): works around libfaketime 0.9.10's broken absolute sleeps, then runs any other sitecustomize.

The run fakes the wall clock and leaves the monotonic one real (FAKETIME_DONT_FAKE_MONOTONIC=1), because
with a faked monotonic clock every wait with a timeout on a lock or condition (sem_clockwait, which
libfaketime does not intercept) waits for decades. With the monotonic clock real, one call is broken:
clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which CPython 3.11+ uses for `time.sleep`; libfaketime
subtracts its offset from the deadline and the kernel answers EINVAL
(https://github.com/wolfcw/libfaketime/issues/426). So `time.sleep` becomes a relative wait on the real
monotonic clock, which libfaketime leaves alone. Nothing here runs outside the year-ahead run.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import select
import sys
import time


def _sleep(secs: float) -> None:
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + secs
    while True:  # at least one wait, so sleep(0) still lets other threads run, as time.sleep does
        select.select([], [], [], max(0.0, deadline - time.monotonic()))
        if time.monotonic() >= deadline:
            return


def _chain() -> None:
    """Run the sitecustomize this one shadows, if the interpreter has one further down sys.path."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("FAKETIME") and os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1":
    time.sleep = _sleep
_chain()
