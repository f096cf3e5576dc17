"""Fault-to-unschedulable latency and quarantine throughput, against the simulated API server.

Latency: one fatal-XID alert at a time (30 in all, each on a fresh node), from the webhook request to the
moment the quarantine patch returned, with the simulated API server adding a fixed 5 ms to every request.
Reported next to the floor of one read and one write (2 x 5 ms), measured in the same run as two plain
calls through the same client.

Throughput: 500 nodes fault within one second (50 webhook requests of 10 alerts, all at once), with the
breaker set high; reported as the time until every node is quarantined, and nodes per second. For
comparison, NVSentinel's published scale test cordoned about 2.5 nodes/s (150 nodes in 62 s).

    python -m tests.perf remediation
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from rich.table import Table

from app.config.settings import RULES_DIR, load_settings
from app.domain import NodePatch
from app.kube import client as kube_client
from app.kube.retries import RetryPolicy
from app.service.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "remediation.json"
LATENCY_MS = 5.0
LATENCY_SAMPLES = 30
STORM_NODES = 500


class Timed:
    """Wraps the kube port: records when each node's first quarantine patch (a cordon) returned."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.cordoned: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def patch_node(self, patch: NodePatch) -> Any:
        result = await self._inner.patch_node(patch)
        if patch.unschedulable and patch.node not in self.cordoned:
            self.cordoned[patch.node] = time.perf_counter()
        return result


def _seed(nodes: int) -> dict[str, Any]:
    return {
        "nodes": [{"name": "gpu-{i:04d}", "count": nodes, "gpus": 8, "labels": {"sickbay.io/pool": "h100"}}]
    }


def _policy(tmp: Path) -> Path:
    data = yaml.safe_load((RULES_DIR / "policy.yaml").read_text())
    data["budgets"].update(
        {
            "max_fraction": 1.0,
            "max_nodes": 100000,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 100000,
            "quarantines_per_minute": 100000,
        }
    )
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _world(
    tmp: Path,
    nodes: int,
    *,
    pipeline: dict[str, Any] | None = None,
    raised: bool = True,
    seed_doc: dict[str, Any] | None = None,
    latency_ms: float = LATENCY_MS,
    qps: float = 5000,
    burst: int = 5000,
    grace_scale: float = 0.0,
) -> tuple[asyncio.subprocess.Process, Timed, Any, TestServer]:
    """The simulated API server (its own process), a client on it, and Sickbay in process; `pipeline`:
    the pipeline's settings (this benchmark's, for a storm, by default); `raised`: the budgets raised to
    allow every node (else the shipped policy's); `seed_doc`: the cluster (else `nodes` bare GPU nodes);
    `latency_ms`: added by the API server to every request; `qps`, `burst`: the client's rate limit, by
    default well above what a storm needs; `grace_scale`: the API server's (a deleted pod's grace period
    times this before its kubelet stand-in confirms; 0: deleted pods go at once)."""
    # The API server runs in its own process, as a real one would: it must not share Sickbay's core.
    seed = tmp / "seed.yaml"
    seed.write_text(yaml.safe_dump(seed_doc if seed_doc is not None else _seed(nodes)))
    kubeconfig = tmp / "kubeconfig"
    sim = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sickbay")),
        "simulate",
        "kube-api",
        "--seed",
        str(seed),
        "--latency-ms",
        str(latency_ms),
        "--kubeconfig-out",
        str(kubeconfig),
        "--grace-scale",
        str(grace_scale),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert sim.stdout is not None
    line = await asyncio.wait_for(sim.stdout.readline(), 30)
    assert b"simulated Kubernetes API" in line, line
    kube = await kube_client.connect(
        kubeconfig=str(kubeconfig), qps=qps, burst=burst, retry=RetryPolicy(attempts=5, base=0.05, timeout=10)
    )
    timed = Timed(kube)
    settings = load_settings(
        auth={"mode": "none"},
        inbox={"path": tmp / "sickbay.db"},
        identity="bench",
        reconcile_interval_s=3600,
        policy_file=_policy(tmp) if raised else RULES_DIR / "policy.yaml",
        log_level="WARNING",
        pipeline={"node_concurrency": 64, "poll_interval_s": 0.05} if pipeline is None else pipeline,
    )
    server = TestServer(build_app(settings, kube=timed))
    await server.start_server()
    reconciler = server.app[SERVICES].reconciler
    assert reconciler is not None
    await reconciler.run_once()  # the gates learn the fleet
    return sim, timed, kube, server


async def _post(session: ClientSession, url: str, alerts: list[dict[str, Any]]) -> None:
    async with session.post(
        url, data=json.dumps(webhook(*alerts)), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200, await r.text()


async def _wait(timed: Timed, names: set[str], timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not names <= timed.cordoned.keys():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{len(names - timed.cordoned.keys())} nodes not quarantined in {timeout}s")
        await asyncio.sleep(0.001)


async def measure_latency(tmp: Path) -> dict[str, float]:
    sim, timed, kube, server = await _world(tmp, LATENCY_SAMPLES + 2)
    url = str(server.make_url("/api/v1/alerts"))
    try:
        floor = []
        for _ in range(LATENCY_SAMPLES):
            started = time.perf_counter()
            node = await kube.get_node("gpu-0000")
            await kube.patch_node(NodePatch(node="gpu-0000", resource_version=node.resource_version))
            floor.append(time.perf_counter() - started)
        samples = []
        async with ClientSession() as session:
            for i in range(1, LATENCY_SAMPLES + 1):
                name = f"gpu-{i:04d}"
                started = time.perf_counter()
                await _post(session, url, [alert(fingerprint=f"lat{i:04d}", node=name, xid="79")])
                await _wait(timed, {name}, timeout=10)
                samples.append(timed.cordoned[name] - started)
                await asyncio.sleep(0.3)  # let this node's drain and hand-off finish: one fault at a time
        return {
            "p50_ms": _pct(samples, 50),
            "p99_ms": _pct(samples, 99),
            "floor_p50_ms": _pct(floor, 50),
            "floor_p99_ms": _pct(floor, 99),
            "nominal_floor_ms": 2 * LATENCY_MS,
        }
    finally:
        await server.close()
        await kube.close()
        sim.terminate()
        await sim.wait()


async def measure_storm(tmp: Path) -> dict[str, float]:
    sim, timed, kube, server = await _world(tmp, STORM_NODES)
    url = str(server.make_url("/api/v1/alerts"))
    names = [f"gpu-{i:04d}" for i in range(STORM_NODES)]
    try:
        async with ClientSession() as session:
            started = time.perf_counter()
            batches = [names[i : i + 10] for i in range(0, STORM_NODES, 10)]
            await asyncio.gather(
                *(
                    _post(session, url, [alert(fingerprint=f"s{n}", node=n, xid="79") for n in batch])
                    for batch in batches
                )
            )
            sent = time.perf_counter() - started
            await _wait(timed, set(names), timeout=120)
            elapsed = max(timed.cordoned.values()) - started
        return {
            "nodes": STORM_NODES,
            "sent_within_s": sent,
            "all_quarantined_s": elapsed,
            "nodes_per_s": STORM_NODES / elapsed,
            "nvsentinel_nodes_per_s": 150 / 62,
        }
    finally:
        await server.close()
        await kube.close()
        sim.terminate()
        await sim.wait()


def _pct(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index] * 1000 if pct != 50 else statistics.median(ordered) * 1000


async def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        latency = await measure_latency(Path(a))
        storm = await measure_storm(Path(b))
    return {"latency": latency, "storm": storm}


def main() -> Table:
    results = asyncio.run(run())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    lat, storm = results["latency"], results["storm"]
    table = Table(title=f"Remediation (simulated API server adds {LATENCY_MS:g} ms per request)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("baseline (same run)", justify="right")
    table.add_row(
        "alert → node unschedulable, p50", f"{lat['p50_ms']:.1f} ms", f"floor {lat['floor_p50_ms']:.1f} ms"
    )
    table.add_row(
        "alert → node unschedulable, p99", f"{lat['p99_ms']:.1f} ms", f"floor {lat['floor_p99_ms']:.1f} ms"
    )
    table.add_row(
        "  ratio p50 to the floor",
        f"{lat['p50_ms'] / lat['floor_p50_ms']:.2f}x",
        f"nominal {lat['nominal_floor_ms']:.0f} ms",
    )
    table.add_row(
        f"{storm['nodes']} nodes faulting (sent in {storm['sent_within_s']:.2f} s): all quarantined",
        f"{storm['all_quarantined_s']:.2f} s",
        "target < 5 s",
    )
    table.add_row(
        "  quarantine rate",
        f"{storm['nodes_per_s']:.0f} nodes/s",
        f"NVSentinel {storm['nvsentinel_nodes_per_s']:.1f} nodes/s",
    )
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
