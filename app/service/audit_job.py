"""The audit of GPU-node hygiene on the one scheduler: every `audit_interval_s`, read the cluster, check it
(`app.audit.checks`), keep the last result for the status page and publish counts per kind as metrics.

Read-only: it lists nodes (or reads them from the cluster view), pods and Jobs and writes nothing, so it
runs on every replica, leader or not. The page serves the last result; it never runs an audit on a request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from app.audit import checks, report
from app.audit.snapshot import read_cluster
from app.kube.errors import KubeError
from app.kube.port import AuditPort
from app.kube.viewgate import ViewGate
from app.obs.metrics import Metrics
from app.service import schedule

log = logging.getLogger(__name__)
JOB_ID = "audit"


@dataclass(frozen=True, slots=True)
class AuditRun:
    at: datetime
    findings: tuple[checks.Finding, ...]


class Audits:
    def __init__(
        self,
        port: AuditPort,
        *,
        metrics: Metrics,
        clock: Callable[[], datetime],
        config: checks.AuditConfig = checks.AuditConfig(),  # noqa: B008 - frozen, so one shared default is safe
        view: ViewGate | None = None,
    ) -> None:
        self._port = port
        self._view = view  # the cluster view: its nodes while fresh, instead of a list each run
        self._metrics = metrics
        self._clock = clock
        self._config = config
        self.last: AuditRun | None = None

    def start(self, jobs: schedule.Jobs, *, every_s: float) -> None:
        # APScheduler takes a whole number of seconds of misfire grace: a run late by up to one interval runs.
        jobs.every(JOB_ID, self.run_once, seconds=every_s, misfire_grace_s=max(1, int(every_s)), now=True)

    async def run_once(self) -> AuditRun | None:
        now = self._clock()
        try:
            snapshot = await read_cluster(self._port, now=now, view=self._view)
        except KubeError as exc:
            log.warning("audit: cannot read the cluster: %s", exc)
            return None  # the page keeps the last result, with its time
        run = AuditRun(at=now, findings=tuple(checks.audit(snapshot, self._config)))
        self.last = run
        for kind, count in report.counts(run.findings).items():
            self._metrics.audit_findings.labels(kind=kind).set(count)
        self._metrics.audit_last_run.set(now.timestamp())
        log.info("audit: %d findings", len(run.findings))
        return run
