"""Full Kubernetes objects from a few facts: a GPU node, a running pod on it, an owner, a namespace.

The compact seed format expands through these, so seeded objects look like what a real cluster returns
(kubelet-reported capacity and conditions, scheduler-set nodeName, controller owner references) and the
code under test parses the same shapes it will meet in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.sim.kubeapi.resources import JsonObj, ResourceType

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
KUBELET_VERSION = "v1.32.0"


def owner_reference(rt: ResourceType, obj: JsonObj, *, controller: bool = True) -> JsonObj:
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def namespace(name: str, *, uid: str, now: str) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": now,
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def gpu_node(
    name: str,
    *,
    index: int,
    uid: str,
    now: str,
    gpus: int = 8,
    gpu_product: str = DEFAULT_GPU_PRODUCT,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[JsonObj] | None = None,
    ready: bool = True,
) -> JsonObj:
    capacity = {
        "cpu": "192",
        "memory": "2113560880Ki",
        "ephemeral-storage": "3750000000Ki",
        "pods": "110",
        GPU_RESOURCE: str(gpus),
    }
    spec: JsonObj = {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    heartbeat = {"lastHeartbeatTime": now, "lastTransitionTime": now}
    pressure = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHasSufficient{word}",
            "message": msg,
            **heartbeat,
        }
        for kind, word, msg in (
            ("MemoryPressure", "Memory", "kubelet has sufficient memory available"),
            ("DiskPressure", "Disk", "kubelet has no disk pressure"),
            ("PIDPressure", "PID", "kubelet has sufficient PID available"),
        )
    ]
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
        **heartbeat,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": now,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.product": gpu_product,
                **(labels or {}),
            },
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [*pressure, ready_condition],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": uid.replace("-", ""),
                "systemUUID": uid,
                "bootID": uid,
                "kernelVersion": "5.15.0-1063-nvidia",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def node_lease(node: JsonObj, *, uid: str, renewed: str) -> JsonObj:
    """The heartbeat Lease a kubelet keeps in kube-node-lease (kubectl describe node shows it)."""
    name = node["metadata"]["name"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease", "uid": uid, "ownerReferences": [owner]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renewed},
    }


def _container_status(name: str, *, image: str, phase: str, ready: bool, uid: str, now: str) -> JsonObj:
    state: JsonObj
    if phase == "Running":
        state = {"running": {"startedAt": now}}
    elif phase in ("Succeeded", "Failed"):
        code = 0 if phase == "Succeeded" else 1
        reason = "Completed" if phase == "Succeeded" else "Error"
        state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    return {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':', 1)[0]}@sha256:{uid.replace('-', '')}{'0' * 32}",
        "containerID": f"containerd://{uid.replace('-', '')}",
        "ready": ready,
        "started": phase == "Running",
        "restartCount": 0,
        "state": state,
    }


def pod(
    name: str,
    namespace: str,
    *,
    uid: str,
    now: str,
    node: str | None,
    node_ip: str | None = None,
    pod_ip: str | None = None,
    gpus: int = 0,
    phase: str = "Running",
    ready: bool | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: JsonObj | None = None,
    image: str = "nvcr.io/nvidia/pytorch:24.08-py3",
    restart_policy: str = "Always",
) -> JsonObj:
    ready = phase == "Running" if ready is None else ready
    resources: JsonObj = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources = {
            "requests": {"cpu": str(gpus * 12), "memory": f"{gpus * 120}Gi", GPU_RESOURCE: str(gpus)},
            "limits": {GPU_RESOURCE: str(gpus)},
        }
    tolerations: list[Any] = [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    if gpus:
        tolerations.insert(0, {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    spec: JsonObj = {
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "resources": resources,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "restartPolicy": restart_policy,
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "priority": 0,
        "tolerations": tolerations,
    }
    if node:
        spec["nodeName"] = node
    done = phase in ("Succeeded", "Failed")
    flag = "True" if ready else "False"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "False" if done else "True"},
        {"type": "Initialized", "status": "True"},
        {
            "type": "Ready",
            "status": flag,
            **({} if ready else {"reason": "PodCompleted" if done else "ContainersNotReady"}),
        },
        {"type": "ContainersReady", "status": flag},
        {"type": "PodScheduled", "status": "True" if node else "False"},
    ]
    status: JsonObj = {
        "phase": phase,
        "conditions": [{**c, "lastProbeTime": None, "lastTransitionTime": now} for c in conditions],
        "qosClass": "Burstable",
    }
    if node:
        status.update(
            hostIP=node_ip,
            hostIPs=[{"ip": node_ip}],
            podIP=pod_ip,
            podIPs=[{"ip": pod_ip}],
            startTime=now,
            containerStatuses=[
                _container_status("main", image=image, phase=phase, ready=ready, uid=uid, now=now)
            ],
        )
    metadata: JsonObj = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": now,
        "labels": dict(labels or {}),
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pod_template(
    labels: Mapping[str, str],
    *,
    gpus: int = 0,
    restart_policy: str = "Always",
    image: str = "nvcr.io/nvidia/pytorch:24.08-py3",
) -> JsonObj:
    """The spec.template a workload controller carries; the generated clients require one."""
    container: JsonObj = {"name": "main", "image": image, "resources": {}}
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {"containers": [container], "restartPolicy": restart_policy},
    }


def plain(rt: ResourceType, name: str, *, namespace: str, uid: str, now: str, **fields: Any) -> JsonObj:
    """An owner object (Job, JobSet, DaemonSet, ReplicaSet, Deployment) with whatever spec the seed gives."""
    metadata: JsonObj = {"name": name, "uid": uid, "creationTimestamp": now}
    if rt.namespaced:
        metadata["namespace"] = namespace
    labels = fields.pop("labels", None)
    if labels:
        metadata["labels"] = dict(labels)
    owner = fields.pop("owner", None)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if rt.has_generation:
        metadata["generation"] = 1
    return {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": metadata, **fields}
