"""The compact seed format's expanders: a section of facts in, full objects out.

Each expander turns one section (nodes, daemonsets, deployments, jobsets, jobs, pods, pdbs) into objects
shaped like a real cluster's — a JobSet gang comes out as JobSet → Jobs → pods with JobSet's labels, a
Deployment as Deployment → ReplicaSet → pods — and records problems instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.sim.kubeapi import builders, kueue
from app.sim.kubeapi.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    LEASES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    WORKLOADS,
    JsonObj,
    Ref,
    ResourceType,
)
from app.sim.kubeapi.store import Store, format_micro_time

SeedObject = tuple[ResourceType, JsonObj]
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.0-ubuntu22.04"
_GPU_TOLERATION = {"key": builders.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
_OWNER_KINDS = {rt.kind: rt for rt in (DAEMONSETS, DEPLOYMENTS, REPLICASETS, JOBS, JOBSETS)}


def internal_ip(node: JsonObj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return "10.0.0.1"


class Expansion:
    """Objects expanded so far, in load order, plus every problem met on the way."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.now = store.now()
        self.out: list[SeedObject] = []
        self.problems: list[str] = []
        self.node_ips: dict[str, str] = {n["metadata"]["name"]: internal_ip(n) for n in store.items(NODES)}
        self._pods_per_node: dict[str, int] = {}

    def add(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        self.out.append((rt, obj))
        return obj

    def uid(self) -> str:
        return self.store.new_uid()

    def find(self, ref: Ref) -> JsonObj | None:
        for rt, obj in self.out:
            meta = obj["metadata"]
            if rt is ref.rt and (meta.get("namespace", "") if rt.namespaced else "", meta["name"]) == ref.key:
                return obj
        return self.store.get(ref)

    def pod(self, name: str, *, namespace: str, node: str | None, **fields: Any) -> JsonObj:
        if node is not None and node not in self.node_ips:
            self.problems.append(f"pod {namespace}/{name}: node {node!r} is not in the seed")
        count = self._pods_per_node.get(str(node), 0) + 1
        self._pods_per_node[str(node)] = count
        node_ip = self.node_ips.get(str(node))
        pod_ip = None
        if node_ip is not None:
            octets = node_ip.split(".")
            pod_ip = f"10.{200 + int(octets[2])}.{int(octets[3])}.{count + 1}"
        obj = builders.pod(
            name, namespace, uid=self.uid(), now=self.now, node=node, node_ip=node_ip, pod_ip=pod_ip, **fields
        )
        return self.add(PODS, obj)

    def target_nodes(self, spec: Mapping[str, Any], *, what: str) -> list[str]:
        nodes = spec.get("nodes", "all")
        if nodes == "all":
            return list(self.node_ips)
        if not isinstance(nodes, list) or not nodes:
            self.problems.append(f"{what}: nodes must be 'all' or a non-empty list of node names")
            return []
        return [str(n) for n in nodes]


def _name_ns(spec: Mapping[str, Any], default_ns: str) -> tuple[str, str]:
    return str(spec["name"]), str(spec.get("namespace", default_ns))


def expand_nodes(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        count, start = int(spec.get("count", 1)), int(spec.get("start", 0))
        pattern = str(spec.get("name", "gpu-{i:02d}"))
        for i in range(start, start + count):
            name = pattern.format(i=i) if "{" in pattern else (pattern if count == 1 else f"{pattern}-{i}")
            node = builders.gpu_node(
                name,
                index=len(ex.node_ips),
                uid=ex.uid(),
                now=ex.now,
                gpus=int(spec.get("gpus", 8)),
                gpu_product=str(spec.get("gpu_product", builders.DEFAULT_GPU_PRODUCT)),
                labels=spec.get("labels"),
                annotations=spec.get("annotations"),
                unschedulable=bool(spec.get("unschedulable", False)),
                taints=spec.get("taints"),
                ready=bool(spec.get("ready", True)),
            )
            ex.node_ips[name] = internal_ip(node)
            ex.add(NODES, node)
            ex.add(
                LEASES, builders.node_lease(node, uid=ex.uid(), renewed=format_micro_time(ex.store.clock()))
            )


def expand_daemonsets(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "kube-system")
        labels = dict(spec.get("labels") or {"app": name})
        image = str(spec.get("image", EXPORTER_IMAGE))
        body = {"selector": {"matchLabels": labels}, "template": builders.pod_template(labels, image=image)}
        ds = ex.add(
            DAEMONSETS,
            builders.plain(
                DAEMONSETS, name, namespace=ns, uid=ex.uid(), now=ex.now, labels=labels, spec=body
            ),
        )
        owner = builders.owner_reference(DAEMONSETS, ds)
        pod_labels = {**labels, "controller-revision-hash": "6d5f9c8b7c", "pod-template-generation": "1"}
        for node in ex.target_nodes(spec, what=f"daemonset {ns}/{name}"):
            pod = ex.pod(
                f"{name}-{ex.store.random_suffix()}",
                namespace=ns,
                node=node,
                labels=pod_labels,
                owner=owner,
                image=image,
            )
            pod["spec"]["tolerations"].append({"operator": "Exists"})  # DaemonSet pods tolerate every taint


def expand_deployments(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "default")
        nodes = ex.target_nodes(spec, what=f"deployment {ns}/{name}")
        labels = dict(spec.get("labels") or {"app": name})
        gpus = int(spec.get("gpus_per_pod", 0))
        body = {
            "replicas": len(nodes),
            "selector": {"matchLabels": labels},
            "template": builders.pod_template(labels, gpus=gpus),
        }
        deploy = ex.add(
            DEPLOYMENTS,
            builders.plain(
                DEPLOYMENTS, name, namespace=ns, uid=ex.uid(), now=ex.now, labels=labels, spec=body
            ),
        )
        template_hash = ex.store.random_suffix(10)
        hashed = {**labels, "pod-template-hash": template_hash}
        rs_body = {
            "replicas": len(nodes),
            "selector": {"matchLabels": hashed},
            "template": builders.pod_template(hashed, gpus=gpus),
        }
        rs = ex.add(
            REPLICASETS,
            builders.plain(
                REPLICASETS,
                f"{name}-{template_hash}",
                namespace=ns,
                uid=ex.uid(),
                now=ex.now,
                labels=hashed,
                owner=builders.owner_reference(DEPLOYMENTS, deploy),
                spec=rs_body,
            ),
        )
        owner = builders.owner_reference(REPLICASETS, rs)
        for node in nodes:
            pod_name = f"{rs['metadata']['name']}-{ex.store.random_suffix()}"
            ex.pod(pod_name, namespace=ns, node=node, labels=hashed, owner=owner, gpus=gpus)


def _job_spec(width: int, *, labels: Mapping[str, str], gpus: int) -> JsonObj:
    return {
        "parallelism": width,
        "completions": width,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": builders.pod_template(labels, gpus=gpus, restart_policy="Never"),
    }


def _job_pod(ex: Expansion, job: JsonObj, *, node: str, index: int, spec: Mapping[str, Any]) -> None:
    meta = job["metadata"]
    labels = {
        **(meta.get("labels") or {}),
        "batch.kubernetes.io/job-name": meta["name"],
        "job-name": meta["name"],
        "batch.kubernetes.io/controller-uid": meta["uid"],
        "controller-uid": meta["uid"],
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    gpus = int(spec.get("gpus_per_pod", 8))
    pod = ex.pod(
        f"{meta['name']}-{index}-{ex.store.random_suffix()}",
        namespace=meta["namespace"],
        node=node,
        gpus=gpus,
        labels=labels,
        owner=builders.owner_reference(JOBS, job),
        restart_policy="Never",
        phase=str(spec.get("phase", "Running")),
    )
    if not gpus:
        pod["spec"]["tolerations"] = [t for t in pod["spec"]["tolerations"] if t != _GPU_TOLERATION]


def expand_jobsets(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "default")
        rjob = str(spec.get("replicated_job", "workers"))
        nodes = ex.target_nodes(spec, what=f"jobset {ns}/{name}")
        labels = dict(spec.get("labels") or {})
        gpus = int(spec.get("gpus_per_pod", 8))
        template = {"spec": _job_spec(1, labels=labels, gpus=gpus)}
        body = {"replicatedJobs": [{"name": rjob, "replicas": len(nodes), "template": template}]}
        jobset = ex.add(
            JOBSETS,
            builders.plain(
                JOBSETS,
                name,
                namespace=ns,
                uid=ex.uid(),
                now=ex.now,
                labels=labels,
                spec=body,
                status={"restarts": 0},
            ),
        )
        for index, node in enumerate(nodes):
            gang = {
                **labels,
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(len(nodes)),
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": "0",
            }
            job = ex.add(
                JOBS,
                builders.plain(
                    JOBS,
                    f"{name}-{rjob}-{index}",
                    namespace=ns,
                    uid=ex.uid(),
                    now=ex.now,
                    labels=gang,
                    owner=builders.owner_reference(JOBSETS, jobset),
                    spec=_job_spec(1, labels=gang, gpus=gpus),
                    status={"active": 1},
                ),
            )
            _job_pod(ex, job, node=node, index=0, spec=spec)


def expand_jobs(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "default")
        nodes = ex.target_nodes(spec, what=f"job {ns}/{name}")
        labels = dict(spec.get("labels") or {})
        body = _job_spec(len(nodes), labels=labels, gpus=int(spec.get("gpus_per_pod", 8)))
        job = ex.add(
            JOBS,
            builders.plain(
                JOBS,
                name,
                namespace=ns,
                uid=ex.uid(),
                now=ex.now,
                labels=labels,
                spec=body,
                status={"active": len(nodes)},
            ),
        )
        queue = labels.get(kueue.QUEUE_NAME)
        if queue:  # a queued Job: Kueue's job integration made its Workload (admitted: see kueue.py)
            ex.add(WORKLOADS, kueue.workload_for(job, queue=str(queue), uid=ex.uid(), now=ex.now))
        for index, node in enumerate(nodes):
            _job_pod(ex, job, node=node, index=index, spec=spec)


def expand_pods(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "default")
        owner = None
        if spec.get("owner"):
            kind, owner_name = str(spec["owner"].get("kind")), str(spec["owner"].get("name"))
            rt = _OWNER_KINDS.get(kind)
            found = ex.find(Ref(rt, namespace=ns, name=owner_name)) if rt else None
            if rt is None or found is None:
                ex.problems.append(f"pod {ns}/{name}: owner {kind}/{owner_name} is not in the seed")
            else:
                owner = builders.owner_reference(rt, found)
        ex.pod(
            name,
            namespace=ns,
            node=spec.get("node"),
            gpus=int(spec.get("gpus", 0)),
            phase=str(spec.get("phase", "Running")),
            ready=spec.get("ready"),
            labels=spec.get("labels"),
            annotations=spec.get("annotations"),
            owner=owner,
        )


def expand_pdbs(ex: Expansion, specs: Sequence[Any]) -> None:
    for spec in specs:
        name, ns = _name_ns(spec, "default")
        body: JsonObj = {
            "selector": spec.get("selector") or {"matchLabels": dict(spec.get("matchLabels") or {})}
        }
        for key in ("minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy"):
            if key in spec:
                body[key] = spec[key]
        ex.add(PDBS, builders.plain(PDBS, name, namespace=ns, uid=ex.uid(), now=ex.now, spec=body))


def expand_objects(ex: Expansion, specs: Sequence[Any]) -> None:
    for index, obj in enumerate(specs):
        if not isinstance(obj, dict):
            ex.problems.append(f"objects[{index}]: must be a mapping")
            continue
        rt = ex.store.catalog.for_api_version(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            ex.problems.append(f"objects[{index}]: {obj.get('apiVersion')}/{obj.get('kind')} is not served")
        elif not (obj.get("metadata") or {}).get("name"):
            ex.problems.append(f"objects[{index}]: metadata.name is required")
        else:
            ex.add(rt, obj)
