"""The audit's reads: the cluster through the kube port's `AuditPort` (three lists, or two and the cluster
view's nodes), and, when given, which dcgm-exporter series Prometheus holds. Also which counters the rule
bundle and the model need.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import aiohttp

from app import dcgm_fields
from app.audit.checks import Snapshot
from app.domain import NodeState
from app.kube.port import AuditPort
from app.kube.viewgate import ViewGate
from app.predict.features.fields import SOURCE_METRICS

RULES = Path(__file__).resolve().parents[2] / "rules" / "prometheus"
_FIELD = re.compile(r"\bDCGM_FI_[A-Z0-9_]+\b")


async def read_cluster(port: AuditPort, *, now: datetime, view: ViewGate | None = None) -> Snapshot:
    """Every node, pod and Job. With the service's cluster view (`view`), the nodes come from it while it
    is fresh (the scheduled audit is periodic and fleet-wide: at start-up it waits for the view's first
    lists, as reconciliation does); the pods are always listed, since the audit needs every pod (the view
    keeps only GPU pods) with its facts (priority, tolerations, images), which the view does not keep."""

    async def nodes() -> list[NodeState]:
        fresh = await view.synced("audit") if view is not None else None
        return fresh.nodes() if fresh is not None else await port.list_nodes()

    listed, pods, jobs = await asyncio.gather(nodes(), port.list_pods(facts=True), port.list_jobs())
    return Snapshot(now=now, nodes=tuple(listed), pods=tuple(pods), jobs=tuple(jobs))


def needed_fields(rules_dir: Path = RULES) -> dict[str, tuple[str, ...]]:
    """The catalog fields (pre-4.6 names) the PromQL of the rule bundle reads, and those the model reads.

    A rule names a counter under both names (`A or B`), and some alternatives only newer exporters have:
    only names the catalog knows count, each under its pre-4.6 name, so an alias is never "missing".
    """
    users: dict[str, set[str]] = {}
    for path in sorted(rules_dir.glob("*.yaml")):
        for name in _FIELD.findall(path.read_text()):
            old = dcgm_fields.OLD_NAME_OF.get(name, name)
            if old in dcgm_fields.BY_NAME:
                users.setdefault(old, set()).add(f"rules/prometheus/{path.name}")
    for name in SOURCE_METRICS:
        users.setdefault(name, set()).add("the model")
    return {name: tuple(sorted(who)) for name, who in users.items()}


async def exported_fields(url: str, *, timeout_s: float = 30.0) -> frozenset[str]:
    """Every DCGM_FI_* series name Prometheus holds (GET /api/v1/label/__name__/values with a match[]
    selector, Prometheus HTTP API "Querying label values")."""
    query = {"match[]": '{__name__=~"DCGM_FI_.+"}'}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url.rstrip("/") + "/api/v1/label/__name__/values", params=query) as response,
    ):
        response.raise_for_status()
        body = await response.json()
    if not isinstance(body, Mapping) or body.get("status") != "success":
        raise ValueError(f"Prometheus at {url} answered {str(body)[:200]}")
    return frozenset(str(name) for name in body.get("data") or ())


def with_fields(
    snapshot: Snapshot, exported: frozenset[str], needed: Mapping[str, tuple[str, ...]]
) -> Snapshot:
    from dataclasses import replace  # noqa: PLC0415 - tiny

    return replace(
        snapshot, exported_fields=exported, needed_fields=dict(needed), aliases=dcgm_fields.OLD_NAME_OF
    )
