#!/usr/bin/env bash
# Runs a command (pytest) with the clock a year ahead: `scripts/year-ahead.sh .venv/bin/pytest tests/unit`.
#
# Debian's libfaketime, preloaded, moves the clock of the process and of every child it starts (`sickbay
# serve`, the agent): a test that passes only on some calendar dates fails here today instead of on a later
# day. Monotonic clocks stay real (timeouts, asyncio's loop). CLOCK_AHEAD_DAYS and CLOCK_AHEAD_REAL_EPOCH
# tell the test session what was asked, so it fails (tests/year_ahead.py) when the clock is not ahead.
# Go programs (Prometheus, Alertmanager, promtool, amtool, kubectl) keep the real date whatever is
# preloaded; the tests that need them to agree with Python carry the `real_clock` marker.
set -euo pipefail

days="${CLOCK_AHEAD_DAYS:-365}"
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

lib=""
candidates=()
if command -v dpkg >/dev/null; then
    mapfile -t candidates < <(dpkg -L libfaketime 2>/dev/null | grep '/libfaketime\.so\.1$' || true)
fi
multiarch="$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)"
candidates+=(
    ${multiarch:+"/usr/lib/$multiarch/faketime/libfaketime.so.1"}
    /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
    /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1
    /usr/lib/faketime/libfaketime.so.1
    /usr/local/lib/faketime/libfaketime.so.1
)
for candidate in "${candidates[@]}"; do
    if [ -r "$candidate" ]; then lib="$candidate"; break; fi
done
if [ -z "$lib" ]; then
    echo "year-ahead run: libfaketime.so.1 not found; install Debian's 'faketime' package" \
        "(bash scripts/install-system-packages.sh, which make setup runs)" >&2
    exit 2
fi

CLOCK_AHEAD_REAL_EPOCH="$(date +%s)"  # read before the preload: the real time
export CLOCK_AHEAD_DAYS="$days" CLOCK_AHEAD_REAL_EPOCH
# The monotonic clock stays real: with it faked, libfaketime 0.9.10 turns every lock or condition wait
# with a timeout (sem_clockwait, which it does not intercept) into a wait of decades. Its "monotonic fix"
# for pthread_cond_timedwait then miscomputes the deadlines of Python's GIL waits (each times out at
# once, and a process with two threads ran 7x slower), so it is switched off.
export FAKETIME="+${days}d" FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
# With the monotonic clock real, libfaketime 0.9.10 breaks CPython's time.sleep (libfaketime issue 426):
# this folder's sitecustomize, loaded by every Python process of the run, replaces it.
site="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/year-ahead"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
echo "year-ahead run: clock +${days} days ($lib)" >&2
exec "$@"
