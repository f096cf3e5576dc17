"""Tried as a new user would: the settings of the `dry-run` overlay, run against a simulated cluster with
faults injected. The status page shows what Sickbay would do; the cluster receives no write at all.

The overlay is rendered with `kubectl kustomize`; its container env and the ConfigMaps it mounts are
used as they are, except what only a pod has (in-cluster credentials, mounted paths), which is pointed
at the simulator and at local copies of the same files.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.demo.processes import free_port as _free_port
from app.sim.kubeapi import KubeApiServer
from tests.payloads import alert, webhook

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "gang-cluster.yaml"
KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is needed to render the overlay"),
]
TOKEN = "dry-run-token"


def _render() -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(REPO / "deploy" / "overlays" / "dry-run")],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def _post(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


async def test_dry_run_overlay_shows_what_it_would_do_and_writes_nothing(tmp_path: Path) -> None:
    objects = _render()
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "sickbay")
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "sickbay"
    )
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["SICKBAY_DRY_RUN"] == "true"
    # The files the pod would mount, from the overlay's own ConfigMaps.
    mounted: dict[str, str] = {}
    for config_map in (o for o in objects if o["kind"] == "ConfigMap"):
        mounted.update(config_map.get("data", {}))
    local = tmp_path / "etc"
    local.mkdir()
    for name, text in mounted.items():
        (local / name).write_text(text)
    for key in ("SICKBAY_CONFIG", "SICKBAY_POLICY_FILE", "SICKBAY_XID_CATALOG_FILE"):
        env[key] = str(local / Path(env[key]).name)
        assert Path(env[key]).exists(), f"the overlay mounts no file for {key}"

    async with KubeApiServer(seed=SEED) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        port = _free_port()
        env |= {
            "SICKBAY_KUBE__IN_CLUSTER": "false",  # only a pod has in-cluster credentials
            "SICKBAY_KUBE__KUBECONFIG": str(kubeconfig),
            "SICKBAY_INBOX__PATH": str(tmp_path / "sickbay.db"),
            "SICKBAY_LISTEN_HOST": "127.0.0.1",
            "SICKBAY_LISTEN_PORT": str(port),
            "SICKBAY_AUTH__TOKEN": TOKEN,
            "POD_NAME": "sickbay-dry-run-0",
            "POD_NAMESPACE": "sickbay",
        }
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
        log = (tmp_path / "serve.log").open("w")
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("sickbay")), "serve", env=clean | env, stdout=log, stderr=log
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if json.loads(await asyncio.to_thread(_get, base + "/readyz"))["status"] == "ready":
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                await asyncio.sleep(0.2)
            sim.reset_counters()
            payload = webhook(
                alert(fingerprint="dr1", node="gpu-00", xid="79", gpu="3"),
                alert(fingerprint="dr2", node="gpu-05", xid="95", gpu="0", sickbay_class="reset-gpu"),
                alert(
                    fingerprint="dr3",
                    node="gpu-06",
                    xid="13",
                    gpu="1",
                    sickbay_class="restart-workload",
                    namespace="training",
                    pod="solo-a",
                ),
            )
            assert await asyncio.to_thread(_post, base + "/api/v1/alerts", payload) == 200
            deadline = time.monotonic() + 30
            while True:
                page = await asyncio.to_thread(_get, base + "/")
                if page.count("dry-run</span>") >= 3:
                    break
                assert time.monotonic() < deadline, page[-3000:]
                await asyncio.sleep(0.3)
            assert "dry-run: observing only, writing nothing" in page
            assert "would patch: cordon" in page
            assert "would delete the pod" in page
            assert "gpu-00" in page
            assert "gpu-05" in page
            counters = sim.counters()
            assert counters["writes"] == 0, counters
        finally:
            proc.terminate()
            await proc.wait()
            log.close()
