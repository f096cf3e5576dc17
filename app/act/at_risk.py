"""The at-risk taint's writes: set it to the level the proactive ladder asks for, or remove it.

Each is one read and one write guarded by its `resourceVersion` (a 409 reads again). Which level the node
may carry is `decide.proactive.taint_step`'s answer, and what removing it writes `clear_step`'s; this only
reads, locks and writes. The step to `act` holds `GateKeeper.proactive_lock` from its fresh node list
through its write, so the budget measured on that list and the write are one decision and two nodes never
both take the last slot.

That list is the API server's, never the cluster view's: the budget must count the at-risk taint this
writer set a moment ago on another node, which the view only shows once that write's watch event has
arrived, so two nodes read from the view could both take the last slot. It is one list per node going to
`act`, not a periodic read; the other reads here are the one node, re-read before its guarded write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from app.act import nodes
from app.act.gatekeeper import GateKeeper
from app.act.recorder import Recorder
from app.decide import footprint, gates, proactive
from app.domain import Action, AtRiskParams, NodeState, Outcome, OutcomeStatus, RiskLevel
from app.kube import conflicts, errors, port


@dataclass(frozen=True)
class AtRiskResult:
    outcome: Outcome
    # The level the node carries after this write (or would, in a dry run); None when it was not touched.
    level: RiskLevel | None


class AtRiskWriter:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        recorder: Recorder,
        gates: GateKeeper,
        dry_run: bool,
        clock: Callable[[], datetime],
    ) -> None:
        self._kube = kube
        self._recorder = recorder
        self._gates = gates
        self._dry_run = dry_run
        self._clock = clock

    async def mark(self, action: Action, *, known: NodeState | None = None) -> AtRiskResult:
        """Set the at-risk taint to the level `decide.proactive.taint_step` gives for the action's level.

        The step to `act` lists the nodes and writes under the proactive lock, so the budget check on that
        list and the write are one decision. Nodes quarantined for a fault are left alone.
        """
        params = action.params_as(AtRiskParams)
        wanted = params.level
        if params.held:  # decide already held it at warn: the budget refused it there
            self._gates.count_proactive_refusal()
        if wanted is not RiskLevel.ACT:
            return await self._at_risk(action, wanted, known=known)
        async with self._gates.proactive_lock:
            return await self._at_risk(action, wanted, known=None)

    async def _at_risk(self, action: Action, wanted: RiskLevel, *, known: NodeState | None) -> AtRiskResult:
        name = action.node
        assert name is not None
        # At act, the first attempt's fresh list is both the re-read of the node and the budget's fleet; a
        # retry after a 409 re-reads the node and measures it against that same list (the lock is held).
        fleet: gates.ProactiveFleet | None = None

        async def attempt(number: int) -> AtRiskResult:
            nonlocal fleet
            try:
                if wanted is RiskLevel.ACT and fleet is None:
                    listed = await self._kube.list_nodes()
                    fleet = self._gates.listed(listed)
                    node = next((n for n in listed if n.name == name), None)
                else:
                    node = known if known is not None and number == 1 else await self._kube.get_node(name)
            except errors.NotFoundError:
                node = None
            if node is None:
                return AtRiskResult(
                    self._recorder.outcome(action, OutcomeStatus.SKIPPED, "node not found"), None
                )
            step = proactive.taint_step(node, wanted=wanted, fleet=fleet, policy=self._gates.policy)
            if isinstance(step, proactive.LeaveAlone):
                return AtRiskResult(self._recorder.outcome(action, OutcomeStatus.SKIPPED, step.why), None)
            level = step.level
            if step.held and number == 1:
                self._gates.count_proactive_refusal()
            held_note = f"; held at warn: {step.held}" if step.held else ""
            if step.unchanged:
                detail = f"already {footprint.at_risk_taint(level)}{held_note}"
                return AtRiskResult(self._recorder.outcome(action, OutcomeStatus.SKIPPED, detail), level)
            patch = footprint.at_risk_patch(node, level=level, reason=action.reason, now=self._clock())
            if self._dry_run:
                detail = f"would patch: {nodes.describe(patch)}{held_note}"
                return AtRiskResult(self._recorder.outcome(action, OutcomeStatus.DRY_RUN, detail), level)
            try:
                updated = await self._kube.patch_node(patch)
            except errors.ConflictError:
                raise
            except errors.KubeError as exc:
                return AtRiskResult(self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc)), None)
            self._gates.noted(updated)
            await self._recorder.node_event(
                name,
                "SickbayAtRisk",
                f"{footprint.at_risk_taint(level)}: {action.reason}{held_note}",
                warning=True,
            )
            return AtRiskResult(
                self._recorder.outcome(
                    action, OutcomeStatus.APPLIED, nodes.describe(patch) + held_note, attempts=number
                ),
                level,
            )

        return await conflicts.retry_on_conflict(
            attempt,
            what=f"node {name}",
            gave_up=lambda: AtRiskResult(nodes.gave_up(self._recorder, action), None),
        )

    async def clear(self, action: Action) -> Outcome:
        """Remove the at-risk taint (and the `at-risk` state) once the risk is gone; quarantined nodes stay."""
        name = action.node
        assert name is not None

        async def attempt(number: int) -> Outcome:
            try:
                node = await self._kube.get_node(name)
            except errors.NotFoundError:
                return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "node not found")
            patch = proactive.clear_step(node)
            if isinstance(patch, proactive.LeaveAlone):
                return self._recorder.outcome(action, OutcomeStatus.SKIPPED, patch.why)
            if self._dry_run:
                return self._recorder.outcome(
                    action, OutcomeStatus.DRY_RUN, f"would patch: {nodes.describe(patch)}"
                )
            try:
                updated = await self._kube.patch_node(patch)
            except errors.ConflictError:
                raise
            except errors.KubeError as exc:
                return self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc))
            self._gates.noted(updated)
            await self._recorder.node_event(name, "SickbayAtRiskCleared", action.reason)
            return self._recorder.outcome(
                action, OutcomeStatus.APPLIED, nodes.describe(patch), attempts=number
            )

        return await conflicts.retry_on_conflict(
            attempt, what=f"node {name}", gave_up=lambda: nodes.gave_up(self._recorder, action)
        )
