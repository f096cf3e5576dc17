"""The service's one scheduler (APScheduler): all periodic background work runs here, as named jobs.

On every replica: risk scoring (`app.service.scoring_job`), the shadow-mode backtest (`app.service.validation`) and retraining
(`app.service.retraining_job`), each of which checks leadership itself. On the leader only, registered when it starts
leading and cancelled when it stops: reconciliation, re-checks of transient signals and the catch-up with
Alertmanager (`app.service.runtime`). Jobs enqueue work or run one pass of a reconciler; none owns a loop.

Every job runs at most once at a time and missed runs coalesce into one. A job that fails is logged and
counted (`sickbay_job_failures_total{job}`) and simply runs again at its next time: no failure ends the
schedule. The inbox consumer (`Pipeline.run`) is not periodic and stays a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped]
from prometheus_client import Counter

log = logging.getLogger(__name__)
# APScheduler logs every run of every job at INFO (the re-check job runs four times a second): our own
# jobs log what they do, and a failure is logged and counted here, so only its warnings are kept.
logging.getLogger("apscheduler").setLevel(logging.WARNING)
Run = Callable[[], Awaitable[object]]


class Scheduler:
    """One AsyncIOScheduler and the runs in flight of its jobs. Start it on the running event loop."""

    def __init__(self, *, failures: Counter | None = None) -> None:
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._failures = failures  # labelled by job
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._cancelled: set[asyncio.Task[Any]] = set()
        self.started = False

    def start(self) -> None:
        if not self.started:
            self._scheduler.start()
            self.started = True

    def shutdown(self) -> None:
        """Stop scheduling; runs in flight finish on their own (cancel the ones that must not)."""
        if self.started:
            self._scheduler.shutdown(wait=False)
            self.started = False

    def every(
        self, job: str, run: Run, *, seconds: float, misfire_grace_s: float = 60, now: bool = False
    ) -> None:
        """Run `run()` every `seconds`, the first time at once with `now`, else after one interval."""
        first = {"next_run_time": datetime.now(UTC)} if now else {}
        self.add(job, run, IntervalTrigger(seconds=seconds), misfire_grace_s=misfire_grace_s, **first)

    def add(self, job: str, run: Run, trigger: Any, *, misfire_grace_s: float, **options: Any) -> None:
        """Run `run()` on any APScheduler trigger (a cron line, say); a job of the same name is replaced."""
        self._scheduler.add_job(
            self._guarded,
            trigger,
            args=(job, run),
            id=job,
            name=job,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=misfire_grace_s,
            replace_existing=True,
            **options,
        )

    def soon(self, job: str) -> None:
        """Run the job now, then on its schedule again."""
        if self._scheduler.get_job(job) is not None:
            self._scheduler.modify_job(job, next_run_time=datetime.now(UTC))

    def next_run(self, job: str) -> datetime | None:
        scheduled = self._scheduler.get_job(job)
        return getattr(scheduled, "next_run_time", None) if scheduled is not None else None

    def remove(self, job: str) -> None:
        """No more runs of `job`; one in flight finishes."""
        if self._scheduler.get_job(job) is not None:
            self._scheduler.remove_job(job)

    async def cancel(self, job: str) -> None:
        """No more runs of `job`, and the one in flight is cancelled and awaited (a leader stepping down)."""
        self.remove(job)
        task = self._running.get(job)
        if task is None or task.done() or task is asyncio.current_task():
            return
        self._cancelled.add(task)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _guarded(self, job: str, run: Run) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._running[job] = task
        try:
            await run()
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise
            # Cancelled by `cancel`: the job is over, not failed (APScheduler would log it as an error).
        except Exception:
            log.exception("background job %s failed; it runs again at its next time", job)
            if self._failures is not None:
                self._failures.labels(job=job).inc()
        finally:
            self._cancelled.discard(task)
            if self._running.get(job) is task:
                del self._running[job]


class Jobs:
    """The jobs of one owner (scoring, retraining, the backtest): on the service's scheduler, or on a
    scheduler of their own when none is given (a job started alone, as tests do). `stop()` removes them
    and shuts an own scheduler down."""

    def __init__(self, scheduler: Scheduler | None) -> None:
        self._own = scheduler is None
        self.scheduler = scheduler if scheduler is not None else Scheduler()
        self._ids: list[str] = []

    def every(
        self, job: str, run: Run, *, seconds: float, misfire_grace_s: float = 60, now: bool = False
    ) -> None:
        self._started().every(job, run, seconds=seconds, misfire_grace_s=misfire_grace_s, now=now)
        self._ids.append(job)

    def add(self, job: str, run: Run, trigger: Any, *, misfire_grace_s: float, **options: Any) -> None:
        self._started().add(job, run, trigger, misfire_grace_s=misfire_grace_s, **options)
        self._ids.append(job)

    def stop(self) -> None:
        for job in self._ids:
            self.scheduler.remove(job)
        self._ids.clear()
        if self._own:
            self.scheduler.shutdown()

    def _started(self) -> Scheduler:
        if self._own:
            self.scheduler.start()
        return self.scheduler
