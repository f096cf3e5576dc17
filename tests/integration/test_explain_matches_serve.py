"""`sickbay explain --kubeconfig` shows exactly the plan `serve` carries out for the same payload.

The README promises it: with `--kubeconfig`, explain reads the cluster and "shows exactly the plan `serve`
would carry out". Here a fatal XID on a node of a JobSet gang (quarantine, evict the local rank, restart the
other ranks, request a reboot) is explained by the real CLI in a subprocess, then posted to a running
service (dry-run, so the cluster both of them read is the same), and the two plans are compared field by
field, timestamps aside.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.config.settings import load_settings
from app.service.runtime import build_app
from app.sim.kubeapi import KubeApiServer
from tests.integration.remediation_world import eventually, open_world
from tests.payloads import alert, webhook

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
# Timestamps differ between the two runs by construction; everything else must be identical.
TIMESTAMPS = ("decided_at", "not_before")


def sickbay_command() -> list[str]:
    script = Path(sys.executable).with_name("sickbay")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


async def run_explain(
    payload: Path, kubeconfig: Path, *, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")} | (env or {})
    proc = await asyncio.create_subprocess_exec(
        *sickbay_command(),
        "explain",
        str(payload),
        "--format",
        "json",
        "--kubeconfig",
        str(kubeconfig),
        cwd=REPO,
        env=child_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # The simulated API server runs on this event loop: awaiting (not blocking) keeps it serving.
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode(errors="replace")
    parsed = json.loads(out)
    assert isinstance(parsed, list)
    return parsed


def comparable(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": plan["summary"],
        "actions": [{k: v for k, v in a.items() if k not in TIMESTAMPS} for a in plan["actions"]],
    }


def steps(plan: dict[str, Any]) -> list[tuple[str, str | None, tuple[str, str] | None]]:
    return [
        (a["kind"], a["node"], (a["pod"]["namespace"], a["pod"]["name"]) if a["pod"] else None)
        for a in plan["actions"]
    ]


async def test_explain_with_kubeconfig_prints_the_plan_serve_journals(tmp_path: Path) -> None:
    body = webhook(alert(fingerprint="explain-gang-0", node="gpu-00", xid="79", gpu="3"))
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(body))
    async with open_world(tmp_path, dry_run=True) as world:
        gang = {
            p.metadata.name: p.spec.node_name
            for p in await world.pods("training", label_selector="jobset.sigs.k8s.io/jobset-name=llm")
        }
        assert sorted(gang.values()) == ["gpu-00", "gpu-01", "gpu-02", "gpu-03"]
        world.sim.reset_counters()

        explained = await run_explain(payload, world.kubeconfig)
        assert world.sim.counters()["writes"] == 0, "explain never writes"
        assert len(explained) == 1
        printed = explained[0]

        response = await world.client.post(
            "/api/v1/alerts", data=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        assert response.status == 200, await response.text()
        assert await response.json() == {"accepted": 1, "duplicates": 0, "rejected": 0}

        async def journaled() -> bool:
            answer = await (await world.client.get("/api/v1/actions", params={"node": "gpu-00"})).json()
            return bool(answer["items"])

        await eventually(journaled, what="the plan journaled by serve")
        answer = await (await world.client.get("/api/v1/actions", params={"node": "gpu-00"})).json()
        assert len(answer["items"]) == 1, answer["items"]
        served = answer["items"][0]

    # The plan is the interesting one: a gang node gets every kind of step, so a difference would show.
    kinds = [kind for kind, _, _ in steps(printed["plan"])]
    assert kinds[0] == "quarantine"
    assert kinds[-1] == "request-remediation"
    assert kinds.count("evict-pod") == 1
    assert kinds.count("restart-gang") == 3
    restarted = {pod[1] for kind, _, pod in steps(printed["plan"]) if kind == "restart-gang" and pod}
    assert restarted == {name for name, node in gang.items() if node != "gpu-00"}

    assert (printed["class"], printed["rule"], printed["reason"]) == (
        served["class"],
        served["rule"],
        served["reason"],
    )
    assert printed["plan"]["summary"] == served["plan"]["summary"]
    assert steps(printed["plan"]) == steps(served["plan"])
    assert comparable(printed["plan"]) == comparable(served["plan"])


AMD_GPU = "amd.com/gpu"


def amd_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "training", "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "rocm/pytorch:latest",
                    "resources": {"requests": {AMD_GPU: "4"}, "limits": {AMD_GPU: "4"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


async def test_explain_honours_the_configured_gpu_resources_like_serve(tmp_path: Path) -> None:
    seed = {
        "namespaces": ["training"],
        "nodes": [{"name": "mi300-{i:02d}", "count": 2, "gpus": 8}],
        "objects": [amd_pod("rocm-a", "mi300-00"), amd_pod("rocm-b", "mi300-01")],
    }
    body = webhook(alert(fingerprint="explain-amd-0", node="mi300-00", xid="79", gpu="0"))
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(body))
    async with KubeApiServer(seed=seed) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(
            auth={"mode": "none"},
            inbox={"path": tmp_path / "sickbay.db"},
            kube={"enabled": True, "kubeconfig": str(kubeconfig), "gpu_resources": [AMD_GPU]},
            reconcile_interval_s=3600,
            dry_run=True,
        )
        client = TestClient(TestServer(build_app(settings)))
        await client.start_server()
        try:
            explained = await run_explain(
                payload, kubeconfig, env={"SICKBAY_KUBE__GPU_RESOURCES": json.dumps([AMD_GPU])}
            )
            response = await client.post(
                "/api/v1/alerts", data=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            assert response.status == 200, await response.text()

            async def journaled() -> bool:
                answer = await (await client.get("/api/v1/actions")).json()
                return bool(answer["items"])

            await eventually(journaled, what="the plan journaled by serve")
            served = (await (await client.get("/api/v1/actions")).json())["items"][0]
        finally:
            await client.close()
    # serve, configured for AMD GPUs, evicts the pod; explain must say the same.
    assert ("evict-pod", "mi300-00", ("training", "rocm-a")) in steps(served["plan"])
    assert steps(explained[0]["plan"]) == steps(served["plan"])
    assert comparable(explained[0]["plan"]) == comparable(served["plan"])
