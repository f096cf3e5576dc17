"""Pipeline throughput: signals processed per second, the simulated API server adding 5 ms per request.

Sickbay runs in process with its shipped pipeline settings (16 nodes at once, one node's rows in order)
and the real HTTP intake; the simulated API server runs in its own process, seeded with GPU nodes of 8
one-GPU pods each (8 Deployments across the nodes, so every pod has a controller). Through the webhook:

- pod restarts: one application XID (13, `restart-workload`) per GPU, naming the pod on it the way
  dcgm-exporter under prometheus-operator does (`exported_pod`); the cluster confirms the pod on the node,
  and each is restarted (deleted with its UID as a precondition, an Event on it).
- fatal alone: one XID 79 per node (quarantine, background drain, hand-off), the budget raised so all
  may be quarantined.
- a mix: pod restarts on half the nodes, a fatal XID on each of the other half, interleaved.

Each kind runs on a fresh API server and service, timed from the first webhook request to the last row
processed. Baselines in the same run: the same pod restarts at 0 ms per request (Sickbay's own cost),
and the client-only floor, the requests a restart makes (node read and pod list together, the delete,
the Event) sent straight through the same client with the pipeline's concurrency (16 nodes at once, one
node's in order), on a cluster of the same size. A deleted pod goes Terminating as on a real
cluster: the API server stamps its `deletionTimestamp` for its grace period (the pod's
terminationGracePeriodSeconds, 30 s by default: https://kubernetes.io/docs/concepts/workloads/pods/
pod-termination/), and the simulator's kubelet stand-in removes it with a grace-0 delete once that has
run (`app.sim.kubeapi.registry`, after kube-apiserver's rest.BeforeDelete and podStrategy.
CheckGracefulDelete), here scaled by `GRACE_SCALE` (30 s become 0.3 s). The restart does not wait for it:
the DELETE answers at once with the Terminating pod, and the pod's controller replaces it (the simulator
runs no ReplicaSet controller, so each alert is about a pod of its own). `--profile` writes a cProfile
of the service during the pod restarts to out/bench/throughput.prof.txt. Written to
out/bench/throughput.json.

    python -m tests.perf throughput [-- --quick | --nodes N | --profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import ClientSession
from rich.table import Table

from app.config.settings import KubeSettings
from app.domain import PodState
from app.kube.port import EventSpec
from app.service.runtime import SERVICES
from tests.payloads import alert
from tests.perf import machine
from tests.perf.bench_remediation import LATENCY_MS, _post, _world

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "throughput.json"
PROFILE_OUT = REPO / "out" / "bench" / "throughput.prof.txt"
NODES = 250  # per kind: 2,000 pod restarts, 250 fatal signals
GPUS = 8
NAMESPACE = "training"
PER_REQUEST = 100
CONCURRENCY = 16  # the shipped pipeline.node_concurrency, which this benchmark runs with
GRACE_SCALE = 0.01


def node_name(i: int) -> str:
    return f"gpu-{i:04d}"


def seed_doc(nodes: int) -> dict[str, Any]:
    """`nodes` GPU nodes, each running one one-GPU pod of each of `GPUS` Deployments."""
    names = [node_name(i) for i in range(nodes)]
    return {
        "nodes": [
            {"name": "gpu-{i:04d}", "count": nodes, "gpus": GPUS, "labels": {"sickbay.io/pool": "h100"}}
        ],
        "deployments": [
            {"name": f"train-{g}", "namespace": NAMESPACE, "nodes": names, "gpus_per_pod": 1}
            for g in range(GPUS)
        ],
    }


def restart_alerts(pods: Sequence[PodState], *, tag: str) -> list[dict[str, Any]]:
    """One application XID per pod, on the GPU its Deployment's index names, the pod named as
    dcgm-exporter under prometheus-operator names it."""
    out = []
    for pod in pods:
        gpu = pod.name.split("-")[1]  # train-<g>-<hash>-<suffix>
        out.append(
            alert(
                fingerprint=f"{tag}-{pod.name}",
                node=pod.node or "",
                gpu=gpu,
                xid="13",
                alertname="GpuXidApplicationError",
                sickbay_class="restart-workload",
                exported_namespace=pod.namespace,
                exported_pod=pod.name,
                exported_container="main",
            )
        )
    return out


def fatal_alerts(nodes: Sequence[str], *, tag: str) -> list[dict[str, Any]]:
    return [alert(fingerprint=f"{tag}-{n}", node=n, xid="79") for n in nodes]


def interleave(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`b` spread evenly through `a`, so both kinds arrive throughout the burst."""
    if not b:
        return list(a)
    step = max(1, len(a) // len(b))
    out: list[dict[str, Any]] = []
    rest = list(b)
    for i, item in enumerate(a):
        out.append(item)
        if i % step == step - 1 and rest:
            out.append(rest.pop(0))
    return out + rest


async def _pods_on(kube: Any, nodes: set[str]) -> list[PodState]:
    return sorted(
        (p for p in await kube.list_pods(namespace=NAMESPACE) if p.node in nodes and not p.deleting),
        key=lambda p: (p.node or "", p.name),
    )


async def floor(kube: Any, pods: Sequence[PodState]) -> float:
    """What the pipeline asks of the cluster for each restart, straight through the client: the node read
    and the pod list together, then the delete (with the UID) and the Event; one node's pods in order,
    `CONCURRENCY` nodes at once."""
    slots = asyncio.Semaphore(CONCURRENCY)
    by_node: dict[str, list[PodState]] = {}
    for pod in pods:
        by_node.setdefault(pod.node or "", []).append(pod)

    async def one_node(node: str, mine: list[PodState]) -> None:
        async with slots:
            for pod in mine:
                await asyncio.gather(kube.get_node(node), kube.list_pods(node=node))
                await kube.delete_pod(pod.namespace, pod.name, uid=pod.uid)
                await kube.create_event(
                    EventSpec(
                        kind="Pod",
                        name=pod.name,
                        namespace=pod.namespace,
                        reason="BenchFloor",
                        message="floor",
                        uid=pod.uid,
                    )
                )

    started = time.perf_counter()
    await asyncio.gather(*(one_node(n, m) for n, m in by_node.items()))
    return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (proc(5): utime and stime, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU seconds Sickbay's process (with its SQLite threads) and the API server's spent meanwhile."""

    def __init__(self, sim_pid: int) -> None:
        self._sim = sim_pid
        self._at = (time.process_time(), cpu_seconds(sim_pid))

    def spent(self) -> dict[str, float]:
        ours, sim = time.process_time(), cpu_seconds(self._sim)
        return {"sickbay_cpu_s": ours - self._at[0], "api_server_cpu_s": sim - self._at[1]}


async def burst(server: Any, alerts: Sequence[dict[str, Any]], *, timeout: float = 600) -> float:
    """Post `alerts` at once (`PER_REQUEST` a request); seconds until the pipeline processed them all."""
    services = server.app[SERVICES]
    target = services.pipeline.processed + len(alerts)
    url = str(server.make_url("/api/v1/alerts"))
    started = time.perf_counter()
    async with ClientSession() as session:
        await asyncio.gather(
            *(
                _post(session, url, list(alerts[i : i + PER_REQUEST]))
                for i in range(0, len(alerts), PER_REQUEST)
            )
        )
    deadline = started + timeout
    while services.pipeline.processed < target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{target - services.pipeline.processed} rows not processed in {timeout:.0f}s")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def _started(server: Any) -> None:
    services = server.app[SERVICES]
    await services.prediction_started()
    if services.scoring is not None:
        await services.scoring.loaded()


async def in_world(
    tmp: Path,
    nodes: int,
    body: Callable[[Any, Any, Any, int], Awaitable[dict[str, Any]]],
    *,
    latency_ms: float = LATENCY_MS,
    **client: float,
) -> dict[str, Any]:
    """`client`: the client's `qps` and `burst`, if not the benchmark's unlimited ones."""
    sim, timed, kube, server = await _world(
        tmp,
        nodes,
        pipeline={},
        seed_doc=seed_doc(nodes),
        latency_ms=latency_ms,
        grace_scale=GRACE_SCALE,
        **client,  # type: ignore[arg-type]
    )
    try:
        await _started(server)
        return await body(timed, kube, server, sim.pid)
    finally:
        await server.close()
        await kube.close()
        sim.terminate()
        await sim.wait()


def restarts(nodes: int, *, profile: bool = False) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Pod restarts, one per pod on every node."""

    async def body(timed: Any, kube: Any, server: Any, sim_pid: int) -> dict[str, Any]:
        targets = {node_name(i) for i in range(nodes)}
        pods = await _pods_on(kube, targets)
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        cpu = Cpu(sim_pid)
        elapsed = await burst(server, restart_alerts(pods, tag="r"))
        spent = cpu.spent()
        if profiler is not None:
            profiler.disable()
            _write_profile(profiler)
        left = await _pods_on(kube, targets)
        return {"signals": len(pods), "seconds": elapsed, "cpu": spent, "restarted": len(pods) - len(left)}

    return body


def client_floor(nodes: int) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The same restarts' requests straight through the client, on a cluster of the same size (the API
    server's cost of a pod list grows with the pods it holds)."""

    async def body(timed: Any, kube: Any, server: Any, sim_pid: int) -> dict[str, Any]:
        pods = await _pods_on(kube, {node_name(i) for i in range(nodes)})
        cpu = Cpu(sim_pid)
        elapsed = await floor(kube, pods)
        return {"signals": len(pods), "seconds": elapsed, "cpu": cpu.spent(), "requests": 4 * len(pods)}

    return body


def fatal(nodes: int) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def body(timed: Any, kube: Any, server: Any, sim_pid: int) -> dict[str, Any]:
        names = [node_name(i) for i in range(nodes)]
        cpu = Cpu(sim_pid)
        elapsed = await burst(server, fatal_alerts(names, tag="f"))
        return {
            "signals": nodes,
            "seconds": elapsed,
            "cpu": cpu.spent(),
            "quarantined": len(set(timed.cordoned) & set(names)),
        }

    return body


def mix(nodes: int) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Pod restarts on the first half of the nodes, a fatal XID on each of the other half."""

    async def body(timed: Any, kube: Any, server: Any, sim_pid: int) -> dict[str, Any]:
        half = nodes // 2
        soft_nodes = {node_name(i) for i in range(half)}
        pods = await _pods_on(kube, soft_nodes)
        fatal_nodes = [node_name(i) for i in range(half, nodes)]
        alerts = interleave(restart_alerts(pods, tag="m"), fatal_alerts(fatal_nodes, tag="mf"))
        cpu = Cpu(sim_pid)
        elapsed = await burst(server, alerts)
        spent = cpu.spent()
        left = await _pods_on(kube, soft_nodes)
        return {
            "signals": len(alerts),
            "restart_signals": len(pods),
            "fatal_signals": len(fatal_nodes),
            "seconds": elapsed,
            "cpu": spent,
            "restarted": len(pods) - len(left),
            "quarantined": len(set(timed.cordoned) & set(fatal_nodes)),
        }

    return body


def _write_profile(profiler: cProfile.Profile) -> None:
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    PROFILE_OUT.parent.mkdir(parents=True, exist_ok=True)
    PROFILE_OUT.write_text(text.getvalue())


async def run(nodes: int, *, profile: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "throughput",
        "machine": machine.describe(),
        "config": {
            "nodes": nodes,
            "gpus": GPUS,
            "api_latency_ms": LATENCY_MS,
            "node_concurrency": CONCURRENCY,
        },
    }
    shipped = KubeSettings()
    budgeted = max(2, nodes // 5)  # at the shipped client rate limit the restarts take a while
    kinds: list[tuple[str, int, Callable[..., Awaitable[dict[str, Any]]], dict[str, float]]] = [
        ("floor", nodes, client_floor(nodes), {}),
        ("restart", nodes, restarts(nodes, profile=profile), {}),
        ("fatal", nodes, fatal(nodes), {}),
        ("mix", nodes, mix(nodes), {}),
        ("restart_0ms", nodes, restarts(nodes), {"latency_ms": 0.0}),
        (
            "restart_shipped_qps",
            budgeted,
            restarts(budgeted),
            {"qps": shipped.qps, "burst": shipped.burst},
        ),
    ]
    results["config"]["shipped_client"] = {"qps": shipped.qps, "burst": shipped.burst}
    for key, fleet, body, options in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            results[key] = await in_world(Path(tmp), fleet, body, **options)
    return results


def rate(entry: dict[str, Any]) -> float:
    return float(entry["signals"]) / float(entry["seconds"])


def cpu_per_signal(entry: dict[str, Any]) -> str:
    """Sickbay's (the floor's: the client's) and the API server's CPU milliseconds per signal."""
    cpu, count = entry["cpu"], entry["signals"]
    return f"{cpu['sickbay_cpu_s'] * 1000 / count:.1f} + {cpu['api_server_cpu_s'] * 1000 / count:.1f}"


def main(argv: Sequence[str] | None = None) -> Table:
    parser = argparse.ArgumentParser(prog="bench_throughput")
    parser.add_argument("--quick", action="store_true", help="a toy size (10 nodes)")
    parser.add_argument("--nodes", type=int, default=None, help=f"nodes per kind (default {NODES})")
    parser.add_argument(
        "--profile", action="store_true", help=f"cProfile the pod restarts into {PROFILE_OUT}"
    )
    args = parser.parse_args(list(argv or []))
    nodes = args.nodes or (10 if args.quick else NODES)
    results = asyncio.run(run(nodes, profile=args.profile))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    r, f, m, z = results["restart"], results["fatal"], results["mix"], results["restart_0ms"]
    q, shipped = results["restart_shipped_qps"], results["config"]["shipped_client"]
    fl = results["floor"]
    floor_rate = rate(fl)
    table = Table(
        title=(
            f"Pipeline throughput: {nodes} nodes x {GPUS} one-GPU pods a kind, simulated API "
            f"+{LATENCY_MS:g} ms/request, node_concurrency {CONCURRENCY} ({results['machine']['cpus']} CPUs)"
        )
    )
    columns = ("signals", "processed in", "signals/s", "CPU ms/signal (Sickbay + API)", "effect", "baseline")
    for column in columns:
        table.add_column(column, justify="left" if column == "signals" else "right")
    table.add_row(
        f"{r['signals']:,} pod restarts (XID 13)",
        f"{r['seconds']:.2f} s",
        f"{rate(r):.0f}",
        cpu_per_signal(r),
        f"{r['restarted']:,} restarted",
        f"floor {floor_rate:.0f}/s ({rate(r) / floor_rate:.2f}x); at 0 ms {rate(z):.0f}/s",
    )
    table.add_row(
        f"  floor: {fl['requests']:,} requests straight through the client",
        f"{fl['seconds']:.2f} s",
        f"{floor_rate:.0f}",
        cpu_per_signal(fl),
        "",
        "",
    )
    table.add_row(
        f"{f['signals']:,} fatal alone (XID 79)",
        f"{f['seconds']:.2f} s",
        f"{rate(f):.0f}",
        cpu_per_signal(f),
        f"{f['quarantined']:,} quarantined",
        "",
    )
    table.add_row(
        f"{m['signals']:,} mixed ({m['restart_signals']:,} restarts + {m['fatal_signals']:,} fatal)",
        f"{m['seconds']:.2f} s",
        f"{rate(m):.0f}",
        cpu_per_signal(m),
        f"{m['restarted']:,} restarted, {m['quarantined']:,} quarantined",
        "",
    )
    table.add_row(
        f"{z['signals']:,} pod restarts at 0 ms/request",
        f"{z['seconds']:.2f} s",
        f"{rate(z):.0f}",
        cpu_per_signal(z),
        f"{z['restarted']:,} restarted",
        "Sickbay's own cost",
    )
    table.add_row(
        f"{q['signals']:,} pod restarts, client at the shipped kube.qps {shipped['qps']:g} "
        f"(burst {shipped['burst']})",
        f"{q['seconds']:.2f} s",
        f"{rate(q):.0f}",
        cpu_per_signal(q),
        f"{q['restarted']:,} restarted",
        f"4 requests a restart: at most {shipped['qps'] / 4:.1f}/s sustained",
    )
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
