"""`KubeClient` against an API server, through the official client: the port's behaviour, not its code.

Runs against the simulator by default, or a real cluster with `SICKBAY_CONTRACT_KUBECONFIG` (see conftest).
Tests that need the simulator's request counters or fault injection take the `sim` fixture. Time-dependent
behaviour (backoff, Retry-After, pacing) runs on a fake clock injected into the client, never on wall time.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from app.domain import Condition, NodePatch, Taint
from app.kube import errors
from app.kube.client import KubeClient, connect
from app.kube.port import EventSpec, KubePort
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import FaultConfig, KubeApiServer
from tests.contract.conftest import Cluster, Nodes, PodFactory, eventually, unique

FAST_RETRIES = RetryPolicy(attempts=5, base=0.01, cap=0.05, jitter=0.5, timeout=5.0)


class FakeTime:
    """A monotonic clock that only moves when someone sleeps on it; sleeps are recorded, not waited."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.now + seconds
        await asyncio.sleep(0)
        self.now = max(self.now, wake)


class WallClock:
    """Wall-clock UTC for timestamps the client writes, set by the test."""

    def __init__(self) -> None:
        self.value = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.value


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[KubeClient]:
    client = await connect(
        kubeconfig=str(cluster.kubeconfig), context=None, in_cluster=False, retry=FAST_RETRIES
    )
    async with client:
        yield client


@pytest.fixture
def inject(sim: KubeApiServer) -> Iterator[Callable[[FaultConfig], None]]:
    """Turn on the simulator's fault injection; off again before other fixtures clean up."""
    try:
        yield sim.configure_faults
    finally:
        sim.configure_faults(None)


def derived(kube: KubeClient, **options: Any) -> KubeClient:
    """Another `KubeClient` on the same connection, with its own pacing, retries and clocks."""
    options.setdefault("retry", FAST_RETRIES)
    return KubeClient(kube.api, **options)


async def set_node_status(core: aclient.CoreV1Api, name: str, status: dict[str, Any]) -> None:
    await core.patch_node_status(name, {"status": status}, _content_type="application/merge-patch+json")


async def raw_node(core: aclient.CoreV1Api, name: str) -> dict[str, Any]:
    node = await core.read_node(name)
    result: dict[str, Any] = core.api_client.sanitize_for_serialization(node)
    return result


def test_kube_client_has_every_call_of_the_port() -> None:
    calls = [name for name in vars(KubePort) if not name.startswith("_")]
    assert calls
    for name in calls:
        expected = inspect.signature(getattr(KubePort, name))
        actual = inspect.signature(getattr(KubeClient, name))
        assert list(actual.parameters) == list(expected.parameters), name
        assert inspect.iscoroutinefunction(getattr(KubeClient, name)), name


# --- reads -----------------------------------------------------------------------------------------------


async def test_nodes_read_as_domain_values(kube: KubeClient, nodes: Nodes, core: aclient.CoreV1Api) -> None:
    pool = unique("pool")
    gpu_node = await nodes.create(
        labels={"pool": pool, "sickbay.io/state": "quarantined"},
        taints=[{"key": "sickbay.io/unhealthy", "value": "reset-gpu", "effect": "NoSchedule"}],
    )
    other = await nodes.create(labels={"pool": pool})
    await nodes.create()
    await set_node_status(
        core,
        gpu_node,
        {
            "capacity": {"nvidia.com/gpu": "8", "example.com/gpu": "2", "cpu": "96"},
            "allocatable": {"nvidia.com/gpu": "7", "example.com/gpu": "2", "cpu": "95"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
        },
    )

    node = await kube.get_node(gpu_node)
    assert node.name == gpu_node
    assert node.resource_version
    assert (node.gpu_capacity, node.gpu_allocatable) == (8, 7)
    assert Taint("sickbay.io/unhealthy", "reset-gpu", "NoSchedule") in node.taints
    assert node.label("pool") == pool
    assert node.state is not None
    assert node.state.value == "quarantined"
    ready = node.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason) == ("True", "KubeletReady")

    both = derived(kube, gpu_resources=("nvidia.com/gpu", "example.com/gpu"))
    assert (await both.get_node(gpu_node)).gpu_capacity == 10

    listed = await kube.list_nodes(label_selector=f"pool={pool}")
    assert sorted(n.name for n in listed) == sorted([gpu_node, other])
    with pytest.raises(errors.NotFoundError):
        await kube.get_node(unique("sbc-node-missing"))


async def test_pods_listed_by_node_and_namespace(
    kube: KubeClient, nodes: Nodes, make_pod: PodFactory, namespace: str
) -> None:
    first, second = await nodes.create(), await nodes.create()
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "trainer",
        "uid": "u-1",
        "controller": True,
    }
    trainer = await make_pod(node=first, gpus=4, owner=owner, labels={"job": "llm"})
    await make_pod(node=first)
    await make_pod(node=second, gpus=1)

    on_first = await kube.list_pods(node=first)
    assert len(on_first) == 2
    assert {p.node for p in on_first} == {first}
    pod = next(p for p in on_first if p.name == trainer["metadata"]["name"])
    assert pod.namespace == namespace
    assert pod.uid == trainer["metadata"]["uid"]
    assert pod.phase == "Running"
    assert pod.gpu_request == 4
    assert pod.label("job") == "llm"
    assert pod.controller is not None
    assert (pod.controller.kind, pod.controller.name, pod.controller.controller) == (
        "ReplicaSet",
        "trainer",
        True,
    )

    in_namespace = await kube.list_pods(namespace=namespace)
    assert len(in_namespace) == 3
    assert sum(p.gpu_request for p in in_namespace) == 5
    assert [p.name for p in await kube.list_pods(namespace=namespace, label_selector="job=llm")] == [pod.name]


async def test_gpu_request_counts_like_the_scheduler(
    kube: KubeClient, nodes: Nodes, core: aclient.CoreV1Api, namespace: str
) -> None:
    node = await nodes.create()

    def container(name: str, gpus: int, *, requests: bool = False, **extra: Any) -> dict[str, Any]:
        resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        if requests:
            resources["requests"] = {"nvidia.com/gpu": str(gpus)}
        return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources, **extra}

    spec = {
        "nodeName": node,
        # A sidecar (kept running) and then a one-off init container that needs 5 GPUs while it runs.
        "initContainers": [container("proxy", 1, restartPolicy="Always"), container("warmup", 5)],
        "containers": [container("trainer", 2), container("eval", 1, requests=True)],
    }
    await core.create_namespaced_pod(namespace, {"metadata": {"name": "gang-0"}, "spec": spec})

    (pod,) = await kube.list_pods(node=node)
    assert pod.gpu_request == 6  # max(2 + 1 + sidecar 1, sidecar 1 + warmup 5)
    assert pod.phase == "Pending"


async def test_lists_are_read_page_by_page(kube: KubeClient, nodes: Nodes, cluster: Cluster) -> None:
    pool = unique("pool")
    made = [await nodes.create(labels={"pool": pool}) for _ in range(5)]
    paged = derived(kube, page_size=2)
    if cluster.sim is not None:
        cluster.sim.reset_counters()

    listed = await paged.list_nodes(label_selector=f"pool={pool}")

    assert sorted(n.name for n in listed) == sorted(made)
    if cluster.sim is not None:
        assert cluster.sim.counters()["requests"] == {"list": {"nodes": 3}}


# --- node writes -----------------------------------------------------------------------------------------


async def test_patch_node_with_a_stale_resource_version_conflicts(kube: KubeClient, nodes: Nodes) -> None:
    name = await nodes.create()
    read = await kube.get_node(name)
    await kube.patch_node(NodePatch(node=name, resource_version=read.resource_version, labels=(("a", "1"),)))
    attempts = kube.attempts

    with pytest.raises(errors.ConflictError):
        await kube.patch_node(
            NodePatch(node=name, resource_version=read.resource_version, labels=(("b", "2"),))
        )
    assert kube.attempts == attempts + 1  # a 409 is never retried
    assert (await kube.get_node(name)).label("b") is None


async def test_quarantine_is_one_request(kube: KubeClient, nodes: Nodes, cluster: Cluster) -> None:
    name = await nodes.create(labels={"pool": "a100"})
    read = await kube.get_node(name)
    patch = NodePatch(
        node=name,
        resource_version=read.resource_version,
        labels=(("sickbay.io/state", "quarantined"),),
        annotations=(("sickbay.io/reason", "XID 79"), ("sickbay.io/owned-by", "sickbay")),
        taints=(Taint("sickbay.io/unhealthy", "reboot-node", "NoSchedule"),),
        unschedulable=True,
    )
    if cluster.sim is not None:
        cluster.sim.reset_counters()
    attempts = kube.attempts

    node = await kube.patch_node(patch)

    assert kube.attempts == attempts + 1
    if cluster.sim is not None:
        assert cluster.sim.counters()["requests"] == {"patch": {"nodes": 1}}
    assert node.unschedulable
    assert node.taints == (Taint("sickbay.io/unhealthy", "reboot-node", "NoSchedule"),)
    assert node.label("sickbay.io/state") == "quarantined"
    assert node.label("pool") == "a100"
    assert node.annotation("sickbay.io/reason") == "XID 79"
    assert node.owned_by_sickbay
    assert node.resource_version != read.resource_version
    if cluster.sim is not None:  # on a real cluster a controller may have written since
        assert await kube.get_node(name) == node


async def test_patch_node_removes_labels_and_annotations(kube: KubeClient, nodes: Nodes) -> None:
    name = await nodes.create(labels={"sickbay.io/state": "verifying", "pool": "h100"})
    first = await kube.get_node(name)
    annotated = await kube.patch_node(
        NodePatch(
            node=name, resource_version=first.resource_version, annotations=(("sickbay.io/since", "t0"),)
        )
    )

    released = await kube.patch_node(
        NodePatch(
            node=name,
            resource_version=annotated.resource_version,
            labels=(("sickbay.io/state", ""),),
            annotations=(("sickbay.io/since", ""),),
            taints=(),
            unschedulable=False,
        )
    )

    assert released.label("sickbay.io/state") is None
    assert released.state is None
    assert released.label("pool") == "h100"
    assert released.annotation("sickbay.io/since") is None
    assert released.taints == ()
    assert not released.unschedulable


async def test_rewriting_taints_keeps_time_added_of_the_ones_left_in_place(
    kube: KubeClient, nodes: Nodes, core: aclient.CoreV1Api
) -> None:
    added = "2025-01-01T00:00:00Z"
    unreachable = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": added}
    name = await nodes.create(taints=[unreachable])
    read = await kube.get_node(name)

    await kube.patch_node(
        NodePatch(
            node=name,
            resource_version=read.resource_version,
            taints=(*read.taints, Taint("sickbay.io/unhealthy", "replace", "NoSchedule")),
        )
    )

    taints = {t["key"]: t for t in (await raw_node(core, name))["spec"]["taints"]}
    assert "sickbay.io/unhealthy" in taints
    assert taints["node.kubernetes.io/unreachable"]["timeAdded"].startswith("2025-01-01T00:00:00")


async def test_set_node_condition_merges_by_type(
    kube: KubeClient, nodes: Nodes, core: aclient.CoreV1Api
) -> None:
    name = await nodes.create()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    await set_node_status(core, name, {"conditions": [ready]})
    wall = WallClock()
    client = derived(kube, now=wall)

    await client.set_node_condition(name, Condition("GpuHealthy", "False", "XID79", "GPU 3 fell off the bus"))
    wall.value += timedelta(minutes=1)
    await client.set_node_condition(
        name, Condition("GpuHealthy", "False", "XID79", "GPU 3 still off the bus")
    )

    conditions = {c["type"]: c for c in (await raw_node(core, name))["status"]["conditions"]}
    assert set(conditions) == {"Ready", "GpuHealthy"}
    assert conditions["Ready"]["reason"] == "KubeletReady"
    gpu = conditions["GpuHealthy"]
    assert (gpu["status"], gpu["reason"], gpu["message"]) == ("False", "XID79", "GPU 3 still off the bus")
    assert gpu["lastTransitionTime"].startswith("2025-03-01T12:00:00")  # same status: no transition
    assert gpu["lastHeartbeatTime"].startswith("2025-03-01T12:01:00")

    wall.value += timedelta(minutes=1)
    await client.set_node_condition(name, Condition("GpuHealthy", "True", "Verified", "all GPUs healthy"))
    node = await client.get_node(name)
    healthy = node.condition("GpuHealthy")
    assert healthy is not None
    assert (healthy.status, healthy.reason) == ("True", "Verified")
    assert healthy.last_transition == datetime(2025, 3, 1, 12, 2, 0, tzinfo=UTC)
    assert node.condition("Ready") is not None


# --- pods ------------------------------------------------------------------------------------------------


async def _pod_gone_or_going(core: aclient.CoreV1Api, namespace: str, name: str) -> bool:
    """Gone (simulator, or a real kubelet), or marked for deletion (a real cluster with no kubelet behind it)."""
    try:
        pod = await core.read_namespaced_pod(name, namespace)
    except aclient.ApiException as error:
        return error.status == 404
    return pod.metadata.deletion_timestamp is not None


async def test_evict_pod_marks_it_and_it_goes(
    kube: KubeClient, make_pod: PodFactory, core: aclient.CoreV1Api, namespace: str
) -> None:
    name = (await make_pod(gpus=1))["metadata"]["name"]

    await kube.evict_pod(namespace, name)

    # Deleted pods stay Terminating for a moment (the simulator's stand-in kubelet takes 0.2 s; on a real
    # cluster these pods sit on Node objects with no kubelet at all), long enough to see the mark.
    pod = await core.read_namespaced_pod(name, namespace)
    assert pod.metadata.deletion_timestamp is not None
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions or [])
    await eventually(lambda: _pod_gone_or_going(core, namespace, name))
    with pytest.raises(errors.NotFoundError):
        await kube.evict_pod(namespace, unique("pod-missing"))


async def test_eviction_blocked_by_a_budget_is_returned_at_once(
    kube: KubeClient, make_pod: PodFactory, policy: aclient.PolicyV1Api, namespace: str, cluster: Cluster
) -> None:
    app = unique("app")
    name = (await make_pod(labels={"app": app}))["metadata"]["name"]
    pdb = {"metadata": {"name": app}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}}
    await policy.create_namespaced_pod_disruption_budget(namespace, pdb)

    async def budget_computed() -> bool:
        status = (await policy.read_namespaced_pod_disruption_budget(app, namespace)).status
        return status is not None and status.current_healthy == 1 and status.disruptions_allowed == 0

    await eventually(budget_computed)
    if cluster.sim is not None:
        cluster.sim.reset_counters()
    attempts = kube.attempts

    with pytest.raises(errors.TooManyRequestsError) as refused:
        await kube.evict_pod(namespace, name)

    assert refused.value.budget
    assert refused.value.status == 429
    assert kube.attempts == attempts + 1  # the drain logic owns this retry, not the client
    if cluster.sim is not None:
        assert cluster.sim.counters()["requests"] == {"create": {"pods/eviction": 1}}
    assert [p.name for p in await kube.list_pods(namespace=namespace)] == [name]


async def test_delete_pod_with_uid_precondition(
    kube: KubeClient, make_pod: PodFactory, core: aclient.CoreV1Api, namespace: str
) -> None:
    pod = await make_pod()
    name = pod["metadata"]["name"]

    with pytest.raises(errors.ConflictError) as stale:
        await kube.delete_pod(namespace, name, uid="not-this-one")
    # kube-apiserver's 409 for a stale UID precondition, message carried through to the typed error
    assert stale.value.status == 409
    assert "the UID in the precondition (not-this-one) does not match the UID in record" in str(stale.value)
    await kube.delete_pod(namespace, name, uid=pod["metadata"]["uid"])
    await eventually(lambda: _pod_gone_or_going(core, namespace, name))

    with pytest.raises(errors.NotFoundError):
        await kube.delete_pod(namespace, unique("pod-missing"))


async def test_patch_pod_labels_sets_and_removes(
    kube: KubeClient, make_pod: PodFactory, namespace: str
) -> None:
    name = (await make_pod(labels={"keep": "yes", "drop": "me"}))["metadata"]["name"]

    await kube.patch_pod_labels(namespace, name, {"sickbay.io/leader": "true", "drop": None})

    (pod,) = await kube.list_pods(namespace=namespace)
    assert dict(pod.labels) == {"keep": "yes", "sickbay.io/leader": "true"}


# --- events and custom objects ---------------------------------------------------------------------------


async def test_events_are_created_and_listable(
    kube: KubeClient, nodes: Nodes, make_pod: PodFactory, core: aclient.CoreV1Api, namespace: str
) -> None:
    node = await nodes.create()
    pod = await make_pod(node=node)
    client = derived(kube, instance="sickbay-0")

    await client.create_event(
        EventSpec(kind="Pod", name=pod["metadata"]["name"], namespace=namespace, reason="SickbayEvicted",
                  message="evicted from a sick node", type="Warning", uid=pod["metadata"]["uid"])
    )  # fmt: skip
    await client.create_event(
        EventSpec(kind="Pod", name=pod["metadata"]["name"], namespace=namespace, reason="SickbayEvicted",
                  message="evicted again", type="Warning")
    )  # fmt: skip
    await client.create_event(
        EventSpec(kind="Node", name=node, namespace="default", reason="SickbayQuarantined", message="XID 79")
    )

    events = (await core.list_namespaced_event(namespace)).items
    assert len(events) == 2
    assert len({e.metadata.name for e in events}) == 2
    first = next(e for e in events if e.message == "evicted from a sick node")
    assert first.metadata.name.startswith(pod["metadata"]["name"] + ".")
    assert (first.reason, first.type, first.count) == ("SickbayEvicted", "Warning", 1)
    assert first.source.component == "sickbay"
    assert first.reporting_component == "sickbay"
    assert first.reporting_instance == "sickbay-0"
    assert first.first_timestamp is not None
    assert first.last_timestamp is not None
    involved = first.involved_object
    assert (involved.kind, involved.name, involved.namespace) == ("Pod", pod["metadata"]["name"], namespace)
    assert involved.uid == pod["metadata"]["uid"]

    on_node = [
        e
        for e in (
            await core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
        ).items
        if e.involved_object.name == node
    ]
    assert len(on_node) == 1
    assert on_node[0].involved_object.kind == "Node"
    assert not on_node[0].involved_object.namespace


async def test_create_custom_object(kube: KubeClient, sim: KubeApiServer, namespace: str) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"replicatedJobs": []},
    }
    await kube.create_custom_object(jobset)  # plural derived: "jobsets"
    with pytest.raises(errors.ConflictError):
        await kube.create_custom_object(jobset)

    wrong = derived(kube, plurals={"JobSet.jobset.x-k8s.io": "jobsetz"})
    with pytest.raises(errors.NotFoundError):
        await wrong.create_custom_object({**jobset, "metadata": {"name": "other", "namespace": namespace}})
    with pytest.raises(ValueError, match="group/version"):
        await kube.create_custom_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


# --- retries, timeouts, pacing ---------------------------------------------------------------------------


async def test_reads_succeed_through_injected_errors(
    kube: KubeClient, sim: KubeApiServer, nodes: Nodes, inject: Callable[[FaultConfig], None]
) -> None:
    name = await nodes.create()
    fake = FakeTime()
    unpaced = {"qps": 1e6, "burst": 1000}  # only backoff sleeps in `fake.sleeps`
    client = derived(
        kube, retry=RetryPolicy(attempts=8, base=0.1, cap=2.0, timeout=5.0), sleep=fake.sleep, **unpaced
    )
    inject(FaultConfig(error_rate=0.3, kinds=("429", "500"), seed=11, retry_after_s=1))
    sim.reset_counters()

    states = [await client.get_node(name) for _ in range(50)]

    assert all(s.name == name for s in states)
    faults = sim.counters()["faults"]
    assert faults.get("429", 0) > 0
    assert faults.get("500", 0) > 0
    assert client.attempts == 50 + faults["429"] + faults["500"]
    assert client.attempts > 50
    assert fake.sleeps.count(1.0) >= faults["429"]  # each 429 waited its Retry-After
    backoffs = [s for s in fake.sleeps if s != 1.0]
    assert backoffs
    assert all(0.1 <= s <= 2.0 * 1.5 for s in backoffs)


async def test_writes_are_retried_on_server_errors(
    kube: KubeClient, sim: KubeApiServer, nodes: Nodes, inject: Callable[[FaultConfig], None]
) -> None:
    name = await nodes.create()
    fake = FakeTime()
    client = derived(kube, retry=RetryPolicy(attempts=10, base=0.1, timeout=5.0), sleep=fake.sleep)
    read = await client.get_node(name)
    inject(FaultConfig(error_rate=0.5, kinds=("500",), seed=3, verbs=frozenset({"patch"})))

    node = await client.patch_node(
        NodePatch(node=name, resource_version=read.resource_version, unschedulable=True)
    )

    assert node.unschedulable
    assert sim.counters()["faults"]["500"] >= 1


async def test_persistent_timeouts_become_unavailable_after_the_attempts(
    kube: KubeClient, sim: KubeApiServer, nodes: Nodes, inject: Callable[[FaultConfig], None]
) -> None:
    name = await nodes.create()
    fake = FakeTime()
    client = derived(kube, retry=RetryPolicy(attempts=3, base=0.5, jitter=0.0, timeout=0.2), sleep=fake.sleep)
    inject(FaultConfig(error_rate=1.0, kinds=("timeout",), hang_s=10))

    with pytest.raises(errors.UnavailableError, match="timed out"):
        await client.get_node(name)

    assert client.attempts == 3
    assert fake.sleeps == [0.5, 1.0]


async def test_client_errors_are_not_retried(kube: KubeClient, sim: KubeApiServer) -> None:
    sim.reset_counters()
    with pytest.raises(errors.NotFoundError):
        await kube.get_node(unique("sbc-node-missing"))
    assert kube.attempts == 1
    assert sim.counters()["requests"] == {"get": {"nodes": 1}}


async def test_token_bucket_paces_a_burst(kube: KubeClient, nodes: Nodes) -> None:
    name = await nodes.create()
    fake = FakeTime()
    qps, burst, requests = 10.0, 5, 25
    client = derived(kube, qps=qps, burst=burst, clock=fake.clock, sleep=fake.sleep)
    started: list[float] = []  # fake time at which each request was let through
    acquire = client.bucket.acquire

    async def stamped_acquire() -> float:
        waited = await acquire()
        started.append(fake.now)
        return waited

    client.bucket.acquire = stamped_acquire  # type: ignore[method-assign]

    async def read() -> None:
        await client.get_node(name)

    await asyncio.gather(*(read() for _ in range(requests)))

    # The burst goes at once; after it, one request per 1/qps seconds, in fake time.
    assert client.attempts == requests
    assert sorted(fake.sleeps) == pytest.approx([(k + 1) / qps for k in range(requests - burst)])
    assert fake.now == pytest.approx((requests - burst) / qps)
    assert len(started) == requests
    for second in range(3):
        in_window = [t for t in started if second <= t < second + 1]
        assert len(in_window) <= qps + (burst if second == 0 else 0)
    assert all(t >= (k + 1 - burst) / qps - 1e-9 for k, t in enumerate(sorted(started)))


async def test_a_sibling_client_paces_on_its_own_bucket_over_the_same_connection(
    kube: KubeClient, nodes: Nodes
) -> None:
    name = await nodes.create()
    fake = FakeTime()
    main = derived(kube, qps=1.0, burst=1, clock=fake.clock, sleep=fake.sleep)
    reads = main.with_own_limiter(qps=1.0, burst=1)
    assert reads.api is main.api
    await main.get_node(name)  # spends the main bucket's only token
    assert (await reads.get_node(name)).name == name  # its own token: nothing waits
    assert fake.sleeps == []
    await reads.get_node(name)  # the sibling's bucket is empty now: it waits, on the same clock
    assert fake.sleeps == [pytest.approx(1.0)]
    assert (main.attempts, reads.attempts) == (1, 2)


async def test_jobs_listed_with_their_pod_failure_policy(
    kube: KubeClient, api_client: aclient.ApiClient, namespace: str
) -> None:
    """The audit's read of Jobs (`list_jobs`); written for a real cluster too (the Job's pods stay Pending
    or are never made: only the Job object is read)."""
    batch = aclient.BatchV1Api(api_client)
    name = unique("job")
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        ]
    }
    container = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"nvidia.com/gpu": "2"}},
    }
    body = {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 1,
            "suspend": True,  # a real cluster makes no pods for it
            "podFailurePolicy": policy,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    await batch.create_namespaced_job(namespace, body)

    jobs = {j.name: j for j in await kube.list_jobs(namespace=namespace)}
    everywhere = {(j.namespace, j.name) for j in await kube.list_jobs()}

    job = jobs[name]
    assert (job.gpu_request, job.backoff_limit, job.has_failure_policy) == (2, 1, True)
    assert [(r.action, r.conditions, r.exit_operator, r.exit_codes) for r in job.failure_rules] == [
        ("Ignore", ("DisruptionTarget",), "", ()),
        ("FailJob", (), "In", (42,)),
    ]
    assert (namespace, name) in everywhere


async def test_pod_facts_only_when_asked(kube: KubeClient, make_pod: PodFactory, namespace: str) -> None:
    await make_pod(gpus=1)

    [plain] = await kube.list_pods(namespace=namespace)
    [full] = await kube.list_pods(namespace=namespace, facts=True)

    assert plain.facts.images == ()
    assert full.facts.images == ("registry.k8s.io/pause:3.10",)
    assert full.facts.priority == 0
