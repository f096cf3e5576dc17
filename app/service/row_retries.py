"""When each failed inbox row may be tried again: the pipeline's retry schedule, one row at a time.

A row that fails waits alone — the rows after it, of its node or any other, go on — for the one backoff
(`app.backoff`), and after `MAX_ATTEMPTS` tries the pipeline gives up on it (the dead-letter list). The
waits are kept in memory: after a restart a pending row is simply tried at once, its attempts counted on
in the inbox. The fatal rows among them are known, so the soft lane can yield to one whose retry is due.

It keeps time and nothing else: what is retried and what giving up means are the pipeline's.
"""

from __future__ import annotations

from collections.abc import Callable

from app import backoff

# A failed row is tried this many times in all, waiting 2 s, 4 s, … up to a minute between tries (about
# three minutes: longer than an API server restart, after which the kube client's own retries have failed).
MAX_ATTEMPTS = 8
BACKOFF = backoff.Backoff(base=2.0, cap=60.0)


class RowRetries:
    def __init__(self, *, timer: Callable[[], float]) -> None:
        """`timer`: monotonic seconds (the event loop's clock, or a test's)."""
        self._timer = timer
        self._until: dict[int, float] = {}  # inbox seq → timer time before which the row waits
        self._fatal: set[int] = set()  # those of them in the fatal lane

    def wait(self, seq: int, *, attempts: int, fatal: bool) -> float:
        """The row failed its `attempts`-th try: it waits before the next; returns how long."""
        return self.wait_for(seq, BACKOFF.delay(attempts), fatal=fatal)

    def wait_for(self, seq: int, seconds: float, *, fatal: bool) -> float:
        self._until[seq] = self._timer() + seconds
        if fatal:
            self._fatal.add(seq)
        return seconds

    def due(self, seq: int, *, now: float | None = None) -> bool:
        """Whether the row may be tried now (a row that never failed always may)."""
        return self._until.get(seq, 0.0) <= (self._timer() if now is None else now)

    def now(self) -> float:
        return self._timer()

    def fatal_due(self) -> bool:
        """Whether a fatal row's wait is over: the soft lane yields to it."""
        now = self._timer()
        return any(self._until.get(seq, 0.0) <= now for seq in self._fatal)

    def forget(self, seq: int) -> None:
        """The row is done or given up on."""
        self._until.pop(seq, None)
        self._fatal.discard(seq)

    def keep_fatal(self, pending: set[int]) -> None:
        """Fatal rows no longer pending (marked elsewhere) wait for nothing: the soft lane must not yield
        to them for ever."""
        for seq in self._fatal - pending:
            self.forget(seq)
