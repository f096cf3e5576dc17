"""Risk prediction in a running service: scoring, the shadow-mode backtest and retraining, started late.

Loaded on every replica (so a bad model is reported at once) but in the background: scikit-learn, pandas
and skops take seconds of CPU to import, and the alert path serves meanwhile. Any failure to start is
logged and leaves the service remediating from alerts only; it never stops the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from app.decide import gates, shadow
from app.domain import RiskLevel
from app.service.runtime.services import SERVICES, Services

if TYPE_CHECKING:
    from app.service import retraining_job, scoring_job, validation

log = logging.getLogger(__name__)


async def start_prediction_in_background(app: web.Application) -> AsyncIterator[None]:
    """Risk scoring: loaded on every replica (so a bad model is reported at once), scheduled on start.

    It starts in the background: scikit-learn, pandas and skops take seconds of CPU to import and the
    model to load, and the alert path must be serving meanwhile (a fatal XID does not wait for a model).
    """
    services = app[SERVICES]
    if not services.settings.prediction.enabled or services.inbox is None:
        yield
        return
    starting = asyncio.create_task(_start_prediction(services), name="prediction-start")
    services.prediction_start = starting
    try:
        yield
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        if services.retraining is not None:
            await services.retraining.stop()
        if services.validation is not None:
            await services.validation.stop()
        if services.scoring is not None:
            await services.scoring.stop()


async def _start_prediction(services: Services) -> None:
    assert services.inbox is not None
    try:
        # In a worker thread: an import this heavy would stall the event loop that serves alerts.
        scoring_module = await asyncio.to_thread(importlib.import_module, "app.service.scoring_job")
        scorer: scoring_job.Scoring = scoring_module.Scoring(
            services.settings.prediction,
            inbox=services.inbox,
            metrics=services.metrics,
            clock=services.clock,
            policy=services.rules.policy.prediction,
            journal=services.journal,
            on_model=lambda version: _model_loaded(services, version),
            guard=lambda cycle: _guard(services, cycle),
            scheduler=services.scheduler,
        )
        await scorer.start()
    except Exception:  # prediction must never stop the alert path from serving (a cancel passes through)
        log.exception("risk scoring could not start; remediating from alerts only")
        return
    services.scoring = scorer
    services.validation = await _start_validation(services, scorer)
    services.retraining = await _start_retraining(services, scorer)


async def _model_loaded(services: Services, version: str) -> None:
    """A model version loaded: new to this fleet, it starts in shadow; backtest it soon if so."""
    assert services.shadow is not None
    standing = await services.shadow.model_loaded(version)
    if services.validation is not None and not standing.acting and not standing.reason.held:
        services.validation.soon()


async def _guard(services: Services, cycle: scoring_job.ScoredCycle) -> bool:
    """The runtime guard on one scored cycle; True when it sent the ladder back to shadow."""
    keeper, scores = services.shadow, cycle.scores
    if keeper is None or scores is None or not services.leader:  # the leader's ladder is the one that acts
        return False
    flagged = sum(1 for r in scores.gpus if r.level is not RiskLevel.NONE)
    keeper_gates = services.gates
    full = keeper_gates is not None and gates.proactive_full(
        keeper_gates.proactive_fleet(), services.rules.policy.budgets
    )
    reading = shadow.Reading(flagged_gpus=flagged, gpus=len(scores.gpus), budget_full=full)
    return await keeper.guard(scores.model_version, reading) is not None


async def _start_validation(services: Services, scoring: scoring_job.Scoring) -> validation.Validation | None:
    """The shadow-mode backtest, with a Prometheus URL only; the leader runs it."""
    settings = services.settings.prediction
    if not settings.validate_enabled or not settings.prometheus_url or services.shadow is None:
        return None
    try:
        validating = await asyncio.to_thread(importlib.import_module, "app.service.validation")
        job: validation.Validation = validating.Validation(
            settings,
            keeper=services.shadow,
            policy=services.rules.policy,
            catalog=services.rules.catalog,
            journal_path=Path(services.settings.inbox.path),
            model=lambda: scoring.service.model,
            is_leader=lambda: services.leader,
            clock=services.clock,
            scheduler=services.scheduler,
        )
        await job.start()
    except Exception:  # the backtest must never stop the service; the ladder then stays in shadow
        log.exception("the shadow-mode backtest could not start; the ladder stays in shadow until validated")
        return None
    return job


async def _start_retraining(
    services: Services, scoring: scoring_job.Scoring
) -> retraining_job.Retraining | None:
    """The weekly retraining job, with a Prometheus URL only; it runs on the leader and reloads scoring."""
    settings = services.settings.prediction
    if not settings.retrain_enabled or not settings.prometheus_url:
        return None
    try:
        training = await asyncio.to_thread(importlib.import_module, "app.service.retraining_job")
        job: retraining_job.Retraining = training.Retraining(
            settings,
            catalog=services.rules.catalog,
            journal_path=Path(services.settings.inbox.path),
            registry=services.metrics.registry,
            on_promoted=scoring.reload,
            is_leader=lambda: services.leader,
            clock=services.clock,
            scheduler=services.scheduler,
        )
        await job.start()
    except Exception:  # retraining must never stop the service from serving
        log.exception("retraining could not start; the current model stays until it does")
        return None
    return job
