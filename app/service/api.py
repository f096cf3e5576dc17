"""Read-mostly HTTP API for operators and the CLI: journal entries, nodes Sickbay acts on, the breaker.

Handlers take plain collaborators (journal, kube port, gatekeeper) so they can be tested without the
rest of the service; the runtime mounts them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from app import kubenames
from app.act.gatekeeper import GateKeeper
from app.act.shadowing import ShadowKeeper
from app.decide import footprint
from app.domain import NodeState
from app.ingest import bodies
from app.kube import errors
from app.store import deadletter, inbox
from app.store.journal import Journal

# An operator-requested shadow backtest: (figures, problem), or None when it could not run here.
Backtest = Callable[[], Awaitable[tuple[dict[str, Any] | None, str] | None]]

_SOURCES = ("alertmanager", "agent")


class NodeSource(Protocol):
    """Where the node routes read nodes from: the runtime's cached, budgeted reads (or any `KubePort`)."""

    async def get_node(self, name: str) -> NodeState: ...

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]: ...


def _kube_refusal(exc: errors.KubeError) -> web.Response:
    """503 when the API server cannot answer; 429 when the read routes' own budget is spent."""
    if isinstance(exc, errors.TooManyRequestsError):
        retry = max(1, round(exc.retry_after or 1))
        return web.json_response(
            {"error": "busy", "message": str(exc)}, status=429, headers={"Retry-After": str(retry)}
        )
    return web.json_response({"error": "kube_unavailable", "message": str(exc)}, status=503)


def _limit(request: web.Request) -> int:
    try:
        return min(max(int(request.query.get("limit", "100")), 1), 1000)
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "bad_query", "message": "limit must be an integer"}',
            content_type="application/json",
        ) from None


async def actions(request: web.Request, journal: Journal) -> web.Response:
    limit = _limit(request)
    node = request.query.get("node") or None
    entries = await journal.entries(limit=limit, node=node)
    outcomes = await journal.outcomes(limit=limit, node=node)
    return web.json_response(
        {
            "items": [
                {
                    "id": e.id,
                    "at": e.at,
                    "node": e.node,
                    "gpu": e.gpu,
                    "xid": e.xid,
                    "class": e.fault_class,
                    "rule": e.rule,
                    "status": e.status,
                    "source": e.source,
                    "reason": e.reason,
                    "plan": e.plan,
                }
                for e in entries
            ],
            "outcomes": outcomes,
        }
    )


def rejected_view(letter: deadletter.Kept) -> dict[str, Any]:
    return {
        "id": letter.id,
        "source": letter.source,
        "reason": letter.reason,
        "loc": letter.where,
        "message": letter.message,
        "fingerprint": letter.fingerprint,
        "labels": letter.labels,
        "raw": letter.item,
        "first_seen": letter.first_seen,
        "last_seen": letter.last_seen,
        "count": letter.seen,
    }


def unattributed_view(row: inbox.Row) -> dict[str, Any]:
    """An alert stored with no node: what it was, from the validated payload the inbox keeps."""
    alert = json.loads(row.payload)
    labels = alert.get("labels", {})
    return {
        "fingerprint": row.fingerprint,
        "status": row.status,
        "alertname": labels.get("alertname", "unnamed"),
        "xid": labels.get("xid") or labels.get("err_code"),
        "starts_at": alert.get("startsAt"),
        "received_at": row.received_at,
        "labels": labels,
    }


async def rejected(request: web.Request, letters: deadletter.DeadLetters) -> web.Response:
    """The dead-letter list: alerts and events refused one by one, the most recently seen first."""
    limit = _limit(request)
    source = request.query.get("source") or None
    if source is not None and source not in _SOURCES:
        return web.json_response(
            {"error": "bad_query", "message": f"source must be one of {', '.join(_SOURCES)}"}, status=400
        )
    try:
        kept = await letters.recent(limit=limit, source=source)
        total = await letters.count()
    except deadletter.DeadLetterError as exc:
        return web.json_response({"error": "unavailable", "message": str(exc)}, status=503)
    return web.json_response(
        {"items": [rejected_view(k) for k in kept], "total": total, "max_rows": letters.max_rows}
    )


def node_view(node: NodeState) -> dict[str, Any]:
    return {
        "name": node.name,
        "state": node.state.value if node.state else None,
        "unschedulable": node.unschedulable,
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
        "reason": node.annotation(footprint.REASON),
        "since": node.annotation(footprint.SINCE),
        "fault": footprint.fault_of(node),
        "owned_by": node.annotation(footprint.OWNED_BY),
        "remediation_requested": node.annotation(footprint.REMEDIATION_REQUESTED),
        "gpu_capacity": node.gpu_capacity,
        "gpu_allocatable": node.gpu_allocatable,
        "managed": node.managed,
    }


async def nodes(request: web.Request, kube: NodeSource | None) -> web.Response:
    if kube is None:
        return web.json_response(
            {"error": "no_cluster", "message": "Kubernetes access is not configured"}, status=404
        )
    try:
        listed = await kube.list_nodes(label_selector=footprint.STATE)
    except errors.KubeError as exc:
        return _kube_refusal(exc)
    return web.json_response({"items": [node_view(n) for n in listed]})


async def node(request: web.Request, kube: NodeSource | None, journal: Journal) -> web.Response:
    name = request.match_info["name"]
    # Checked before any use: `..` would otherwise reach the API server as `/api/v1/nodes/..`, which
    # clients and proxies collapse to `/api/v1/` (a 200 with a blank node).
    if (problem := kubenames.subdomain_problem(name)) is not None:
        return web.json_response(
            {"error": "invalid_name", "message": f"not a Kubernetes node name: {problem}"}, status=400
        )
    if kube is None:
        return web.json_response(
            {"error": "no_cluster", "message": "Kubernetes access is not configured"}, status=404
        )
    try:
        found = await kube.get_node(name)
    except errors.NotFoundError:
        return web.json_response({"error": "not_found", "message": f"node {name!r} not found"}, status=404)
    except errors.KubeError as exc:
        return _kube_refusal(exc)
    view = node_view(found)
    view["journal"] = [
        {"at": e.at, "class": e.fault_class, "reason": e.reason, "plan": e.plan["summary"]}
        for e in await journal.entries(limit=50, node=name)
    ]
    view["outcomes"] = await journal.outcomes(node=name, limit=50)
    return web.json_response(view)


def breaker_view(gates: GateKeeper) -> dict[str, Any]:
    breaker = gates.breaker
    fleet = gates.fleet()
    return {
        "open": breaker.open,
        "opened_at": breaker.opened_at.isoformat() if breaker.opened_at else None,
        "reason": breaker.reason,
        "nodes": fleet.total,
        "quarantined": fleet.quarantined,
    }


async def breaker(request: web.Request, gates: GateKeeper | None) -> web.Response:
    if gates is None:
        return web.json_response(
            {"error": "no_cluster", "message": "Kubernetes access is not configured"}, status=404
        )
    return web.json_response(breaker_view(gates))


async def breaker_reset(request: web.Request, gates: GateKeeper | None) -> web.Response:
    if gates is None:
        return web.json_response(
            {"error": "no_cluster", "message": "Kubernetes access is not configured"}, status=404
        )
    await gates.reset()
    return web.json_response(breaker_view(gates))


def model_view(
    keeper: ShadowKeeper, history: list[dict[str, Any]], *, version: str | None = None
) -> dict[str, Any]:
    """The proactive ladder's standing for a model (default: the current one) on this fleet, and its
    recent history."""
    return {**keeper.view(version), "history": history}


def _no_model_state() -> web.Response:
    return web.json_response(
        {"error": "starting", "message": "the validation log is not open yet"}, status=503
    )


async def model(request: web.Request, keeper: ShadowKeeper | None) -> web.Response:
    if keeper is None:
        return _no_model_state()
    return web.json_response(model_view(keeper, await keeper.history(limit=_limit(request))))


async def _body(request: web.Request) -> dict[str, Any]:
    """An optional JSON object: {"version": ..., "force": ..., "note": ...}."""
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except web.RequestPayloadError:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "unreadable_body", "message": bodies.UNREADABLE}),
            content_type="application/json",
        ) from None
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser's stack
        raise web.HTTPBadRequest(
            text='{"error": "bad_json", "message": "the body must be a JSON object"}',
            content_type="application/json",
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k, ""), str) for k in ("version", "note", "who")
    ):
        raise web.HTTPBadRequest(
            text='{"error": "bad_body", "message": "version, note and who must be strings"}',
            content_type="application/json",
        )
    return data


async def model_validate(
    request: web.Request, keeper: ShadowKeeper | None, backtest: Backtest | None
) -> web.Response:
    """Leave shadow: with `force`, on the operator's word; otherwise only if a backtest run now passes."""
    if keeper is None:
        return _no_model_state()
    body = await _body(request)
    version = body.get("version") or None
    who = body.get("who") or "api"
    if body.get("force") is True:
        done = await keeper.operator(version, validate=True, who=who, note=body.get("note") or "")
        return web.json_response(model_view(keeper, await keeper.history(limit=5), version=done.version))
    if version is not None and version != keeper.current:
        return web.json_response(
            {
                "error": "not_loaded",
                "message": f"only the loaded model ({keeper.current}) can be backtested; "
                "use force to validate another version",
            },
            status=409,
        )
    if backtest is None:
        return web.json_response(
            {
                "error": "no_backtest",
                "message": "no Prometheus (prediction.prometheus_url) to backtest against, "
                "or no model loaded: use force to validate on your word",
            },
            status=409,
        )
    ran = await backtest()
    if ran is None:
        return web.json_response(
            {"error": "not_run", "message": "not run: no model is loaded, or this replica is not the leader"},
            status=409,
        )
    view = model_view(keeper, await keeper.history(limit=5))
    figures, problem = ran
    return web.json_response({**view, "backtest": figures, "problem": problem or None})


async def model_shadow(request: web.Request, keeper: ShadowKeeper | None) -> web.Response:
    """Back to shadow on the operator's word, until an operator validates it again."""
    if keeper is None:
        return _no_model_state()
    body = await _body(request)
    done = await keeper.operator(
        body.get("version") or None, validate=False, who=body.get("who") or "api", note=body.get("note") or ""
    )
    return web.json_response(model_view(keeper, await keeper.history(limit=5), version=done.version))
