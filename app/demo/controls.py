"""What the demo's scenes and the end-to-end tests do with a running stack, as one mixin of `Stack`.

Query Prometheus, inject faults through the fleet's control API, read Sickbay's journal, metrics and
API, act as the remediator (repair, `remediation-done`) or the operator (validate and promote a model),
and read the simulated cluster back. `Stack` (`app.demo.stack`) starts the parts and sets the attributes
declared here; nothing here starts or stops anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from app.decide import footprint
from app.demo import launch, prediction
from app.demo.configs import REPO, workload_pod
from app.demo.processes import StackError, http_get
from app.demo.stack_config import StackConfig
from app.domain import NodePatch
from app.kube import client as kube_client
from app.kube import errors as kube_errors
from app.kube.port import KubePort
from app.sim.fleet import FleetSim
from app.sim.fleet.server import FleetServer
from app.sim.fleet.workloads import PodRef
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import EVENTS


@dataclass(frozen=True, slots=True)
class Injection:
    """What an injection through the fleet's control API started, and when (perf_counter and wall clock)."""

    at: float
    wall: datetime
    node: str
    gpu: int | None
    mode: str
    result: Mapping[str, Any]


class StackControls:
    """Talking to the parts of a started stack (see the module docstring)."""

    config: StackConfig
    fleet: FleetSim
    fleet_server: FleetServer
    kube: KubeApiServer
    models_dir: Path
    kubeconfig: Path
    sickbay_url: str
    prometheus_url: str
    _session: aiohttp.ClientSession | None
    _kube_port: kube_client.KubeClient | None
    _started: float

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise StackError("the stack is not started")
        return self._session

    @property
    def headers(self) -> dict[str, str]:
        # An operator's: it may read and validate the model; the webhook's token may post alerts only.
        return {"Authorization": f"Bearer {self.config.operator_token}"}

    @property
    def cluster(self) -> KubePort:
        """Sickbay's own Kubernetes port (`app.kube`) on the simulated cluster, for reading it back."""
        if self._kube_port is None:
            raise StackError("the stack is not started")
        return self._kube_port

    def maps_pods(self, node: str) -> bool:
        """Whether `node`'s exporter labels its series with the pod using each GPU."""
        return node not in self.fleet_server.settings.unmapped_nodes

    def exporter_pod(self, node: str) -> str:
        """The name of the exporter pod that serves `node`'s metrics."""
        return launch.exporter_pods(self.fleet, self.kube)[node].name

    async def _prom_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        status, body = await http_get(self.session, self.prometheus_url + path, params=params or {})
        if status != 200:
            return {}
        data: dict[str, Any] = json.loads(body).get("data") or {}
        return data

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """A PromQL instant query's result vector (empty on any error)."""
        data = await self._prom_json("/api/v1/query", {"query": promql})
        result: list[dict[str, Any]] = data.get("result") or []
        return result

    async def inject(self, node: str, gpu: int | None, mode: str, **fields: Any) -> Injection:
        """Start a fault through the fleet's control API (`POST /inject`)."""
        body = {"node": node, "gpu": gpu, "mode": mode, **fields}
        wall = datetime.now(UTC)
        at = time.perf_counter()
        async with self.session.post(f"{self.fleet_server.url}/inject", json=body) as response:
            result = await response.json()
            if response.status != 200:
                raise StackError(f"inject {body} failed: {response.status} {result}")
        return Injection(at=at, wall=wall, node=node, gpu=gpu, mode=mode, result=result)

    async def actions(self, limit: int = 1000) -> dict[str, Any]:
        """Sickbay's journal (`GET /api/v1/actions`): items (faults with plans) and outcomes."""
        async with self.session.get(
            f"{self.sickbay_url}/api/v1/actions", params={"limit": str(limit)}, headers=self.headers
        ) as response:
            data: dict[str, Any] = await response.json()
            return data

    async def sickbay_metrics(self) -> str:
        """Sickbay's `/metrics` text (empty on any error)."""
        status, body = await http_get(self.session, f"{self.sickbay_url}/metrics", headers=self.headers)
        return body.decode(errors="replace") if status == 200 else ""

    async def sickbay_get(self, path: str) -> Any:
        async with self.session.get(f"{self.sickbay_url}{path}", headers=self.headers) as response:
            return await response.json()

    async def annotate_node(self, node: str, key: str, value: str) -> None:
        """Set one annotation on a node (read, then write guarded by its resourceVersion; retried on 409)."""
        for _ in range(10):
            current = await self.cluster.get_node(node)
            try:
                await self.cluster.patch_node(
                    NodePatch(
                        node=node, resource_version=current.resource_version, annotations=((key, value),)
                    )
                )
                return
            except kube_errors.ConflictError:
                continue
        raise StackError(f"could not annotate {node}: it kept changing")

    async def remediation_done(self, node: str) -> None:
        """What a remediator does when finished: repair the node in the fleet (replace what must be
        replaced, reboot) and set `sickbay.io/remediation-done` on the Node."""
        self.repair(node)
        await self.annotate_node(node, footprint.REMEDIATION_DONE, "true")

    def repair(self, node: str) -> None:
        """What a remediator does: replace the GPUs that need it and reboot the node (in the fleet)."""
        self.fleet.repair(node)

    def gpu_pod(self, node: str, gpu: int) -> PodRef | None:
        """The workload the exporter attributes this GPU to right now."""
        return self.fleet.node(node).gpus[gpu].pod

    def attach_workload(
        self, node: str, gpu: int, *, namespace: str, name: str, job: str | None = None
    ) -> PodRef:
        """A new single-GPU workload lands on a GPU: in the fleet (the exporter attributes the GPU to it)
        and as a pod in the cluster (what its controller would have created)."""
        state = self.fleet.node(node).gpus[gpu]
        ref = PodRef(namespace, name, "main")
        state.pod = ref
        state.util = 90.0
        self.kube.load({"pods": [workload_pod(ref, node=node, gpus=1, job=job or name, gang=False)]})
        return ref

    async def validate_model(self, version: str, note: str) -> dict[str, Any]:
        """Validate a model version on this fleet as an operator would (`sickbay model validate --force`):
        without it the proactive ladder runs in shadow, taints nothing, and the scene has nothing to show."""
        body = {"version": version, "force": True, "who": "demo", "note": note}
        async with self.session.post(
            f"{self.sickbay_url}/api/v1/model/validate", json=body, headers=self.headers
        ) as response:
            data: dict[str, Any] = await response.json()
            if response.status != 200 or data.get("mode") != "acting":
                raise StackError(f"could not validate model {version}: {response.status} {data}")
            return data

    def promote_model(self, source: Path = REPO / "models") -> prediction.ModelInfo:
        """Install the trained model in Sickbay's models directory; its next scoring cycle loads it."""
        return prediction.promote_model(source, self.models_dir)

    def events(self, *, reason: str) -> list[dict[str, Any]]:
        """Events with this reason in the simulated cluster, oldest first (read in process)."""
        found = [e for e in self.kube.store.items(EVENTS) if e.get("reason") == reason]
        return sorted(found, key=lambda e: str(e.get("firstTimestamp") or e.get("eventTime") or ""))

    def exporter_instance_up(self, node: str) -> bool:
        return self.fleet.node(node).exporter_up(self.fleet.time_s)

    @property
    def uptime_s(self) -> float:
        return time.perf_counter() - self._started

    def kubectl_hint(self) -> str:
        return f"kubectl --kubeconfig {self.kubeconfig} get nodes"
