"""The workload track acts only on the pod the cluster confirms, and a transient signal kills nothing.

Against the simulated API server through the real client: alerts shaped as prometheus-operator delivers
them (the exporter in `pod`, the workload in `exported_pod`), alerts naming a pod on another node or a
DaemonSet pod, names that are path segments, and a soft alert no rule knows, which must restart nothing and,
while it lasts, raise the node condition.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.kube import client as kube_client
from app.kube import errors as kube_errors
from tests.integration.remediation_world import World, eventually, open_world, write_policy
from tests.payloads import ago

pytestmark = pytest.mark.slow


def exporter_labels(world_pod: Any) -> dict[str, str]:
    """What a prometheus-operator scrape (honorLabels: false) attaches to the exporter's series."""
    return {
        "namespace": world_pod.metadata.namespace,
        "pod": world_pod.metadata.name,
        "container": "nvidia-dcgm-exporter",
        "service": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
        "job": "nvidia-dcgm-exporter",
        "instance": "10.4.0.17:9400",
    }


async def exporter_on(world: World, node: str) -> Any:
    pods = await world.pods("gpu-operator", field_selector=f"spec.nodeName={node}")
    assert len(pods) == 1, pods
    return pods[0]


async def deletes(world: World) -> int:
    return int(world.sim.counters()["requests"].get("delete", {}).get("pods", 0))


def pod_and_node_requests(world: World) -> list[int]:
    """Requests that address one pod or node (the reconciler's node list runs on its own)."""
    counts = world.sim.counters()["requests"]
    return [
        int(counts.get(verb, {}).get(resource, 0))
        for verb, resource in (
            ("delete", "pods"),
            ("create", "pods/eviction"),
            ("get", "nodes"),
            ("list", "pods"),
        )
    ]


async def journaled(world: World, count: int) -> list[Any]:
    journal = world.services.journal
    assert journal is not None

    async def enough() -> bool:
        return await journal.count() >= count

    await eventually(enough, what=f"{count} signal(s) journaled")
    return await journal.entries(limit=count)


async def test_app_xid_under_the_operator_scrape_restarts_exported_pod_never_the_exporter(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path) as world:
        exporter = await exporter_on(world, "gpu-06")
        solo = (await world.pods("training", field_selector="metadata.name=solo-a"))[0]
        await world.post_alert(
            node="gpu-06",
            xid="13",
            gpu="1",
            sickbay_class="restart-workload",
            alertname="GpuXidApplicationError",
            exported_namespace="training",
            exported_pod="solo-a",
            exported_container="main",
            **exporter_labels(exporter),
        )

        async def solo_restarted() -> bool:
            found = await world.pods("training", field_selector="metadata.name=solo-a")
            return all(p.metadata.uid != solo.metadata.uid for p in found)

        await eventually(solo_restarted, what="solo-a restarted")
        still = await exporter_on(world, "gpu-06")
        assert still.metadata.uid == exporter.metadata.uid, "the exporter is never restarted"
        restarted = await world.events("SickbayRestarted")
        assert [e.involved_object.name for e in restarted] == ["solo-a"]


async def test_an_alert_naming_a_pod_on_another_node_or_a_daemonset_pod_deletes_nothing(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path) as world:
        other_exporter = await exporter_on(world, "gpu-07")
        before = await deletes(world)
        # A pod of another node, named as the workload (no exporter labels around it).
        await world.post_alert(
            node="gpu-08",
            xid="13",
            gpu="0",
            sickbay_class="restart-workload",
            namespace="training",
            pod="solo-a",
        )
        # The exporter of another node, named the way an operator scrape names it.
        await world.post_alert(
            node="gpu-08",
            xid="31",
            gpu="1",
            sickbay_class="restart-workload",
            **exporter_labels(other_exporter),
        )
        entries = await journaled(world, 2)
        summaries = {e.xid: e.plan["summary"] for e in entries}
        assert "training/solo-a (named by the alert's `pod` label) is not running on gpu-08" in summaries[13]
        assert "the signal names no pod and gpu-08 runs no GPU pod" in summaries[31], (
            "the exporter is no workload"
        )
        assert await deletes(world) == before
        assert (await exporter_on(world, "gpu-07")).metadata.uid == other_exporter.metadata.uid
        assert await world.pods("training", field_selector="metadata.name=solo-a")


async def test_a_daemonset_pod_named_without_exporter_labels_is_refused_on_its_own_node(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path) as world:
        exporter = await exporter_on(world, "gpu-08")
        before = await deletes(world)
        await world.post_alert(
            node="gpu-08",
            xid="13",
            gpu="0",
            sickbay_class="restart-workload",
            namespace="gpu-operator",
            pod=exporter.metadata.name,
            container="exporter",
            alertname="CustomAppError",
        )
        (entry,) = await journaled(world, 1)
        # Its name starts with a known exporter's, so intake drops it as the scrape target; were it named
        # anything else, the cluster would still show a DaemonSet pod, which is never restarted.
        assert "no pod restarted" in entry.plan["summary"]
        assert await deletes(world) == before


async def test_names_that_are_path_segments_never_reach_the_api(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        before = pod_and_node_requests(world)
        for namespace, pod in (("training", ".."), ("training", "."), ("..", "solo-a")):
            response = await world.client.post(
                "/api/v1/alerts",
                json={
                    "version": "4",
                    "groupKey": "g",
                    "status": "firing",
                    "receiver": "sickbay",
                    "alerts": [
                        {
                            "status": "firing",
                            "labels": {
                                "alertname": "GpuXidApplicationError",
                                "node": "gpu-06",
                                "xid": "13",
                                "gpu": "1",
                                "namespace": namespace,
                                "pod": pod,
                            },
                            "startsAt": ago(timedelta(seconds=5)),
                            "fingerprint": f"dots-{namespace}-{pod}",
                        }
                    ],
                },
            )
            body = await response.json()
            assert response.status == 422 or body.get("rejected") == 1, body
        kube = world.spy._inner
        assert isinstance(kube, kube_client.KubeClient)
        for call in (
            kube.delete_pod("training", ".."),
            kube.evict_pod("..", "solo-a"),
            kube.get_node(".."),
            kube.list_pods(namespace="a/b"),
        ):
            with pytest.raises(kube_errors.InvalidNameError):
                await call
        assert pod_and_node_requests(world) == before, "not one request was sent"


async def test_a_soft_unknown_alert_restarts_nothing_and_raises_the_condition_while_it_lasts(
    tmp_path: Path,
) -> None:
    policy = write_policy(
        tmp_path,
        retry={"initial": "200ms", "max": "1s"},
        transient={"persist_after": "1500ms"},
    )
    async with open_world(tmp_path, policy=policy, pipeline={"recheck_poll_s": 0.05}) as world:
        before = await deletes(world)
        labels = {
            "alertname": "TeamGpuPowerBrake",
            "node": "gpu-06",
            "gpu": "1",
            "xid": "",
            "sickbay_class": "",
            "namespace": "training",
            "pod": "solo-a",
            "team": "ml-platform",
        }
        started = ago(timedelta(0))
        await world.post_alert(fingerprint="soft-1", starts_at=started, **labels)
        (first,) = await journaled(world, 1)
        assert first.fault_class == "transient"
        assert [a["kind"] for a in first.plan["actions"]] == ["recheck"]

        async def soft_condition() -> Any:
            node = await world.node("gpu-06")
            return next((c for c in node.status.conditions or [] if c.type == "GpuSoftFault"), None)

        async def raised() -> bool:
            condition = await soft_condition()
            return condition is not None and condition.status == "True"

        await eventually(raised, timeout=15, what="GpuSoftFault=True after 1.5s of firing")
        condition = await soft_condition()
        assert condition.reason == "TeamGpuPowerBrake"
        assert "has been firing for" in condition.message
        journal = world.services.journal
        assert journal is not None
        checks = [e for e in await journal.entries(limit=50) if e.status == "firing"]
        assert len(checks) >= 3, "re-checked with backoff before it became visible"
        assert await world.events("SickbaySoftFaultPersisting")
        node = await world.node("gpu-06")
        assert not node.spec.unschedulable
        assert not [t for t in node.spec.taints or [] if t.key.startswith("sickbay.io/")]
        assert await deletes(world) == before, "a transient signal restarts nothing"
        assert await world.pods("training", field_selector="metadata.name=solo-a")

        await world.post_alert(fingerprint="soft-1", status="resolved", starts_at=started, **labels)

        async def cleared() -> bool:
            condition = await soft_condition()
            return condition is not None and condition.status == "False"

        await eventually(cleared, what="GpuSoftFault=False once it resolved")
        assert await world.events("SickbaySoftFaultCleared")
