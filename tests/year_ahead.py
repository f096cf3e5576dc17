"""The year-ahead run's proof that its clock really is ahead (`make test`, scripts/year-ahead.sh).

`make test` runs the time-sensitive tests a second time with libfaketime moving the clock of the test
process and of every child it starts (`sickbay serve`, the agent) `CLOCK_AHEAD_DAYS` ahead, so a test that
passes only on some calendar dates fails today instead of on a later day. A run that asked for that but
whose clock is not ahead (libfaketime missing, not preloaded, or overridden) would prove nothing while
looking green, so it stops the session with an error instead of skipping anything.

libfaketime moves the clock of programs that read it through libc. Go programs (Prometheus, Alertmanager,
promtool, amtool, kubectl) read it through the vDSO and keep the real date; tests whose outcome needs such
a program to agree with Python's clock carry the `real_clock` marker and are left to the normal run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime

DAYS_ENV = "CLOCK_AHEAD_DAYS"
REAL_EPOCH_ENV = "CLOCK_AHEAD_REAL_EPOCH"
# The run itself lasts minutes; a day of slack keeps a long run and a slow start from tripping the check.
SLACK_S = 86_400.0


class NotAhead(RuntimeError):
    """The run asked for a clock ahead and the clock is not: the message says what was seen."""


def _child_time() -> float:
    """time.time() as a child process reads it: `sickbay serve` and the agent are such children."""
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return float(out.stdout.strip())


def check(environ: Mapping[str, str] = os.environ) -> str | None:
    """None for a normal run; for a year-ahead run, a line saying how far ahead the clock is.

    Raises `NotAhead` when the run asked for a clock `CLOCK_AHEAD_DAYS` ahead of `CLOCK_AHEAD_REAL_EPOCH`
    (the real time, taken before libfaketime was preloaded) and this process or its children are not.
    """
    days_text = environ.get(DAYS_ENV)
    if not days_text:
        return None
    try:
        days = float(days_text)
        real = float(environ[REAL_EPOCH_ENV])
    except (KeyError, ValueError) as exc:
        raise NotAhead(
            f"{DAYS_ENV}={days_text!r} needs a number of days and {REAL_EPOCH_ENV} the real time "
            f"(seconds since the epoch) from before libfaketime was loaded: {exc!r}"
        ) from exc
    wanted = days * 86_400.0
    seen = {
        "time.time()": time.time(),
        "datetime.now(UTC)": datetime.now(UTC).timestamp(),
        "a child process's time.time()": _child_time(),
    }
    for what, value in seen.items():
        ahead = value - real
        if not wanted - SLACK_S <= ahead <= wanted + SLACK_S:
            raise NotAhead(
                f"the run asked for a clock {days:g} days ahead, but {what} is {ahead / 86_400.0:.2f} days "
                f"ahead of the real time (LD_PRELOAD={environ.get('LD_PRELOAD', '')!r}, "
                f"FAKETIME={environ.get('FAKETIME', '')!r}); is libfaketime installed and preloaded?"
            )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return f"clock {days:g} days ahead of the real date: it is {now} for this run and the processes it starts"
