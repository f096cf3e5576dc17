"""Storms: 500 nodes each get a fatal XID alert at once, against the simulated API server.

Sickbay runs in process with the real HTTP intake and the official client; the simulated API server
runs in its own process and adds 5 ms to every request (as in `bench_remediation`). The service is
measured once it has started (the risk model loaded: its import takes seconds of CPU in a thread), so
the figures are the storm's, not start-up's.

- default budget: the shipped policy's blast-radius budget. Reported: how many were quarantined (the
  budget's count), the time from the burst to the last budgeted write, and to the breaker open.
- budget raised to allow all: the time until every node is quarantined, and nodes per second.
- pipeline throughput: fatal signals processed per second (the raised storm's rows over its time).

Baseline in the same run: the cluster's floor, one node read and one node write per node sent
straight through the same client, 64 at a time (the pipeline's node concurrency), on as many other
nodes before the burst; figures are ratios to it. `--quick` runs a toy size.

    python -m tests.perf storm [-- --quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import ClientSession
from rich.table import Table

from app.domain import NodePatch
from app.service.runtime import SERVICES
from tests.payloads import alert
from tests.perf.bench_remediation import LATENCY_MS, _post, _wait, _world

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "storm.json"
NODES = 500
PER_REQUEST = 10
CONCURRENCY = 64


async def _started(server: Any) -> None:
    services = server.app[SERVICES]
    await services.prediction_started()
    if services.scoring is not None:
        await services.scoring.loaded()


async def _burst(server: Any, names: Sequence[str]) -> float:
    url = str(server.make_url("/api/v1/alerts"))
    batches = [names[i : i + PER_REQUEST] for i in range(0, len(names), PER_REQUEST)]
    started = time.perf_counter()
    async with ClientSession() as session:
        await asyncio.gather(
            *(
                _post(session, url, [alert(fingerprint=f"st{n}", node=n, xid="79") for n in batch])
                for batch in batches
            )
        )
    return started


async def _floor(kube: Any, names: Sequence[str]) -> float:
    """One read and one cordon per node straight through the client, `CONCURRENCY` at a time."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(name: str) -> None:
        async with slots:
            node = await kube.get_node(name)
            await kube.patch_node(
                NodePatch(node=name, resource_version=node.resource_version, labels=(("bench/floor", "1"),))
            )

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in names))
    return time.perf_counter() - started


async def _close(sim: Any, kube: Any, server: Any) -> None:
    await server.close()
    await kube.close()
    sim.terminate()
    await sim.wait()


async def measure_default(tmp: Path, nodes: int) -> dict[str, Any]:
    sim, timed, kube, server = await _world(tmp, nodes, raised=False)
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    try:
        await _started(server)
        gates = server.app[SERVICES].gates
        assert gates is not None
        started = await _burst(server, names)
        deadline = started + 60
        while not gates.breaker.open:
            if time.perf_counter() > deadline:
                raise TimeoutError("the breaker did not open")
            await asyncio.sleep(0.001)
        opened = time.perf_counter() - started
        await asyncio.sleep(1.0)  # anything still to be written would land by now
        quarantined = len(timed.cordoned)
        return {
            "nodes": nodes,
            "quarantined": quarantined,
            "last_budgeted_write_s": max(timed.cordoned.values()) - started if quarantined else None,
            "breaker_open_s": opened,
            "fleet": gates.fleet().total,
        }
    finally:
        await _close(sim, kube, server)


async def measure_raised(tmp: Path, nodes: int) -> dict[str, Any]:
    # Twice the fleet: the floor is measured first, on the nodes the storm then leaves alone, so
    # neither's background work (the storm's conditions, Events and drains) slows the other.
    sim, timed, kube, server = await _world(tmp, 2 * nodes)
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    try:
        await _started(server)
        floor = await _floor(kube, [f"gpu-{i:04d}" for i in range(nodes, 2 * nodes)])
        started = await _burst(server, names)
        await _wait(timed, set(names), timeout=120)
        elapsed = max(timed.cordoned.values()) - started
        return {
            "nodes": nodes,
            "all_quarantined_s": elapsed,
            "nodes_per_s": nodes / elapsed,
            "floor_s": floor,
        }
    finally:
        await _close(sim, kube, server)


async def run(nodes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        default = await measure_default(Path(a), nodes)
        raised = await measure_raised(Path(b), nodes)
    return {"default": default, "raised": raised, "latency_ms": LATENCY_MS}


def main(argv: Sequence[str] | None = None) -> Table:
    parser = argparse.ArgumentParser(prog="bench_storm")
    parser.add_argument("--quick", action="store_true", help="a toy size (20 nodes)")
    parser.add_argument("--nodes", type=int, default=None)
    args = parser.parse_args(list(argv or []))
    nodes = args.nodes or (20 if args.quick else NODES)
    results = asyncio.run(run(nodes))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    d, r = results["default"], results["raised"]
    table = Table(
        title=f"Storm: {nodes} nodes, a fatal XID each at once (API server +{LATENCY_MS:g} ms/request)"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("baseline (same run)", justify="right")
    last = d["last_budgeted_write_s"]
    table.add_row("default budget: quarantined", f"{d['quarantined']} of {nodes}", "the budget's count")
    table.add_row(
        "  burst → last budgeted write", f"{last:.2f} s" if last is not None else "-", "target < 1 s"
    )
    table.add_row("  burst → breaker open", f"{d['breaker_open_s']:.2f} s", "target < 1 s")
    table.add_row(
        "budget raised: all quarantined",
        f"{r['all_quarantined_s']:.2f} s",
        f"floor {r['floor_s']:.2f} s ({r['all_quarantined_s'] / r['floor_s']:.1f}x)",
    )
    table.add_row(
        "  fatal signals processed", f"{r['nodes_per_s']:.0f} /s", f"floor {nodes / r['floor_s']:.0f} /s"
    )
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
