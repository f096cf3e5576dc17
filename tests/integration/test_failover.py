"""Failover between two `sickbay serve` replicas in the middle of a drain that a PodDisruptionBudget holds.

ARCHITECTURE.md (HA): one active replica through a coordination.k8s.io Lease; a follower answers 503 to
alerts; remediation state lives on the Node objects, so "a failover or restart loses nothing that
matters: the new leader reconciles". Here two real `serve` processes (separate inbox files, short lease
timings) share one simulated API server. The leader quarantines a node and evicts its evictable GPU pods,
but a budget that allows no disruption keeps one pod in place. The leader is SIGKILLed: the follower must
take the lease within about a lease duration, start accepting alerts, resume the drain from the node's
`sickbay.io/state` label, and — once the budget relaxes — evict the last pod, without evicting anything
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig

from app.decide import footprint
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import EVENTS, PODS, Ref
from tests.conftest import SickbayServer
from tests.integration.remediation_world import write_policy
from tests.payloads import alert, webhook

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NODE = "gpu-00"
LEASE = "sickbay-leader"
LEADER_LABEL = "sickbay.io/leader"
NAMESPACE = "sickbay"
LEASE_DURATION_S = 3.0
# A takeover needs the old record to stay unchanged for a lease duration on the follower's clock, plus up
# to one retry period (with jitter) and a round trip; the rest is slack for a loaded 2-core CI machine.
TAKEOVER_SLACK_S = 5.0
GUARDED = "guarded-0"
EVICTABLE = ("free-0", "free-1")

SEED: dict[str, Any] = {
    "namespaces": ["training", NAMESPACE, "gpu-operator"],
    "nodes": [{"name": "gpu-{i:02d}", "count": 4, "gpus": 8, "labels": {"sickbay.io/pool": "h100"}}],
    "daemonsets": [
        {"name": "dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "dcgm"}, "nodes": "all"}
    ],
    "pods": [
        # The replicas' own pods: the leader labels its pod so the Service routes alerts to it only.
        {"name": "replica-a", "namespace": NAMESPACE, "labels": {"app": "sickbay"}},
        {"name": "replica-b", "namespace": NAMESPACE, "labels": {"app": "sickbay"}},
        {"name": GUARDED, "namespace": "training", "node": NODE, "gpus": 4, "labels": {"app": "guarded"}},
        *(
            {"name": name, "namespace": "training", "node": NODE, "gpus": 2, "labels": {"app": "free"}}
            for name in EVICTABLE
        ),
    ],
    # One selected pod and minAvailable 1: no disruption allowed until the budget is relaxed.
    "pdbs": [
        {"name": "guarded", "namespace": "training", "minAvailable": 1, "matchLabels": {"app": "guarded"}}
    ],
}


async def until(
    check: Callable[[], Awaitable[Any]], *, timeout: float, what: str, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)


async def readyz(http: aiohttp.ClientSession, server: SickbayServer) -> dict[str, Any] | None:
    try:
        async with http.get(f"{server.url}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as response:
            if response.status != 200:
                return None
            return dict(await response.json())
    except (aiohttp.ClientError, TimeoutError):
        return None


async def post_alert(http: aiohttp.ClientSession, server: SickbayServer, body: dict[str, Any]) -> int:
    async with http.post(
        f"{server.url}/api/v1/alerts", data=json.dumps(body), headers=server.headers
    ) as response:
        await response.read()
        return response.status


def events(sim: KubeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in sim.store.items(EVENTS) if e.get("reason") == reason]


def evicted_pods(sim: KubeApiServer) -> list[str]:
    return [e["involvedObject"]["name"] for e in events(sim, "SickbayEvicted")]


def pod_exists(sim: KubeApiServer, name: str) -> bool:
    return sim.store.get(Ref(PODS, namespace="training", name=name)) is not None


def eviction_requests(sim: KubeApiServer) -> int:
    return int(sim.counters()["requests"].get("create", {}).get("pods/eviction", 0))


@dataclass
class Cluster:
    """One simulated API server, the official client on it, and the `sickbay serve` replicas started on it."""

    sim: KubeApiServer
    kubeconfig: Path
    policy: Path
    tmp: Path
    start_server: Callable[..., SickbayServer]
    http: aiohttp.ClientSession
    core: Any
    leases: Any
    policy_api: Any
    servers: dict[str, SickbayServer] = field(default_factory=dict)

    def env(self, identity: str) -> dict[str, str]:
        return {
            "SICKBAY_IDENTITY": identity,
            "SICKBAY_POD_NAMESPACE": NAMESPACE,
            "SICKBAY_KUBE__ENABLED": "true",
            "SICKBAY_KUBE__KUBECONFIG": str(self.kubeconfig),
            "SICKBAY_KUBE__REQUEST_TIMEOUT_S": "5",
            "SICKBAY_LEADER__ENABLED": "true",
            "SICKBAY_LEADER__NAMESPACE": NAMESPACE,
            "SICKBAY_LEADER__LEASE_NAME": LEASE,
            "SICKBAY_LEADER__LEASE_DURATION_S": str(LEASE_DURATION_S),
            "SICKBAY_LEADER__RENEW_DEADLINE_S": "2",
            "SICKBAY_LEADER__RETRY_PERIOD_S": "0.5",
            "SICKBAY_RECONCILE_INTERVAL_S": "1",
            "SICKBAY_POLICY_FILE": str(self.policy),
        }

    async def start(self, identity: str) -> SickbayServer:
        """Run a replica (its own inbox file, kept across restarts) and wait until it is ready."""
        # From a thread: the fixture polls /readyz with blocking sleeps, and the simulated API server
        # must keep serving on this event loop meanwhile.
        server = await asyncio.to_thread(
            self.start_server, db=self.tmp / f"{identity}.db", env=self.env(identity)
        )
        self.servers[identity] = server
        return server

    async def kill(self, identity: str) -> None:
        """SIGKILL: no shutdown code runs, so the lease is not released and the pod label not removed."""
        server = self.servers.pop(identity)
        server.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(server.proc.wait, 30)
        assert server.proc.returncode == -signal.SIGKILL
        await asyncio.to_thread(server.stop)  # closes its log file

    async def leads(self, identity: str) -> bool:
        state = await readyz(self.http, self.servers[identity])
        return bool(state and state.get("leader"))

    async def holder(self) -> str | None:
        lease = await self.leases.read_namespaced_lease(LEASE, NAMESPACE)
        return lease.spec.holder_identity  # type: ignore[no-any-return]

    async def one_leader(self) -> str | None:
        """The identity of the only replica that says it leads and holds the Lease, while all others follow."""
        states = {name: await readyz(self.http, s) for name, s in self.servers.items()}
        if not all(states.values()):
            return None
        leading = [name for name, state in states.items() if state and state.get("leader")]
        if len(leading) == 1 and await self.holder() == leading[0]:
            return leading[0]
        return None

    async def pod_label(self, identity: str) -> str | None:
        pod = await self.core.read_namespaced_pod(identity, NAMESPACE)
        return (pod.metadata.labels or {}).get(LEADER_LABEL)  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def cluster(tmp: Path, start_server: Callable[..., SickbayServer]) -> AsyncIterator[Cluster]:
    policy = write_policy(
        tmp,
        budgets={
            "max_fraction": 1.0,
            "max_nodes": 100,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 100,
        },
        drain={"deadline": "10m", "on_deadline": "leave"},
    )
    async with KubeApiServer(seed=SEED) as sim:
        kubeconfig = sim.write_kubeconfig(tmp / "kubeconfig")
        configuration = aclient.Configuration()
        await aconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        reader = aclient.ApiClient(configuration)
        http = aiohttp.ClientSession()
        world = Cluster(
            sim=sim,
            kubeconfig=kubeconfig,
            policy=policy,
            tmp=tmp,
            start_server=start_server,
            http=http,
            core=aclient.CoreV1Api(reader),
            leases=aclient.CoordinationV1Api(reader),
            policy_api=aclient.PolicyV1Api(reader),
        )
        try:
            yield world
        finally:
            # Stop the replicas while the API server still runs, so a clean shutdown can release the lease.
            for server in world.servers.values():
                await asyncio.to_thread(server.stop)
            await http.close()
            await reader.close()


async def test_follower_takes_over_a_stuck_drain_and_finishes_it_without_repeating_evictions(
    tmp_path: Path, sickbay_server: Callable[..., SickbayServer]
) -> None:
    async with cluster(tmp_path, sickbay_server) as world:
        sim, core, http = world.sim, world.core, world.http
        for identity in ("replica-a", "replica-b"):
            await world.start(identity)
        first = await until(world.one_leader, timeout=30, what="exactly one leader, holding the Lease")
        second = next(name for name in world.servers if name != first)
        leader, follower = world.servers[first], world.servers[second]

        async def leader_pod_labelled() -> bool:
            return await world.pod_label(first) == "true"

        await until(leader_pod_labelled, timeout=10, what="the leader labels its own pod")
        assert await world.pod_label(second) is None

        fatal = webhook(alert(fingerprint="failover-79", node=NODE, xid="79", gpu="2"))
        assert await post_alert(http, follower, fatal) == 503, "a follower refuses alerts (AM retries)"
        assert await post_alert(http, leader, fatal) == 200

        async def stuck_mid_drain() -> bool:
            node = await core.read_node(NODE)
            return (
                bool(node.spec.unschedulable)
                and sorted(evicted_pods(sim)) == sorted(EVICTABLE)
                and pod_exists(sim, GUARDED)
                and sim.counters()["evictions"].get("refused", 0) >= 1
            )

        await until(stuck_mid_drain, timeout=30, what="evictable pods evicted, the guarded one refused")
        node = await core.read_node(NODE)
        assert node.metadata.labels[footprint.STATE] == "draining"
        assert node.metadata.annotations[footprint.OWNED_BY] == first
        assert not any(pod_exists(sim, name) for name in EVICTABLE)
        before_kill = sim.counters()
        assert before_kill["evictions"].get("evicted", 0) == len(EVICTABLE)
        requests_before_kill = eviction_requests(sim)
        refused_before_kill = before_kill["evictions"].get("refused", 0)
        assert await world.holder() == first

        killed_at = time.monotonic()
        await world.kill(first)

        async def follower_leads() -> bool:
            return await world.leads(second)

        await until(follower_leads, timeout=30, what="the follower takes over", interval=0.02)
        takeover_s = time.monotonic() - killed_at
        lease = await world.leases.read_namespaced_lease(LEASE, NAMESPACE)
        print(
            f"\ntakeover after SIGKILL: {takeover_s:.2f}s (lease duration {LEASE_DURATION_S:g}s); "
            f"lease now held by {lease.spec.holder_identity}, transitions {lease.spec.lease_transitions}"
        )
        assert lease.spec.holder_identity == second
        assert lease.spec.lease_transitions >= 1
        assert takeover_s <= LEASE_DURATION_S + TAKEOVER_SLACK_S, takeover_s
        assert await world.pod_label(second) == "true"

        # Alertmanager retries what the dead leader never answered: the new leader accepts it.
        assert await post_alert(http, follower, fatal) == 200

        # The new leader resumes the drain from the node's state label: it asks for the guarded pod again
        # (and is refused), and asks for nothing else.
        async def resumed() -> bool:
            return sim.counters()["evictions"].get("refused", 0) > refused_before_kill

        await until(resumed, timeout=20, what="the new leader resumes the drain")
        assert sim.counters()["evictions"].get("evicted", 0) == len(EVICTABLE)

        await world.policy_api.patch_namespaced_pod_disruption_budget(
            "guarded", "training", {"spec": {"minAvailable": 0}}
        )

        async def drained() -> bool:
            return not pod_exists(sim, GUARDED) and GUARDED in evicted_pods(sim)

        await until(drained, timeout=40, what="the guarded pod evicted once the budget allows it")

        async def handed_off() -> bool:
            labels = (await core.read_node(NODE)).metadata.labels or {}
            return labels.get(footprint.STATE) == "remediating"

        await until(handed_off, timeout=20, what="the drained node handed to its remediator")

        after = sim.counters()
        assert sorted(evicted_pods(sim)) == sorted([*EVICTABLE, GUARDED]), "each pod evicted exactly once"
        assert after["evictions"].get("evicted", 0) == len(EVICTABLE) + 1, after["evictions"]
        refused_after_kill = after["evictions"].get("refused", 0) - refused_before_kill
        # Every eviction request since the kill was for the guarded pod: refused ones, then the success.
        assert eviction_requests(sim) - requests_before_kill == refused_after_kill + 1
        assert len(events(sim, "SickbayQuarantined")) == 1, "the new leader did not quarantine again"
        node = await core.read_node(NODE)
        taints = [(t.key, t.value) for t in node.spec.taints or [] if t.key.startswith("sickbay.io/")]
        assert taints == [(footprint.UNHEALTHY, "reboot-node")]
        assert node.spec.unschedulable is True
        assert node.metadata.annotations[footprint.REMEDIATION_REQUESTED] == "reboot-node"

        # The Event follows the state label that says the node was handed off: wait for it, don't race it.
        async def announced() -> bool:
            return bool(events(sim, "SickbayRemediationRequested"))

        await until(announced, timeout=10, what="the hand-off's Event")
        requested = events(sim, "SickbayRemediationRequested")
        assert [e["involvedObject"]["name"] for e in requested] == [NODE]
        daemonset_pods = await core.list_namespaced_pod(
            "gpu-operator", field_selector=f"spec.nodeName={NODE}"
        )
        assert len(daemonset_pods.items) == 1, "DaemonSet pods are never evicted"


async def test_a_leader_restarted_in_place_drops_its_stale_leader_label(
    tmp_path: Path, sickbay_server: Callable[..., SickbayServer]
) -> None:
    """A container killed and restarted in the same pod (OOM kill) comes back as a follower; its pod must
    stop carrying the leader label, or the Service that selects the label sends it alerts it refuses."""
    async with cluster(tmp_path, sickbay_server) as world:
        for identity in ("replica-a", "replica-b"):
            await world.start(identity)
        first = await until(world.one_leader, timeout=30, what="exactly one leader, holding the Lease")
        second = next(name for name in world.servers if name != first)

        async def labelled(identity: str) -> bool:
            return await world.pod_label(identity) == "true"

        await until(lambda: labelled(first), timeout=10, what="the leader labels its own pod")
        await world.kill(first)
        await until(lambda: world.leads(second), timeout=30, what="the follower takes over")
        await until(lambda: labelled(second), timeout=10, what="the new leader labels its pod")

        await world.start(first)  # the same pod name, the same inbox file: a restart in place
        assert await world.one_leader() == second, "the restarted replica follows"

        async def stale_label_gone() -> bool:
            return await world.pod_label(first) is None

        await until(stale_label_gone, timeout=8, what="the restarted follower's pod loses the leader label")
        assert await world.pod_label(second) == "true"
