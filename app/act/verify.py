"""Runs the verification of a remediated node: reads its Job, asks `decide.verification`, does the answer.

The node's annotations name the Job and count the failures, so the step is the same on any replica: a
new leader reads the Job the old one created. The node is marked before its Job is created, so a crash in
between leaves a name with no Job, which the next round creates (`Create`); a create that meets a Job of
that name (a retried request) is the same Job. Escalation goes through the hand-off to the `replace`
remediator, exactly as a remediation that timed out does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import yaml

from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.config import rules
from app.decide import footprint, reconciling, verification
from app.domain import NodeState, RemediationState
from app.kube import errors, port

log = logging.getLogger("app.act")


class Verifier:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        nodes: NodeWriter,
        handoff: HandOff,
        recorder: Recorder,
        policy: rules.Policy,
        template: str,
        clock: Callable[[], datetime],
        dry_run: bool,
    ) -> None:
        self._kube = kube
        self._nodes = nodes
        self._handoff = handoff
        self._recorder = recorder
        self._policy = policy
        self._template: dict[str, Any] = yaml.safe_load(verification.fill_level(template, policy)) or {}
        self._clock = clock
        self._dry_run = dry_run

    async def step(self, node: NodeState, *, firing: Collection[str]) -> None:
        """One round of the node's verification; `firing`: the classes of its alerts that fire."""
        now, namespace = self._clock(), self._policy.verification.namespace
        name = node.annotation(footprint.VERIFICATION_JOB)
        job = await self._kube.get_job(namespace, name) if name else None
        unhealthy = reconciling.health_problem(node, firing=firing)
        decision = verification.verification_step(
            node, job, unhealthy=unhealthy, policy=self._policy, now=now
        )
        match decision:
            case verification.Start(name=job_name, attempt=attempt, failures=failures, why=why):
                if failures:
                    await self._recorder.node_event(node.name, "SickbayVerificationFailed", why, warning=True)
                if self._dry_run:
                    log.info("dry-run: would run verification Job %s on %s (%s)", job_name, node.name, why)
                    return
                marked = await self._nodes.set_state(
                    node.name,
                    RemediationState.VERIFYING,
                    verification_job=job_name,
                    verification_started_at=now.isoformat(),
                    verification_failures=str(failures),
                )
                if marked is not None:
                    await self._create(node, job_name, attempt=attempt, why=why)
            case verification.Create(name=job_name, attempt=attempt, why=why):
                if not self._dry_run:
                    await self._create(node, job_name, attempt=attempt, why=why)
            case verification.Passed(name=job_name, why=why):
                if not self._dry_run:
                    await self._nodes.set_state(node.name, RemediationState.VERIFYING, verified=job_name)
                await self._recorder.node_event(node.name, "SickbayVerified", f"{why}; released once healthy")
            case verification.GiveUp(why=why, remediation=remediation):
                await self._recorder.node_event(node.name, "SickbayVerificationFailed", why, warning=True)
                if remediation is not None:
                    await self._handoff.request(node.name, remediation, reason=why)
                elif not self._dry_run:
                    await self._nodes.set_state(
                        node.name, RemediationState.VERIFYING, verification_gave_up=why[:250]
                    )
            case verification.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _create(self, node: NodeState, name: str, *, attempt: int, why: str) -> None:
        manifest = verification.render(
            self._template, node=node, name=name, attempt=attempt, policy=self._policy
        )
        try:
            await self._kube.create_job(manifest)
        except errors.ConflictError:
            log.info("reconcile: verification Job %s exists already", name)
            return
        log.info("reconcile: %s: created verification Job %s (%s)", node.name, name, why)
        await self._recorder.node_event(
            node.name, "SickbayVerifying", f"verification Job {name} created: {why}"
        )
