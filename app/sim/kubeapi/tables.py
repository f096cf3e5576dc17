"""Server-side printing: the `Table` (meta.k8s.io) that `kubectl get` asks for.

kubectl sends `Accept: application/json;as=Table;...` and prints whatever columns the server returns, so the
simulator renders the same columns kube-apiserver does for the kinds Sickbay touches — a cordoned node reads
`Ready,SchedulingDisabled`, a deleting pod `Terminating`. Other kinds get the generic Name/Age table. Pure:
each function maps stored objects to cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from app.sim.kubeapi.resources import JsonObj, ResourceType
from app.sim.kubeapi.store import parse_time

Cells = list[Any]
Column = tuple[str, str, int, str]  # (name, type, priority, description)

_NAME: Column = ("Name", "string", 0, "Name must be unique within a namespace.")
_AGE: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def human_age(seconds: float) -> str:
    """kubectl's compact age: 45s, 3m20s, 5h12m, 3d4h, 2y10d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours = s // 60, s // 3600
    days = hours // 24
    if minutes < 10:
        return f"{minutes}m" + (f"{s % 60}s" if s % 60 else "")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" + (f"{minutes % 60}m" if minutes % 60 else "")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d" + (f"{hours % 24}h" if hours % 24 else "")
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y" + (f"{days % 365}d" if days % 365 else "")
    return f"{days // 365}y"


def _age(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return "<unknown>"
    return human_age((now - parse_time(stamp)).total_seconds())


def _node_row(node: JsonObj, now: datetime) -> Cells:
    status = node.get("status") or {}
    ready = "Unknown"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = {"True": "Ready", "False": "NotReady"}.get(str(condition.get("status")), "Unknown")
    states = [ready]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        ",".join(states),
        ",".join(roles) or "<none>",
        _age(node["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _pod_status_text(pod: JsonObj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_row(pod: JsonObj, now: datetime) -> Cells:
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status_text(pod),
        sum(int(c.get("restartCount", 0)) for c in containers),
        _age(pod["metadata"].get("creationTimestamp"), now),
        status.get("podIP", "<none>"),
        spec.get("nodeName", "<none>"),
        status.get("nominatedNodeName", "<none>"),
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _event_row(event: JsonObj, now: datetime) -> Cells:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    first = (
        event.get("firstTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    )
    source = event.get("source") or {}
    return [
        _age(last, now),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        ", ".join(
            filter(None, [source.get("component") or event.get("reportingComponent"), source.get("host")])
        ),
        event.get("message", ""),
        _age(first, now),
        event.get("count", 1),
        event["metadata"]["name"],
    ]


def _pdb_row(pdb: JsonObj, now: datetime) -> Cells:
    spec = pdb.get("spec") or {}
    return [
        pdb["metadata"]["name"],
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        (pdb.get("status") or {}).get("disruptionsAllowed", 0),
        _age(pdb["metadata"].get("creationTimestamp"), now),
    ]


def _lease_row(lease: JsonObj, now: datetime) -> Cells:
    holder = (lease.get("spec") or {}).get("holderIdentity") or ""
    return [lease["metadata"]["name"], holder, _age(lease["metadata"].get("creationTimestamp"), now)]


def _namespace_row(ns: JsonObj, now: datetime) -> Cells:
    phase = (ns.get("status") or {}).get("phase", "Active")
    return [ns["metadata"]["name"], phase, _age(ns["metadata"].get("creationTimestamp"), now)]


def _generic_row(obj: JsonObj, now: datetime) -> Cells:
    return [obj["metadata"]["name"], _age(obj["metadata"].get("creationTimestamp"), now)]


_PRINTERS: dict[str, tuple[Sequence[Column], Callable[[JsonObj, datetime], Cells]]] = {
    "Node": (
        (
            _NAME,
            ("Status", "string", 0, "The status of the node"),
            ("Roles", "string", 0, "The roles of the node"),
            _AGE,
            ("Version", "string", 0, "Kubelet Version reported by the node."),
            ("Internal-IP", "string", 1, "List of internal IPs for the node."),
            ("External-IP", "string", 1, "List of external IPs for the node."),
            ("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release."),
            ("Kernel-Version", "string", 1, "Kernel Version reported by the node."),
            ("Container-Runtime", "string", 1, "Container Runtime Version reported by the node."),
        ),
        _node_row,
    ),
    "Pod": (
        (
            _NAME,
            ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            ("Restarts", "string", 0, "The number of times the containers in this pod have been restarted."),
            _AGE,
            ("IP", "string", 1, "IP address allocated to the pod."),
            ("Node", "string", 1, "Name of the Node this pod is assigned to."),
            ("Nominated Node", "string", 1, "Name of the node nominated by the scheduler."),
            ("Readiness Gates", "string", 1, "Pod readiness gates."),
        ),
        _pod_row,
    ),
    "Event": (
        (
            ("Last Seen", "string", 0, "Time when last event occurred."),
            ("Type", "string", 0, "Type of this event (Normal, Warning)."),
            ("Reason", "string", 0, "Why the action was taken."),
            ("Object", "string", 0, "The object the event is about."),
            ("Subobject", "string", 1, "The subobject the event is about."),
            ("Source", "string", 1, "The component reporting this event."),
            ("Message", "string", 0, "A human-readable description of the status of this operation."),
            ("First Seen", "string", 1, "Time when first occurred."),
            ("Count", "string", 1, "The number of times this event has occurred."),
            ("Name", "string", 1, "The name of this event."),
        ),
        _event_row,
    ),
    "PodDisruptionBudget": (
        (
            _NAME,
            ("Min Available", "string", 0, "The minimum number of pods that must be available."),
            ("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            (
                "Allowed Disruptions",
                "integer",
                0,
                "Calculated number of pods that may be disrupted at this time.",
            ),
            _AGE,
        ),
        _pdb_row,
    ),
    "Lease": ((_NAME, ("Holder", "string", 0, "The holder of the lease."), _AGE), _lease_row),
    "Namespace": ((_NAME, ("Status", "string", 0, "The status of the namespace"), _AGE), _namespace_row),
}


def _row_object(obj: JsonObj, *, include: str, table_version: str) -> JsonObj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{table_version}", "metadata": meta}


def render_table(
    rt: ResourceType,
    objects: Sequence[JsonObj],
    *,
    now: datetime,
    resource_version: str,
    include_object: str = "Metadata",
    table_version: str = "v1",
    list_meta: JsonObj | None = None,
) -> JsonObj:
    columns, printer = _PRINTERS.get(rt.kind, ((_NAME, _AGE), _generic_row))
    rows = []
    for obj in objects:
        row: JsonObj = {"cells": printer(obj, now)}
        partial = _row_object(obj, include=include_object, table_version=table_version)
        if partial is not None:
            row["object"] = partial
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{table_version}",
        "metadata": {"resourceVersion": resource_version, **(list_meta or {})},
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": description,
                "priority": priority,
            }
            for name, kind, priority, description in columns
        ],
        "rows": rows,
    }
