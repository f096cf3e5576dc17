"""The status page in a real browser: headless Chromium loads it from a running service with faults
injected, the content is checked from the rendered DOM, and a screenshot is saved with the test's output."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from tests.integration.remediation_world import eventually, open_world

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.real_clock,  # under libfaketime Chromium never finished rendering the page (tried: timeout)
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]
# Flags for a sandboxless root container with no network: no background traffic, no first-run UI.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


async def _chromium(*args: str, profile: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


async def test_status_page_renders_in_chromium(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        await world.post_alert(node="gpu-00", xid="79", gpu="3")
        await world.post_alert(
            node="gpu-06",
            xid="13",
            gpu="1",
            sickbay_class="restart-workload",
            namespace="training",
            pod="solo-a",
        )
        hostile = "<img src=x onerror=alert(1)>"
        await world.post_alert(node="gpu-07", xid="", sickbay_class="transient", alertname=hostile)

        async def settled() -> bool:
            text = await (await world.client.get("/")).text()
            return all(name in text for name in ("gpu-00", "gpu-06", "gpu-07")) and "remediating" in text

        await eventually(settled, timeout=20, what="the faults on the status page")
        url = str(world.client.make_url("/"))
        dom = await _chromium("--dump-dom", url, profile=tmp_path / "profile-dom")
        assert "Nodes Sickbay is acting on" in dom
        assert "gpu-00" in dom
        assert "reboot-node" in dom
        assert "XID 79" in dom
        assert "restart-workload" in dom
        assert "<img src=x" not in dom, "label text must never become markup"
        assert "&lt;img src=x onerror=alert(1)&gt;" in dom

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = ARTIFACTS / "status-page.png"
        await _chromium(
            "--window-size=1400,1800", f"--screenshot={screenshot}", url, profile=tmp_path / "profile-shot"
        )
        assert screenshot.stat().st_size > 10_000
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
