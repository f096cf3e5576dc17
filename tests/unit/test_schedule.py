"""The one scheduler: a failing job is logged and counted and runs again; a cancelled one ends cleanly."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from app.obs.metrics import create_metrics
from app.service import schedule


async def test_a_failing_job_is_logged_counted_and_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    metrics = create_metrics(CollectorRegistry())
    scheduler = schedule.Scheduler(failures=metrics.job_failures)
    scheduler.start()
    runs: list[int] = []
    again = asyncio.Event()

    async def flaky() -> None:
        runs.append(len(runs) + 1)
        if len(runs) <= 2:
            raise RuntimeError(f"boom {len(runs)}")
        again.set()

    try:
        scheduler.every("flaky", flaky, seconds=0.01, now=True)
        async with asyncio.timeout(30):  # a safety net, not a measurement
            await again.wait()
    finally:
        scheduler.shutdown()
    assert runs[:3] == [1, 2, 3]
    assert metrics.registry.get_sample_value("sickbay_job_failures_total", {"job": "flaky"}) == 2
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "flaky" in r.getMessage()]
    assert len(failed) == 2
    assert failed[0].exc_info is not None
    assert str(failed[0].exc_info[1]) == "boom 1"


async def test_cancel_ends_the_run_in_flight_and_all_later_ones(caplog: pytest.LogCaptureFixture) -> None:
    metrics = create_metrics(CollectorRegistry())
    scheduler = schedule.Scheduler(failures=metrics.job_failures)
    scheduler.start()
    started, ended = asyncio.Event(), asyncio.Event()
    runs = 0

    async def long_pass() -> None:
        nonlocal runs
        runs += 1
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    try:
        scheduler.every("reconcile", long_pass, seconds=3600, now=True)
        async with asyncio.timeout(30):
            await started.wait()
        assert scheduler.next_run("reconcile") is not None
        await scheduler.cancel("reconcile")
        assert ended.is_set()  # cancel awaited the run in flight
        assert scheduler.next_run("reconcile") is None
        await scheduler.cancel("reconcile")  # cancelling what is gone is a no-op
    finally:
        scheduler.shutdown()
    assert runs == 1
    assert metrics.registry.get_sample_value("sickbay_job_failures_total", {"job": "reconcile"}) is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_soon_brings_the_next_run_forward() -> None:
    scheduler = schedule.Scheduler()
    scheduler.start()
    ran = asyncio.Event()

    async def backtest() -> None:
        ran.set()

    try:
        scheduler.every("backtest", backtest, seconds=86_400)
        assert not ran.is_set()
        scheduler.soon("backtest")
        scheduler.soon("no-such-job")
        async with asyncio.timeout(30):
            await ran.wait()
    finally:
        scheduler.shutdown()


async def test_jobs_without_a_scheduler_get_one_of_their_own_and_stop_it() -> None:
    jobs = schedule.Jobs(None)
    ran = asyncio.Event()

    async def once() -> None:
        ran.set()

    jobs.every("alone", once, seconds=3600, now=True)
    async with asyncio.timeout(30):
        await ran.wait()
    assert jobs.scheduler.started
    jobs.stop()
    assert not jobs.scheduler.started

    shared = schedule.Scheduler()
    shared.start()
    try:
        mine = schedule.Jobs(shared)
        mine.every("shared", once, seconds=3600)
        assert shared.next_run("shared") is not None
        mine.stop()
        assert shared.next_run("shared") is None
        assert shared.started  # the service's scheduler outlives one owner's jobs
    finally:
        shared.shutdown()
