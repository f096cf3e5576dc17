"""Hands a drained node to whatever fixes it: a human, an annotation for external automation, a custom
resource (a medik8s- or NVSentinel-style reboot request), or a webhook.

Sickbay never resets or reboots anything itself; it asks, then watches for completion in the reconciler.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from string import Template
from typing import Any

import aiohttp
import yaml

from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.domain import Action, ActionKind, Outcome, OutcomeStatus, RemediationParams, RemediationState, Track
from app.kube import errors, port

log = logging.getLogger("app.act")


class Remediators:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        nodes: NodeWriter,
        recorder: Recorder,
        clock: Callable[[], datetime],
        dry_run: bool,
    ) -> None:
        self._kube = kube
        self._nodes = nodes
        self._recorder = recorder
        self._clock = clock
        self._dry_run = dry_run

    async def request(self, node: str, remediation: RemediationParams, *, reason: str) -> Outcome:
        """Ask the remediator `remediation` names (decide chose it) and mark the node `remediating`."""
        action_name = remediation.remediation.value
        kind = remediation.remediator
        action = Action(
            kind=ActionKind.REQUEST_REMEDIATION,
            track=Track.HARDWARE,
            node=node,
            reason=reason,
            params=remediation,
        )
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, f"would request {action_name} ({kind})"
            )
        requested_at = self._clock().isoformat()
        try:
            match kind:
                case "none":
                    detail = "waiting for a human: the node stays quarantined until someone acts"
                case "annotate":
                    detail = f"annotated sickbay.io/remediation-requested={action_name}"
                case "custom-resource":
                    manifest = render(
                        remediation.template or "", node=node, action=action_name, reason=reason
                    )
                    await self._kube.create_custom_object(manifest)
                    detail = f"created {manifest.get('kind')} {manifest.get('metadata', {}).get('name')}"
                case "webhook":
                    await _post(
                        remediation.url or "", {"node": node, "action": action_name, "reason": reason}
                    )
                    detail = f"posted the request to {remediation.url}"
        except (errors.KubeError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, f"{kind} remediator failed: {exc}")
        await self._nodes.set_state(
            node,
            RemediationState.REMEDIATING,
            remediation_requested=action_name,
            remediation_requested_at=requested_at,
            # A new request (an escalation from `verifying`, say) is not done until its remediator says so.
            remediation_done="",
        )
        await self._recorder.node_event(
            node, "SickbayRemediationRequested", f"{action_name} via {kind}: {detail}"
        )
        return self._recorder.outcome(action, OutcomeStatus.APPLIED, detail)


def render(template: str, *, node: str, action: str, reason: str) -> dict[str, Any]:
    """Fill `$node`, `$action`, `$reason` in a YAML template; values are JSON-quoted so they stay scalars."""
    text = Template(template).safe_substitute(node=node, action=action, reason=json.dumps(reason))
    manifest = yaml.safe_load(text)
    if not isinstance(manifest, dict) or "kind" not in manifest or "apiVersion" not in manifest:
        raise ValueError("the remediation template must render to one object with apiVersion and kind")
    return manifest


async def _post(url: str, body: dict[str, str]) -> None:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=body) as response:
        if response.status >= 300:
            raise ValueError(f"{url} answered {response.status}")
