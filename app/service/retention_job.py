"""The retention pass: work out the cutoffs (`app.decide.retention`) and have the store delete and
reclaim (`app.store.retention`). The leader runs it every `retention.interval`, among its other jobs on
the one scheduler (`app.service.runtime.leadership`).

A pass that fails is logged at ERROR and counted (`sickbay_job_failures_total{job="retention"}`); the
service carries on and the next pass tries again: keeping rows longer is always safe, losing intake is not.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from datetime import datetime

from app.config.retention import RetentionSettings
from app.decide import retention
from app.obs.metrics import Metrics
from app.store.retention import Pruned, Pruner

log = logging.getLogger(__name__)
JOB_ID = "retention"
Held = Callable[[], frozenset[str] | None]


class RetentionJob:
    def __init__(
        self,
        pruner: Pruner,
        *,
        settings: RetentionSettings,
        held: Held,
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._pruner = pruner
        self._settings = settings
        self._held = held  # the nodes Sickbay quarantined or owns, as last observed (None: not yet)
        self._metrics = metrics
        self._clock = clock
        self.last: Pruned | None = None

    async def run_once(self) -> Pruned | None:
        plan = retention.pruning(self._settings, now=self._clock(), held=self._held())
        if plan.skipped is not None:
            log.info("retention: nothing pruned: %s", plan.skipped)
            return None
        try:
            done = await self._pruner.prune(
                {table.value: cutoff for table, cutoff in plan.cutoffs.items()}, held=plan.held
            )
        except (sqlite3.Error, ValueError) as exc:  # aiosqlite raises ValueError on a closed connection
            log.error("retention: pass failed, rows are kept until the next one: %s", exc)
            self._metrics.job_failures.labels(job=JOB_ID).inc()
            return None
        for table, rows in done.rows.items():
            self._metrics.retention_pruned.labels(table=table).inc(rows)
        if done.size is not None:
            self._metrics.db_size.set(done.size.bytes)
        self.last = done
        log.info("retention: %d rows pruned, %d pages given back", done.total, done.pages_reclaimed)
        return done
