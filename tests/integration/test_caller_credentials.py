"""One credential per caller, each with only its power (issue 16 part 1), against the simulated API server
over HTTP through the official client, as in a cluster:

- an agent's projected ServiceAccount token is reviewed (TokenReview, audience `sickbay`, cached) and binds
  the agent to its node: events for another node are 403 and nothing is recorded;
- the webhook's token posts alerts, never resets the breaker; an operator's token (or a Kubernetes user
  RBAC allows) does;
- the API server down during a review is 503 with a clear message: never a 500, never an acceptance.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.config.settings import load_settings
from app.kube import client as kube_client
from app.kube.retries import RetryPolicy
from app.service.runtime import SERVICES, build_app
from app.sim.kubeapi import FaultConfig, KubeApiServer
from tests.payloads import alert, webhook

WEBHOOK_TOKEN = "webhook-token"
OPERATOR_TOKEN = "operator-token"
AGENT_SA = "system:serviceaccount:sickbay:sickbay-agent"
SEED: dict[str, Any] = {
    "namespaces": ["sickbay"],
    "nodes": [{"name": "gpu-{i:02d}", "count": 3, "gpus": 8}],
    # An agent's pod, for a token that names its pod but not its node (a cluster older than 1.30).
    "pods": [{"name": "sickbay-agent-old", "namespace": "sickbay", "node": "gpu-02", "gpus": 0}],
}


@dataclass
class World:
    sim: KubeApiServer
    client: TestClient[Any, Any]

    async def rows(self) -> int:
        inbox = self.client.app[SERVICES].inbox
        assert inbox is not None
        return sum((await inbox.counts()).values())

    def reviews(self) -> int:
        return int(self.sim.counters()["requests"].get("create", {}).get("tokenreviews", 0))

    def agent_token(self, token: str, *, node: str | None, pod: str = "sickbay-agent-x") -> str:
        self.sim.register_pod_token(
            token,
            namespace="sickbay",
            service_account="sickbay-agent",
            pod=pod,
            node=node,
            audience="sickbay",
        )
        return token

    async def post_events(self, token: str, *nodes: str) -> tuple[int, dict[str, Any]]:
        now = datetime.now(UTC) - timedelta(seconds=1)
        events = [
            {
                "id": f"e-{token}-{i}",
                "node": node,
                "gpu": 3,
                "kind": "xid",
                "xid": 79,
                "occurred_at": now.isoformat(),
                "message": "XID 79",
            }
            for i, node in enumerate(nodes)
        ]
        body = {"version": "1", "agent": "sickbay-agent", "events": events}
        response = await self.client.post(
            "/api/v1/gpu-events", data=json.dumps(body), headers=_bearer(token, json_body=True)
        )
        return response.status, await response.json()


def _bearer(token: str, *, json_body: bool = True) -> dict[str, str]:
    # Every POST must say JSON (415 otherwise, body or not); a GET does not mind the header.
    headers = {"Authorization": f"Bearer {token}"}
    return {**headers, "Content-Type": "application/json"} if json_body else headers


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with KubeApiServer(seed=SEED) as sim:
        kube = await kube_client.connect(
            kubeconfig=str(sim.write_kubeconfig(tmp_path / "kubeconfig")),
            retry=RetryPolicy(attempts=2, base=0.01, cap=0.05, timeout=5.0),
            qps=1000,
            burst=1000,
        )
        settings = load_settings(
            auth={
                "mode": "bearer",
                "token": WEBHOOK_TOKEN,
                "agents": {"mode": "serviceaccount", "service_account": AGENT_SA},
                "operator": {"token": OPERATOR_TOKEN, "kubernetes": True},
            },
            inbox={"path": tmp_path / "sickbay.db"},
            pod_namespace="sickbay",
            reconcile_interval_s=3600,
            prediction={"enabled": False},
        )
        client = TestClient(TestServer(build_app(settings, kube=kube)))
        await client.start_server()
        try:
            yield World(sim=sim, client=client)
        finally:
            await client.close()
            await kube.close()


async def test_an_agent_reports_its_own_node_and_no_other(world: World) -> None:
    token = world.agent_token("agent-on-gpu-00", node="gpu-00")
    status, body = await world.post_events(token, "gpu-00")
    assert (status, body["accepted"]) == (200, 1)

    status, body = await world.post_events(token, "gpu-00", "gpu-01")
    assert status == 403
    assert body == {
        "error": "forbidden",
        "message": "an agent may report its own node only: this one runs on 'gpu-00', the body names 'gpu-01'",
    }
    assert await world.rows() == 1, "nothing of the refused body is recorded, not even its own node's event"
    rejected = await (await world.client.get("/api/v1/rejected")).json()
    assert rejected["items"] == []


async def test_a_cached_verdict_is_reused(world: World) -> None:
    token = world.agent_token("agent-on-gpu-01", node="gpu-01")
    for _ in range(3):
        assert (await world.post_events(token, "gpu-01"))[0] == 200
    assert world.reviews() == 1, "one TokenReview per token per TTL, not one per push"
    # Another agent is another token: its own review.
    assert (await world.post_events(world.agent_token("agent-2", node="gpu-00"), "gpu-00"))[0] == 200
    assert world.reviews() == 2


async def test_without_the_node_in_the_token_the_pods_node_is_read(world: World) -> None:
    token = world.agent_token("agent-old-cluster", node=None, pod="sickbay-agent-old")
    assert (await world.post_events(token, "gpu-02"))[0] == 200
    assert (await world.post_events(token, "gpu-00"))[0] == 403
    gone = world.agent_token("agent-pod-gone", node=None, pod="sickbay-agent-gone")
    status, body = await world.post_events(gone, "gpu-02")
    assert (status, body["message"]) == (
        403,
        "the token's pod sickbay/sickbay-agent-gone no longer exists or runs on no node",
    )


async def test_tokens_that_are_not_an_agents_are_refused(world: World) -> None:
    status, body = await world.post_events("never-issued", "gpu-00")
    assert status == 401
    assert body["message"].startswith("the Kubernetes API did not accept the token for audience 'sickbay'")
    # An unknown token's verdict is not cached (a flood of them cannot evict the agents'): asked again.
    assert (await world.post_events("never-issued", "gpu-00"))[0] == 401
    assert world.reviews() == 2
    # A real token of another ServiceAccount, even bound to a pod on the right node.
    world.sim.register_pod_token(
        "other-sa", namespace="sickbay", service_account="default", pod="p", node="gpu-00", audience="sickbay"
    )
    status, body = await world.post_events("other-sa", "gpu-00")
    assert (status, body["error"]) == (403, "forbidden")
    assert "system:serviceaccount:sickbay:default" in body["message"]
    # The agent's own account, but a token for the API server's audience (not minted for Sickbay).
    world.sim.register_token(
        "api-audience", AGENT_SA, extra={"authentication.kubernetes.io/node-name": ["gpu-00"]}
    )
    assert (await world.post_events("api-audience", "gpu-00"))[0] == 401
    # The webhook's token is known, and may post alerts only.
    assert (await world.post_events(WEBHOOK_TOKEN, "gpu-00"))[0] == 403
    assert await world.rows() == 0


async def test_the_api_server_down_during_a_review_is_503_never_an_acceptance(world: World) -> None:
    token = world.agent_token("agent-during-outage", node="gpu-00")
    world.sim.configure_faults(
        FaultConfig(error_rate=1.0, kinds=("500",), resources=frozenset({"tokenreviews"}))
    )
    status, body = await world.post_events(token, "gpu-00")
    assert status == 503
    assert body["error"] == "unavailable"
    assert body["message"].startswith(
        "cannot verify the agent's token with the Kubernetes API: CREATE TokenReview"
    )
    assert body["message"].endswith("; retry")
    assert await world.rows() == 0
    # An operator by RBAC alike: no SubjectAccessReview can be asked without the TokenReview.
    world.sim.register_token("alice-token", "alice")
    world.sim.grant("alice", "update", "sickbay.io", "breakers")
    reset = await world.client.post("/api/v1/breaker/reset", headers=_bearer("alice-token"))
    assert reset.status == 503
    assert (await reset.json())["message"].startswith("cannot check the operator with the Kubernetes API")
    # Not cached: once the API server answers again, the agent's retry goes through.
    world.sim.configure_faults(None)
    assert (await world.post_events(token, "gpu-00"))[0] == 200
    # The API server gone altogether (connection refused): still 503, with the reason.
    await world.sim.stop()
    status, body = await world.post_events(world.agent_token("agent-2", node="gpu-01"), "gpu-01")
    assert (status, body["error"]) == (503, "unavailable")
    assert "TokenReview" in body["message"]
    assert await world.rows() == 1


async def test_the_webhook_token_posts_alerts_and_cannot_reset_the_breaker(world: World) -> None:
    alerts = json.dumps(webhook(alert(fingerprint="f1", node="gpu-00")))
    posted = await world.client.post(
        "/api/v1/alerts", data=alerts, headers=_bearer(WEBHOOK_TOKEN, json_body=True)
    )
    assert posted.status == 200
    refused = await world.client.post("/api/v1/breaker/reset", headers=_bearer(WEBHOOK_TOKEN))
    assert refused.status == 403
    assert (await refused.json())["message"] == (
        "the webhook's credentials may post alerts only, not update breakers.sickbay.io"
    )
    # Nor can an agent's token, nor can the operator's post alerts.
    agent = world.agent_token("agent-resets", node="gpu-00")
    assert (await world.client.post("/api/v1/breaker/reset", headers=_bearer(agent))).status == 401
    as_operator = await world.client.post(
        "/api/v1/alerts", data=alerts, headers=_bearer(OPERATOR_TOKEN, json_body=True)
    )
    assert as_operator.status == 403
    reset = await world.client.post("/api/v1/breaker/reset", headers=_bearer(OPERATOR_TOKEN))
    assert reset.status == 200, await reset.text()


async def test_an_operator_by_kubernetes_rbac(world: World) -> None:
    world.sim.register_token("alice-token", "alice", groups=("system:authenticated",))
    world.sim.register_token("bob-token", "bob", groups=("system:authenticated",))
    world.sim.grant("alice", "update", "sickbay.io", "breakers")
    allowed = await world.client.post("/api/v1/breaker/reset", headers=_bearer("alice-token"))
    assert allowed.status == 200, await allowed.text()
    denied = await world.client.post("/api/v1/breaker/reset", headers=_bearer("bob-token"))
    assert denied.status == 403
    assert (await denied.json())["message"] == "RBAC does not allow 'bob' to update breakers.sickbay.io"
    # Alice may reset the breaker; RBAC grants her nothing on the model's standing.
    model = await world.client.post("/api/v1/model/shadow", headers=_bearer("alice-token"))
    assert model.status == 403
    requests = world.sim.counters()["requests"]["create"]
    assert requests["subjectaccessreviews"] == 3
    # A second reset by Alice reuses the verdict.
    assert (await world.client.post("/api/v1/breaker/reset", headers=_bearer("alice-token"))).status == 200
    assert world.sim.counters()["requests"]["create"]["subjectaccessreviews"] == 3


async def test_read_routes_need_credentials_only_when_required(tmp_path: Path, aiohttp_client: Any) -> None:
    base = {"mode": "bearer", "token": WEBHOOK_TOKEN, "operator": {"token": OPERATOR_TOKEN}}
    open_app = build_app(load_settings(auth=base, inbox={"path": tmp_path / "open.db"}))
    open_client = await aiohttp_client(open_app)
    assert (await open_client.get("/api/v1/actions")).status == 200, "open by default"

    reads = {**base, "reads": {"required": True, "token": "reader-token"}}
    client = await aiohttp_client(
        build_app(load_settings(auth=reads, inbox={"path": tmp_path / "closed.db"}))
    )
    for path in (
        "/",
        "/api/v1/actions",
        "/api/v1/nodes",
        "/api/v1/breaker",
        "/api/v1/model",
        "/api/v1/rejected",
    ):
        refused = await client.get(path)
        assert refused.status == 401, path
        assert refused.headers["WWW-Authenticate"] == 'Bearer realm="sickbay"'
    assert (await client.get("/api/v1/actions", headers=_bearer("reader-token"))).status == 200
    assert (await client.get("/api/v1/actions", headers=_bearer(OPERATOR_TOKEN))).status == 200
    webhook_read = await client.get("/api/v1/actions", headers=_bearer(WEBHOOK_TOKEN))
    assert webhook_read.status == 403
    # The reader's token reads; it writes nothing.
    assert (await client.post("/api/v1/breaker/reset", headers=_bearer("reader-token"))).status == 403
    # Probes and scrapes stay open.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path)).status in (200, 503), path
