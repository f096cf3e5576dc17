"""One bad alert must not cost the good ones, end to end against the simulated API server.

Alertmanager never retries a 4xx, so a group that holds an invalid alert used to lose its valid fatal
alerts for good. Through the webhook of the real app: the valid nodes are quarantined (read back with
the official client), the invalid alert is in `GET /api/v1/rejected` and in the metric.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from app.decide import footprint
from tests.integration.remediation_world import World, eventually, open_world, write_policy
from tests.payloads import alert, webhook

pytestmark = pytest.mark.slow


def stamp(world: World, *, ago: timedelta) -> str:
    """An RFC 3339 time relative to the world's clock, as Alertmanager writes it."""
    return (world.clock() - ago).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def test_two_valid_fatal_alerts_and_one_invalid_quarantine_both_and_keep_the_third(
    tmp_path: Path,
) -> None:
    # Ten nodes in one pool: room for two quarantines (the shipped budget allows one node in ten).
    policy = write_policy(tmp_path, budgets={"max_fraction": 0.5, "per_pool_max_fraction": 0.5})
    async with open_world(tmp_path, policy=policy) as world:
        started = stamp(world, ago=timedelta(minutes=2))
        group = webhook(
            alert(fingerprint="fatal07", node="gpu-07", xid="79", gpu="2", starts_at=started),
            alert(fingerprint="fatal08", node="gpu-08", xid="79", gpu="5", starts_at=started),
            alert(fingerprint="badnode", node="gpu-09/../gpu-00", xid="79", gpu="1", starts_at=started),
        )
        response = await world.client.post(
            "/api/v1/alerts", data=json.dumps(group), headers={"Content-Type": "application/json"}
        )
        answer = await response.json()
        assert response.status == 200, answer
        assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (2, 0, 1)
        assert [(r["loc"], r["reason"]) for r in answer["rejections"]] == [
            ("alerts.2.labels.node", "invalid_alert")
        ]

        async def both_quarantined() -> bool:
            nodes = [await world.node(name) for name in ("gpu-07", "gpu-08")]
            return all(n.spec.unschedulable for n in nodes)

        await eventually(both_quarantined, what="gpu-07 and gpu-08 cordoned")
        for name, gpu in (("gpu-07", 2), ("gpu-08", 5)):
            node = await world.node(name)
            taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
            assert (footprint.UNHEALTHY, "reboot-node", "NoSchedule") in taints, (name, taints)
            assert node.metadata.labels[footprint.STATE] in ("quarantined", "draining", "remediating")
            fault = json.loads(node.metadata.annotations[footprint.FAULT])
            assert (fault["xid"], fault["gpu"]) == (79, gpu), (name, fault)
        for untouched in ("gpu-09", "gpu-00"):
            assert not (await world.node(untouched)).spec.unschedulable, (
                f"{untouched} was never named validly"
            )

        kept = (await (await world.client.get("/api/v1/rejected")).json())["items"]
        assert len(kept) == 1
        assert (kept[0]["fingerprint"], kept[0]["reason"], kept[0]["loc"]) == (
            "badnode",
            "invalid_alert",
            "alerts.2.labels.node",
        )
        assert kept[0]["labels"]["node"] == "gpu-09/../gpu-00", "the raw labels, as sent"
        assert kept[0]["raw"] == group["alerts"][2]
        metrics = await (await world.client.get("/metrics")).text()
        assert 'sickbay_alerts_rejected_total{reason="invalid_alert",source="alertmanager"} 1.0' in metrics
        assert 'sickbay_alerts_received_total{source="alertmanager"} 2.0' in metrics
