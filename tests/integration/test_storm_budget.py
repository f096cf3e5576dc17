"""A storm against the budget: 200 nodes each get a fatal XID alert at once (the bench does 500), through
the real HTTP intake and the official client against the simulated API server in its own process.

With the shipped budget exactly the budgeted count is quarantined, even though every admission races
the others, and the breaker opens with its Event and metric; with the budget raised all are quarantined.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig

from app.config.rules import load_policy
from app.config.settings import RULES_DIR
from app.decide import gates
from app.service.runtime import SERVICES
from tests.perf.bench_remediation import _wait, _world
from tests.perf.bench_storm import _burst, _close, _started

NODES = 200


async def _events(kubeconfig: Path, reason: str) -> list[object]:
    api = await aconfig.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        listed = await aclient.CoreV1Api(api).list_namespaced_event("default")
        return [e for e in listed.items if e.reason == reason]
    finally:
        await api.close()


async def test_the_default_budget_quarantines_exactly_its_count_and_opens_the_breaker(tmp_path: Path) -> None:
    budgets = load_policy(RULES_DIR / "policy.yaml").budgets
    expected = min(
        gates.limit(NODES, fraction=budgets.max_fraction, cap=budgets.max_nodes),
        gates.limit(NODES, fraction=budgets.per_pool_max_fraction, cap=budgets.per_pool_max_nodes),
        budgets.quarantines_per_minute,
    )
    sim, timed, kube, server = await _world(tmp_path, NODES, raised=False)
    try:
        await _started(server)
        services = server.app[SERVICES]
        names = [f"gpu-{i:04d}" for i in range(NODES)]
        await _burst(server, names)
        deadline = time.monotonic() + 60
        while services.inbox is not None and await services.inbox.depth() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert len(timed.cordoned) == expected
        listed = await kube.list_nodes()
        assert sum(1 for n in listed if n.unschedulable) == expected
        assert services.gates is not None
        assert services.gates.breaker.open
        assert services.metrics.breaker_open._value.get() == 1
        refused = await _events(tmp_path / "kubeconfig", "SickbayBreakerOpen")
        assert len(refused) >= 1
    finally:
        await _close(sim, kube, server)


async def test_with_the_budget_raised_every_node_is_quarantined(tmp_path: Path) -> None:
    sim, timed, kube, server = await _world(tmp_path, NODES + 1)
    try:
        await _started(server)
        names = [f"gpu-{i:04d}" for i in range(NODES)]
        await _burst(server, names)
        await _wait(timed, set(names), timeout=60)
        keeper = server.app[SERVICES].gates
        assert keeper is not None
        assert not keeper.breaker.open
        listed = {n.name: n for n in await kube.list_nodes()}
        assert all(listed[n].unschedulable for n in names)
    finally:
        await _close(sim, kube, server)
