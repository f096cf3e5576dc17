"""The retention job through the one scheduler, with an injected clock: it prunes past the cutoffs,
publishes rows pruned and the DB size, and a failed pass is counted, never raised."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry

from app.config.retention import RetentionSettings
from app.obs.metrics import create_metrics
from app.service import retention_job, schedule
from app.store import inbox, retention

START = datetime.now(UTC)


async def test_the_job_prunes_on_the_scheduler_and_a_failure_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with sqlite3.connect(path) as db:
        db.executescript(inbox.SCHEMA + inbox.INDEXES)
        db.executemany(
            "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
            "VALUES ('agent', ?, ?, 'firing', 'n1', '{}', ?, 'done')",
            [(f"fp{i}", START.isoformat(), START.isoformat()) for i in range(30)],
        )
    now = [START + timedelta(days=20)]  # the injected clock: twenty days on, past the 14-day inbox cutoff
    metrics = create_metrics(CollectorRegistry())
    pruner = await retention.Pruner.open(path, write_lock=asyncio.Lock(), batch_rows=7, vacuum_pages=10)
    job = retention_job.RetentionJob(
        pruner,
        settings=RetentionSettings(interval=timedelta(seconds=1)),  # the second pass a second after the first
        held=frozenset,
        metrics=metrics,
        clock=lambda: now[0],
    )
    jobs = schedule.Jobs(None)
    try:
        # as the leader schedules it (`runtime.leadership._leader_jobs`): at once, then every interval
        jobs.every(retention_job.JOB_ID, job.run_once, seconds=1, now=True)
        async with asyncio.timeout(30):  # a safety net, not a measurement
            while job.last is None:
                await asyncio.sleep(0.02)
        assert job.last.rows["inbox"] == 30
        assert (
            metrics.registry.get_sample_value("sickbay_retention_pruned_rows_total", {"table": "inbox"}) == 30
        )
        assert (metrics.registry.get_sample_value("sickbay_db_size_bytes") or 0) > 0
        jobs.stop()
        await pruner.close()  # the next pass fails: logged and counted, the job keeps its schedule
        assert await job.run_once() is None
        assert metrics.registry.get_sample_value("sickbay_job_failures_total", {"job": "retention"}) == 1
    finally:
        jobs.stop()
