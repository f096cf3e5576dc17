"""Keeps the proactive ladder's standing per model version on this fleet: shadow or acting.

The decisions are `decide.shadow`'s; this holds their inputs and results between calls. It reads the
standings from the validation log at start (a restart keeps them), journals every change and every
backtest's figures, answers the pipeline's question for each at-risk signal (`note_for`: why the
ladder is in shadow for that signal's model version, or None), and exports the metric.

A trip of the runtime guard is loud by design: the `sickbay_predict_shadow{reason}` gauge and the
`sickbay_predict_shadow_trips_total{reason}` counter, an ERROR log line, a Warning Event
(`SickbayPredictionShadowed`) on Sickbay's own pod — the trip is about the fleet, not one node, and
`kubectl get events -n <sickbay's namespace>` is where an operator looks for the operator's own doing —
and the status page. The at-risk taints go through the ladder's own clear path: in shadow a risk signal
for a tainted node plans the taint's removal (`decide.proactive.shadowed`), and the scorer re-sends every
flagged node's level at once after a trip, so the taints go within the same cycle.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.act.recorder import Recorder
from app.config import rules
from app.decide import shadow
from app.domain import PodRef
from app.obs.metrics import Metrics
from app.store.journal import Journal
from app.store.validation import Row, ValidationLog

log = logging.getLogger("app.act")
SHADOWED_REASON = "SickbayPredictionShadowed"
VALIDATED_REASON = "SickbayPredictionValidated"
_GUARD_KEY = "shadow-guard:"


class ShadowKeeper:
    def __init__(
        self,
        *,
        validation_log: ValidationLog,
        journal: Journal,
        policy: rules.Policy,
        fleet: str,
        metrics: Metrics,
        clock: Callable[[], datetime],
        recorder: Recorder | None = None,
        own_pod: PodRef | None = None,
    ) -> None:
        self._validation_log = validation_log
        self._journal = journal
        self._policy = policy.prediction.shadow
        self.fleet = fleet
        self._metrics = metrics
        self._clock = clock
        self._recorder = recorder
        self._own_pod = own_pod
        self._standings: dict[str, shadow.Standing] = {}
        self._guard = shadow.GuardState()
        self._lock = asyncio.Lock()
        self.current: str | None = None  # the model version the scorer runs

    def speaks_through(self, recorder: Recorder, own_pod: PodRef) -> None:
        """With a cluster: trips and validations become Events on Sickbay's own pod."""
        self._recorder, self._own_pod = recorder, own_pod

    async def load(self) -> None:
        self._standings = {
            r.version: _standing(r) for r in await self._validation_log.latest(fleet=self.fleet)
        }
        raw = await self._journal.get(_GUARD_KEY + self.fleet)
        if raw:
            since = json.loads(raw).get("budget_full_since")
            self._guard = shadow.GuardState(datetime.fromisoformat(since) if since else None)
        self._export()

    def standing(self, version: str | None = None) -> shadow.Standing:
        """The standing of `version` (default: the scorer's); a version never seen here is in shadow."""
        version = version or self.current or "none"
        found = self._standings.get(version)
        return (
            found if found is not None else shadow.first_contact(version, fleet=self.fleet, now=self._clock())
        )

    def note_for(self, version: str | None) -> str | None:
        """For the pipeline: why an at-risk signal of this model version plans in shadow (None: it acts)."""
        return self.standing(version).shadow_note()

    async def model_loaded(self, version: str) -> shadow.Standing:
        """The scorer loaded `version`: a version new to this fleet starts in shadow, journaled so."""
        async with self._lock:
            self.current = version
            found = self._standings.get(version)
            if found is None:
                found = shadow.first_contact(version, fleet=self.fleet, now=self._clock())
                await self._set(found)
                log.warning(
                    "risk model %s is new to fleet %s: the proactive ladder runs in SHADOW (scores and "
                    "records what it would do, taints nothing) until a backtest over this fleet's history "
                    "validates it or an operator does (sickbay model validate)",
                    version,
                    self.fleet,
                )
            self._export()
            return found

    async def backtested(
        self, version: str, evidence: shadow.Evidence, *, requested: bool, figures: dict[str, Any]
    ) -> shadow.Standing:
        """Journal a backtest's figures and the standing they lead to."""
        async with self._lock:
            now = self._clock()
            before = self.standing(version)
            after = shadow.after_backtest(before, evidence, self._policy, now=now, requested=requested)
            verdict, detail = shadow.judge_backtest(evidence, self._policy)
            body = {**figures, "verdict": verdict.value, "verdict_detail": detail, "requested": requested}
            if after == before:  # a held or acting standing stays: the row says so, with the figures
                after = shadow.Standing(
                    version=before.version,
                    fleet=before.fleet,
                    reason=before.reason,
                    detail=before.detail,
                    at=now,
                    by=before.by,
                )
            await self._set(after, evidence=body)
            log.log(
                logging.INFO if after.acting else logging.WARNING,
                "backtest of risk model %s on fleet %s: %s (%s); the ladder %s",
                version,
                self.fleet,
                verdict.value,
                detail,
                "ACTS" if after.acting else f"stays in shadow ({after.reason.value})",
            )
            if after.acting and not before.acting:
                await self._event(
                    VALIDATED_REASON, f"risk model {version} validated: {detail}", warning=False
                )
            self._export()
            return after

    async def operator(
        self, version: str | None, *, validate: bool, who: str, note: str = ""
    ) -> shadow.Standing:
        async with self._lock:
            before = self.standing(version)
            after = shadow.by_operator(before, validate=validate, who=who, now=self._clock(), note=note)
            await self._set(after)
            log.warning(
                "operator %s: risk model %s on fleet %s %s",
                who,
                after.version,
                self.fleet,
                "VALIDATED, the proactive ladder acts" if validate else "sent to SHADOW",
            )
            reason = VALIDATED_REASON if validate else SHADOWED_REASON
            await self._event(
                reason, f"risk model {after.version}: {after.detail} ({who})", warning=not validate
            )
            self._export()
            return after

    async def guard(self, version: str, reading: shadow.Reading) -> shadow.Standing | None:
        """One scoring cycle through the runtime guard; the new standing when it tripped, else None."""
        async with self._lock:
            now = self._clock()
            state, trip = shadow.check_guard(reading, self._guard, self._policy, now=now)
            if state != self._guard:
                self._guard = state
                since = state.budget_full_since
                await self._journal.put(
                    _GUARD_KEY + self.fleet,
                    json.dumps({"budget_full_since": since.isoformat() if since else None}),
                )
            self.current = version  # what scores is what is loaded
            before = self.standing(version)
            if trip is None or not before.acting:
                return None
            after = shadow.tripped(before, trip, now=now)
            await self._set(after)
            self._guard = shadow.GuardState()
            self._metrics.shadow_trips.labels(reason=after.reason.value).inc()
            log.error(
                "RUNTIME GUARD TRIPPED: risk model %s on fleet %s goes back to SHADOW: %s. The at-risk taints "
                "it set are being removed; it acts again only when an operator validates it "
                "(sickbay model validate)",
                version,
                self.fleet,
                after.detail,
            )
            await self._event(
                SHADOWED_REASON,
                f"runtime guard: risk model {version} back to shadow ({after.reason.value}): {after.detail}; "
                "its at-risk taints are removed",
                warning=True,
            )
            self._export()
            return after

    async def history(self, *, limit: int = 20) -> list[dict[str, Any]]:
        return [row.as_dict() for row in await self._validation_log.recent(fleet=self.fleet, limit=limit)]

    def view(self, version: str | None = None) -> dict[str, Any]:
        """A version's standing (default: the current model's), for the API, the CLI and the status page."""
        standing = self.standing(version)
        return {
            "fleet": self.fleet,
            "version": standing.version,
            "mode": "acting" if standing.acting else "shadow",
            "reason": standing.reason.value,
            "detail": standing.detail,
            "since": standing.at.isoformat(),
            "by": standing.by,
            "held": standing.reason.held,
            "budget_full_since": (
                self._guard.budget_full_since.isoformat() if self._guard.budget_full_since else None
            ),
        }

    async def _set(self, standing: shadow.Standing, *, evidence: dict[str, Any] | None = None) -> None:
        s = standing
        await self._validation_log.append(
            Row(
                at=s.at,
                version=s.version,
                fleet=s.fleet,
                reason=s.reason.value,
                acting=s.acting,
                detail=s.detail,
                by=s.by,
                evidence=evidence,
            )
        )
        self._standings[standing.version] = standing

    async def _event(self, reason: str, message: str, *, warning: bool) -> None:
        if self._recorder is None or self._own_pod is None:
            return
        await self._recorder.pod_event(self._own_pod, reason, message, warning=warning)

    def _export(self) -> None:
        """The current model's standing; all 0 while it acts, or while no model is loaded (rules-only)."""
        standing = self.standing() if self.current is not None else None
        for reason in shadow.SHADOW_REASONS:
            on = standing is not None and not standing.acting and standing.reason is reason
            self._metrics.shadow.labels(reason=reason.value).set(1 if on else 0)


def _standing(row: Row) -> shadow.Standing:
    try:
        reason = shadow.Reason(row.reason)
    except ValueError:  # a reason from a newer Sickbay: safest read as not validated
        reason = shadow.Reason.UNVALIDATED
    return shadow.Standing(
        version=row.version, fleet=row.fleet, reason=reason, detail=row.detail, at=row.at, by=row.by
    )
