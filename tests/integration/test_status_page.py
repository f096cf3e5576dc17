"""The status page shows what Sickbay is doing, and escapes everything that came from alerts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.remediation_world import eventually, open_world

pytestmark = pytest.mark.slow


async def test_status_page_lists_quarantined_nodes_and_the_timeline_escaped(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        await world.post_alert(node="gpu-00", xid="79", gpu="3")
        hostile = "<script>alert(1)</script>"
        await world.post_alert(node="gpu-06", xid="", gpu="1", sickbay_class="transient", alertname=hostile)

        async def cordoned() -> bool:
            return bool((await world.node("gpu-00")).spec.unschedulable)

        await eventually(cordoned, what="gpu-00 quarantined")

        async def page_shows_both() -> bool:
            text = await (await world.client.get("/")).text()
            return "gpu-00" in text and "gpu-06" in text

        await eventually(page_shows_both, what="both signals on the page")
        response = await world.client.get("/")
        assert response.status == 200
        assert response.content_type == "text/html"
        html = await response.text()
        assert '<meta http-equiv="refresh"' in html
        assert "Nodes Sickbay is acting on" in html
        assert "reboot-node" in html
        assert "XID 79" in html
        assert "breaker" in html
        assert "<script>" not in html, "alert-supplied text must be escaped"
        assert "&lt;script&gt;" in html
