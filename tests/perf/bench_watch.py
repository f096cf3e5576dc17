"""Remediation at fleet size: a reconcile round and the status page from the watch-kept view vs from lists.

The real service (`build_app`, the real `KubeClient` over HTTP) against the simulated API server holding
1,000 and 10,000 GPU nodes with 10 pods each (8 one-GPU pods and 2 without a GPU: 10,000 and 100,000
pods), seeded straight into the simulator's store. The client's token bucket is set out of reach (a list path
would also wait for it once its burst is spent), and one round runs before the measured ones. Ten nodes are `drain-failed` with their retry not due
(each round reads their GPU pods and waits) and ten more carry another Sickbay state, so the status page
has rows. Each cycle first changes 10 nodes and 10 pods (the churn a view must follow), then runs one
reconcile round and renders `GET /` once (read cache off). Measured with `kube.watch` on (the view) and
off (lists, the baseline), in the same run: wall time, API requests and response bytes per cycle, and the
view's start-up: from the service's start to the view's first lists and watches and the leader's first
reconcile round both done (requests, node and pod lists, bytes, resident memory added and its peak). The
start-up is measured twice, the rounds waiting for the view's first lists (`kube.view_sync_wait_s`, the
default) and not waiting (0: the first round lists the fleet while the view lists it too, as before the
wait), one service after the other on the same simulated server.

Server and service share one process and one event loop, so a list's wall time includes the simulator
serialising it, as a busy kube-apiserver's would add to a real one.

    python -m tests.perf watch [-- --quick]      # --quick: 1,000 nodes only
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from rich.table import Table

from app.config.settings import load_settings
from app.kube import client as kube_client
from app.service.runtime import SERVICES, build_app
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import NODES, PODS
from tests.perf import machine

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "watch.json"
SIZES = (1_000, 10_000)
PODS_PER_NODE = 10
GPU_PODS_PER_NODE = 8
DRAIN_FAILED = 10
OTHER_STATES = 10
CHURN = 10
CYCLES = 3
IDENTITY = "sickbay-bench-0"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    """Reset the process's peak RSS to its current RSS (proc(5), /proc/pid/clear_refs: writing 5 resets
    VmHWM, since Linux 4.0); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _node(i: int, now: str) -> dict[str, Any]:
    name = f"gpu-{i:05d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "sickbay.io/pool": "h100",
    }
    annotations: dict[str, str] = {"node.alpha.kubernetes.io/ttl": "0"}
    if i < DRAIN_FAILED:
        labels["sickbay.io/state"] = "drain-failed"
        annotations |= {
            "sickbay.io/owned-by": IDENTITY,
            "sickbay.io/fault": json.dumps({"class": "reboot-node"}),
            "sickbay.io/drain-failed": "training/job: eviction refused",
            "sickbay.io/drain-failed-at": now,
        }
    elif i < DRAIN_FAILED + OTHER_STATES:
        labels["sickbay.io/state"] = "at-risk"
    resources = {"cpu": "192", "memory": "2063731712Ki", "nvidia.com/gpu": "8", "pods": "110"}
    conditions = [
        {"type": kind, "status": "False", "reason": f"Kubelet{kind}", "lastTransitionTime": now}
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": now}]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": f"node-{i}", "labels": labels, "annotations": annotations},
        "spec": {"providerID": f"aws:///zone/i-{i:017x}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "containerRuntimeVersion": "containerd://2.0.0"},
        },
    }


def _pods(node: str, i: int) -> list[dict[str, Any]]:
    gpu = {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    plain = {"name": "agent", "image": "node-agent:1"}
    # Specs shared by the pods of a node: the store never changes an object in place.
    gpu_spec = {"nodeName": node, "containers": [gpu], "terminationGracePeriodSeconds": 30}
    plain_spec = {"nodeName": node, "containers": [plain]}
    status = {"phase": "Running"}
    made = []
    for j in range(PODS_PER_NODE):
        with_gpu = j < GPU_PODS_PER_NODE
        meta = {
            "name": f"{node}-{'w' if with_gpu else 'a'}{j}",
            "namespace": "training",
            "uid": f"pod-{i}-{j}",
            "labels": {"app": "train" if with_gpu else "agent"},
        }
        spec = gpu_spec if with_gpu else plain_spec
        made.append({"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status})
    return made


def seed(api: KubeApiServer, nodes: int) -> None:
    now = datetime.now(UTC).isoformat()
    store = api.store
    for i in range(nodes):
        node = _node(i, now)
        store.put(NODES, node)
        for pod in _pods(node["metadata"]["name"], i):
            store.put(PODS, pod)


def churn(api: KubeApiServer, cycle: int) -> tuple[int, int]:
    """Change CHURN nodes (an annotation) and CHURN pods (their status); the resourceVersions written last."""
    store, last_node, last_pod = api.store, 0, 0
    nodes = store.items(NODES)
    for k in range(CHURN):
        node = nodes[(DRAIN_FAILED + OTHER_STATES + k) % len(nodes)]
        meta = {
            **node["metadata"],
            "annotations": {**node["metadata"]["annotations"], "bench/cycle": str(cycle)},
        }
        last_node = int(store.put(NODES, {**node, "metadata": meta})["metadata"]["resourceVersion"])
    for pod in store.items(PODS)[:CHURN]:
        status = {"phase": "Running", "message": f"cycle {cycle}"}
        last_pod = int(
            store.put(PODS, {**pod, "status": status, "metadata": dict(pod["metadata"])})["metadata"][
                "resourceVersion"
            ]
        )
    return last_node, last_pod


@dataclass
class Service:
    client: TestClient[Any, Any]
    kube: kube_client.KubeClient

    @property
    def services(self) -> Any:
        return self.client.app[SERVICES]


@contextlib.asynccontextmanager
async def service(
    api: KubeApiServer, tmp: Path, *, watch: bool, sync_wait_s: float | None = None
) -> AsyncIterator[Service]:
    # The client-side token bucket out of the way (as in the integration tests): it would add the same
    # pacing to a list path's requests on any server, once its burst is spent.
    kube = await kube_client.connect(
        kubeconfig=str(api.write_kubeconfig(tmp / "kubeconfig")), qps=10_000, burst=10_000
    )
    settings = load_settings(
        auth={"mode": "none"},
        inbox={"path": tmp / f"sickbay-{watch}.db"},
        identity=IDENTITY,
        pod_namespace="default",
        reconcile_interval_s=3600,
        reads={"cache_ttl_s": 0},
        kube={"watch": watch} | ({} if sync_wait_s is None else {"view_sync_wait_s": sync_wait_s}),
    )
    client = TestClient(TestServer(build_app(settings, kube=kube)))
    await client.start_server()
    try:
        yield Service(client, kube)
    finally:
        await client.close()
        await kube.close()


def _sent(counters: dict[str, Any]) -> tuple[int, int]:
    requests = sum(n for by in counters["requests"].values() for n in by.values())
    sent = sum(n for by in counters["bytes"].values() for n in by.values())
    return requests, sent


async def _caught_up(view: Any, last_node: int, last_pod: int) -> None:
    def rv(informer: Any) -> int:
        return int(informer.resource_version or 0)

    while rv(view.node_informer) < last_node or rv(view.pod_informer) < last_pod:
        await asyncio.sleep(0.001)


def _node_pod_lists(counters: dict[str, Any]) -> int:
    return sum(counters["requests"].get("list", {}).get(r, 0) for r in ("nodes", "pods"))


async def _started(svc: Service, *, watch: bool) -> None:
    """Until the view (if any) has listed and opened its watches and the leader's first round is done."""
    view = svc.services.view
    if watch:
        assert view is not None, "kube.watch on, with the real client"
        assert await view.wait_fresh(600), "the view's first lists and watches"
    while svc.services.reconciler.rounds < 1:
        await asyncio.sleep(0.005)


async def measure_mode(
    api: KubeApiServer,
    tmp: Path,
    *,
    watch: bool,
    cycles: int,
    sync_wait_s: float | None = None,
) -> dict[str, Any]:
    """One service start and `cycles` measured cycles (none: the start-up alone)."""
    gc.collect()
    api.reset_counters()
    peak_known = _reset_peak_rss()
    rss_before, started, cpu_started = _rss_bytes(), time.perf_counter(), time.process_time()
    async with service(api, tmp, watch=watch, sync_wait_s=sync_wait_s) as svc:
        result: dict[str, Any] = {"mode": "watch" if watch else "lists"}
        view = svc.services.view
        await _started(svc, watch=watch)
        counters = api.counters()
        requests, sent = _sent(counters)
        result["startup"] = {
            "s": time.perf_counter() - started,
            # The process's CPU (service and simulator both): wall time on a shared machine waits for cores.
            "cpu_s": time.process_time() - cpu_started,
            "requests": requests,
            "node_pod_lists": _node_pod_lists(counters),
            "bytes": sent,
            "rss_added_bytes": _rss_bytes() - rss_before,
            "peak_rss_added_bytes": _peak_rss_bytes() - rss_before if peak_known else None,
            "sync_wait_s": svc.services.settings.kube.view_sync_wait_s,
        }
        if not cycles:
            return result
        # One round not measured after the leader's first, so the measured ones start from a settled service.
        await svc.services.reconciler.run_once()
        await asyncio.sleep(0.5)
        reconcile_s, page_s, requests_per, bytes_per, lists_per = [], [], [], [], []
        for cycle in range(cycles):
            api.reset_counters()
            last_node, last_pod = churn(api, cycle)
            if view is not None:
                await _caught_up(view, last_node, last_pod)
            t0 = time.perf_counter()
            await svc.services.reconciler.run_once()
            t1 = time.perf_counter()
            page = await svc.client.get("/")
            body = await page.text()
            t2 = time.perf_counter()
            assert page.status == 200
            assert "gpu-00000" in body, "the status page shows the drain-failed nodes"
            counters = api.counters()
            requests, sent = _sent(counters)
            reconcile_s.append(t1 - t0)
            page_s.append(t2 - t1)
            requests_per.append(requests)
            bytes_per.append(sent)
            lists_per.append(_node_pod_lists(counters))
        result |= {
            "reconcile_ms": 1000 * sum(reconcile_s) / cycles,
            "status_page_ms": 1000 * sum(page_s) / cycles,
            "requests_per_cycle": sum(requests_per) / cycles,
            "node_pod_lists_per_cycle": sum(lists_per) / cycles,
            "bytes_per_cycle": sum(bytes_per) / cycles,
        }
        return result


async def run(sizes: Sequence[int], *, cycles: int) -> dict[str, Any]:
    load = os.getloadavg()
    results: dict[str, Any] = {
        "cycles": cycles,
        "churn_per_cycle": {"nodes": CHURN, "pods": CHURN},
        "sizes": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in sizes:
            async with KubeApiServer() as api:
                t0 = time.perf_counter()
                seed(api, nodes)
                seeded_s = time.perf_counter() - t0
                here = Path(tmp) / str(nodes)
                here.mkdir()
                lists = await measure_mode(api, here, watch=False, cycles=cycles)
                # The start-up as it was before the rounds waited for the view: they list at once.
                no_wait = await measure_mode(api, here, watch=True, cycles=0, sync_wait_s=0)
                viewed = await measure_mode(api, here, watch=True, cycles=cycles)
                results["sizes"].append(
                    {
                        "nodes": nodes,
                        "pods": nodes * PODS_PER_NODE,
                        "seeded_s": seeded_s,
                        "lists": lists,
                        "watch": viewed,
                        "startup_without_wait": no_wait["startup"],
                    }
                )
    results["machine"] = machine.describe(load)
    return results


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def table(results: dict[str, Any]) -> Table:
    out = Table(
        title=f"Reconcile round + status page, view (kube.watch) vs lists, {results['cycles']} cycles of "
        f"{CHURN} node and {CHURN} pod changes each (same run)"
    )
    for column in (
        "fleet",
        "mode",
        "reconcile",
        "status page",
        "requests/cycle",
        "node+pod lists",
        "bytes/cycle",
    ):
        out.add_column(column, justify="left" if column in ("fleet", "mode") else "right")
    for size in results["sizes"]:
        fleet = f"{size['nodes']:,} nodes / {size['pods']:,} pods"
        lists, viewed = size["lists"], size["watch"]
        for row in (lists, viewed):
            out.add_row(
                fleet if row is lists else "",
                row["mode"],
                f"{row['reconcile_ms']:,.1f} ms",
                f"{row['status_page_ms']:,.1f} ms",
                f"{row['requests_per_cycle']:g}",
                f"{row['node_pod_lists_per_cycle']:g}",
                _mb(row["bytes_per_cycle"]),
            )
        ratio = lists["reconcile_ms"] / max(viewed["reconcile_ms"], 1e-9)
        page_ratio = lists["status_page_ms"] / max(viewed["status_page_ms"], 1e-9)
        out.add_row("", "lists / watch", f"{ratio:.1f}x", f"{page_ratio:.1f}x", "", "", "")
        for label, start in (
            ("start-up, rounds list at once", size["startup_without_wait"]),
            ("start-up, rounds wait for the view", viewed["startup"]),
        ):
            out.add_row(
                "",
                label,
                f"{start['s']:.2f} s (CPU {start['cpu_s']:.2f} s)",
                "",
                f"{start['requests']}",
                f"{start['node_pod_lists']}",
                f"{_mb(start['bytes'])}; {_rss(start)}",
            )
    return out


def _rss(start: dict[str, Any]) -> str:
    added = f"+{start['rss_added_bytes'] / 2**20:.0f} MiB RSS"
    peak = start.get("peak_rss_added_bytes")
    return added if peak is None else f"{added} (peak +{peak / 2**20:.0f})"


def main(argv: Sequence[str] | None = None) -> Table:
    parser = argparse.ArgumentParser(prog="python -m tests.perf watch")
    parser.add_argument("--quick", action="store_true", help="1,000 nodes only")
    parser.add_argument(
        "--nodes", type=int, action="append", help="fleet sizes (instead of 1,000 and 10,000)"
    )
    parser.add_argument("--cycles", type=int, default=CYCLES)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(list(argv or []))
    sizes = args.nodes or (SIZES[:1] if args.quick else SIZES)
    results = asyncio.run(run(sizes, cycles=args.cycles))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return table(results)


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
