"""Translation between Kubernetes JSON objects and Sickbay's domain values, both ways.

Reads turn Node and Pod JSON (as the API server sends it, camelCase) into `NodeState` and `PodState`; writes
turn a `NodePatch` or a `Condition` into the patch bodies the API server expects. Working on plain JSON
rather than the client's generated models keeps reads tolerant of fields a newer server adds.

Pure functions only: no I/O, no `kubernetes` import, time passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from app.domain import (
    Condition,
    NodePatch,
    NodeState,
    OwnerRef,
    PodFacts,
    PodState,
    Taint,
    Toleration,
    freeze_mapping,
)

JsonObj = dict[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
_NO_FACTS = PodFacts()

_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(quantity: object) -> int:
    """A Kubernetes quantity ("8", "2k", "1Ki", "500m", "1e3") as a whole number, rounded down; 0 if invalid."""
    if isinstance(quantity, bool):
        return 0
    if isinstance(quantity, int | float):
        return int(quantity)
    if not isinstance(quantity, str) or not quantity.strip():
        return 0
    text = quantity.strip()
    try:
        if text[-2:] in _BINARY_SUFFIXES:
            return int(Decimal(text[:-2]) * _BINARY_SUFFIXES[text[-2:]])
        if text[-1:] in _DECIMAL_SUFFIXES and not text[-1:].isdigit():
            return int(Decimal(text[:-1]) * _DECIMAL_SUFFIXES[text[-1:]])
        return int(Decimal(text))
    except (InvalidOperation, ValueError):
        return 0


def parse_time(raw: object) -> datetime | None:
    """An RFC 3339 timestamp ("2024-05-01T10:00:00Z", with or without fractions) as an aware datetime."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(moment: datetime) -> str:
    """A `metav1.Time`: RFC 3339 in UTC with whole seconds, as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """A `metav1.MicroTime`: RFC 3339 in UTC with microseconds (an Event's `eventTime`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _strings(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items() if v is not None}


def _count(resources: object, names: Iterable[str]) -> int:
    if not isinstance(resources, Mapping):
        return 0
    return sum(parse_quantity(resources.get(name)) for name in names)


def taint_of(raw: Mapping[str, Any]) -> Taint:
    return Taint(
        key=str(raw.get("key", "")), value=str(raw.get("value") or ""), effect=str(raw.get("effect", ""))
    )


def condition_of(raw: Mapping[str, Any]) -> Condition:
    return Condition(
        type=str(raw.get("type", "")),
        status=str(raw.get("status", "Unknown")),
        reason=str(raw.get("reason") or ""),
        message=str(raw.get("message") or ""),
        last_transition=parse_time(raw.get("lastTransitionTime")),
    )


def node_state(node: Mapping[str, Any], *, gpu_resources: Sequence[str] = (GPU_RESOURCE,)) -> NodeState:
    """A Node object as `NodeState`; GPU counts add up every resource name in `gpu_resources`."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return NodeState(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion") or ""),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=tuple(taint_of(t) for t in spec.get("taints") or () if isinstance(t, Mapping)),
        labels=freeze_mapping(_strings(meta.get("labels"))),
        annotations=freeze_mapping(_strings(meta.get("annotations"))),
        conditions=tuple(condition_of(c) for c in status.get("conditions") or () if isinstance(c, Mapping)),
        gpu_capacity=_count(status.get("capacity"), gpu_resources),
        gpu_allocatable=_count(status.get("allocatable"), gpu_resources),
    )


def container_request(container: Mapping[str, Any], names: Sequence[str]) -> int:
    """Devices one container asks for: its request, or its limit (an extended resource's request defaults to it)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    total = 0
    for name in names:
        value = requests.get(name) if isinstance(requests, Mapping) else None
        if value is None and isinstance(limits, Mapping):
            value = limits.get(name)
        total += parse_quantity(value)
    return total


def pod_gpu_request(spec: Mapping[str, Any], names: Sequence[str]) -> int:
    """The pod's effective request, computed as the scheduler does.

    Regular containers run together, so they add up; init containers run one at a time, so the pod needs the
    largest of them; sidecars (init containers with `restartPolicy: Always`) keep running, so they add to both.
    """
    running = sum(container_request(c, names) for c in spec.get("containers") or () if isinstance(c, Mapping))
    sidecars = 0
    init_peak = 0
    for init in spec.get("initContainers") or ():
        if not isinstance(init, Mapping):
            continue
        request = container_request(init, names)
        if init.get("restartPolicy") == "Always":
            sidecars += request
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + request)
    return max(running + sidecars, init_peak)


def owner_of(raw: Mapping[str, Any]) -> OwnerRef:
    return OwnerRef(
        kind=str(raw.get("kind", "")),
        name=str(raw.get("name", "")),
        uid=str(raw.get("uid") or ""),
        controller=bool(raw.get("controller", False)),
        api_version=str(raw.get("apiVersion") or ""),
    )


def pod_state(
    pod: Mapping[str, Any], *, gpu_resources: Sequence[str] = (GPU_RESOURCE,), facts: bool = False
) -> PodState:
    """`facts`: also read priority, tolerations and images (`PodFacts`, the audit's); decide needs none of
    them, and reading them doubles the cost of a pod's conversion on the drain's path."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return PodState(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        labels=freeze_mapping(_strings(meta.get("labels"))),
        annotations=freeze_mapping(_strings(meta.get("annotations"))),
        owners=tuple(owner_of(o) for o in meta.get("ownerReferences") or () if isinstance(o, Mapping)),
        gpu_request=pod_gpu_request(spec, gpu_resources),
        resource_version=str(meta.get("resourceVersion") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        grace_period_s=_grace_period(spec.get("terminationGracePeriodSeconds")),
        facts=pod_facts(spec) if facts else _NO_FACTS,
    )


def pod_facts(spec: Mapping[str, Any]) -> PodFacts:
    """Priority (the admission plugin resolves `priorityClassName` into `spec.priority`), tolerations, images."""
    priority = spec.get("priority")
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    return PodFacts(
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        priority_class=str(spec.get("priorityClassName") or ""),
        tolerations=tuple(toleration(t) for t in spec.get("tolerations") or () if isinstance(t, Mapping)),
        images=tuple(str(c.get("image") or "") for c in containers if isinstance(c, Mapping)),
    )


def toleration(raw: Mapping[str, Any]) -> Toleration:
    seconds = raw.get("tolerationSeconds")
    return Toleration(
        key=str(raw.get("key") or ""),
        operator=str(raw.get("operator") or "Equal"),
        value=str(raw.get("value") or ""),
        effect=str(raw.get("effect") or ""),
        seconds=int(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None,
    )


def _grace_period(raw: object) -> int:
    """`terminationGracePeriodSeconds`; the API server defaults it to 30, and a negative one means 1."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return 30
    return max(1, int(raw)) if raw < 0 else int(raw)


def _removals(pairs: Iterable[tuple[str, str]]) -> dict[str, str | None]:
    """Label/annotation changes for a merge patch: an empty value means remove, which is JSON null."""
    return {key: (value if value != "" else None) for key, value in pairs}


def taint_json(taint: Taint, *, previous: Sequence[Mapping[str, Any]] = ()) -> JsonObj:
    """One taint as JSON; a taint that was already there keeps its `timeAdded` (NoExecute timing needs it)."""
    body: JsonObj = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        body["value"] = taint.value
    for old in previous:
        if taint_of(old) == taint and old.get("timeAdded"):
            body["timeAdded"] = old["timeAdded"]
            break
    return body


def node_merge_patch(patch: NodePatch, *, previous_taints: Sequence[Mapping[str, Any]] = ()) -> JsonObj:
    """The JSON merge patch for `patch`: one body, guarded by `metadata.resourceVersion`.

    A resourceVersion in a patch is a precondition: the API server answers 409 if the node has changed since
    it was read. `spec.taints` is sent whole, since a merge patch replaces lists.
    """
    metadata: JsonObj = {}
    if patch.resource_version:
        metadata["resourceVersion"] = patch.resource_version
    if patch.labels:
        metadata["labels"] = _removals(patch.labels)
    if patch.annotations:
        metadata["annotations"] = _removals(patch.annotations)
    body: JsonObj = {"metadata": metadata}
    spec: JsonObj = {}
    if patch.taints is not None:
        spec["taints"] = [taint_json(t, previous=previous_taints) for t in patch.taints]
    if patch.unschedulable is not None:
        spec["unschedulable"] = patch.unschedulable
    if spec:
        body["spec"] = spec
    return body


def condition_patch(
    condition: Condition, *, current: Condition | None, now: datetime, resource_version: str = ""
) -> JsonObj:
    """A strategic merge patch for `status.conditions` (merged by `type`, other conditions untouched).

    The heartbeat is always `now`; the transition time moves only when the status changes (or the condition
    is new), taking the caller's `last_transition` if it gave one.
    """
    item: JsonObj = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastHeartbeatTime": format_time(now),
    }
    if current is None or current.status != condition.status or current.last_transition is None:
        item["lastTransitionTime"] = format_time(condition.last_transition or now)
    body: JsonObj = {"status": {"conditions": [item]}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body


def labels_patch(labels: Mapping[str, str | None]) -> JsonObj:
    """A merge patch setting pod labels; `None` removes one."""
    return {"metadata": {"labels": dict(labels)}}
