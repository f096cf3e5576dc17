"""`serve` prunes on the leader's schedule (`retention`): past the inbox's retention, an old resolved alert
of a healthy node goes and the quarantined node's rows stay (held, from the reconciler's node list)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from app.service.runtime import leadership
from tests.integration.remediation_world import eventually, open_world
from tests.integration.test_remediation import unschedulable

pytestmark = pytest.mark.slow


def _inbox_nodes(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(node for (node,) in db.execute("SELECT node FROM inbox"))


async def test_the_leader_prunes_old_rows_of_healthy_nodes_only(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        services = world.services
        assert services.retention is not None
        assert "retention" in [job for job, _, _ in leadership._leader_jobs(services)]
        await world.post_alert(node="gpu-00", xid="79", gpu="3")
        await eventually(lambda: unschedulable(world, "gpu-00"), what="gpu-00 quarantined")
        await world.post_alert(node="gpu-01", xid="43", gpu="1", fingerprint="info")
        await world.post_alert(node="gpu-01", xid="43", gpu="1", fingerprint="info", status="resolved")

        async def processed() -> bool:
            assert services.inbox is not None
            return await services.inbox.depth() == 0

        await eventually(processed, what="the inbox drained")
        db = tmp_path / "sickbay.db"
        before = _inbox_nodes(db)
        assert "gpu-00" in before
        assert before.count("gpu-01") == 2

        world.clock.advance(services.settings.retention.inbox + timedelta(days=1))
        await world.reconcile()
        done = await services.retention.run_once()
        assert done is not None
        assert done.rows["inbox"] == 2
        after = _inbox_nodes(db)
        assert "gpu-01" not in after, "the healthy node's resolved alert is past retention"
        assert "gpu-00" in after, "the quarantined node's rows stay"
