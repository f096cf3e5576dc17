"""The disruption controller's arithmetic: a PodDisruptionBudget's status from the pods it selects.

kube-controller-manager recomputes `currentHealthy`, `desiredHealthy`, `expectedPods` and
`disruptionsAllowed` whenever pods change; the eviction handler only trusts and decrements the stored
status. The simulator runs the same computation a little after every write that can change it
(`controllers.py` models the controller's lag). The rules follow the real controller, including its sharp
edges: an integer `minAvailable` counts the selected pods, while `maxUnavailable` and percentages need the
pods' controller scale (ReplicaSet, Deployment, StatefulSet) and fail safe to zero disruptions when a
pod's controller has no scale (a Job, a JobSet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from app.sim.kubeapi.resources import JsonObj
from app.sim.kubeapi.selectors import selector_from_spec
from app.sim.kubeapi.store import parse_time

# A budget as created: policy/v1's four counts carry no omitempty, so they read 0 until the controller syncs.
NEW_STATUS: JsonObj = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
DELETION_TIMEOUT = timedelta(minutes=2)  # how long an evicted pod stays in disruptedPods if never deleted

# Looks up the scale of a pod's controller: None when the controller has no scale the controller knows.
ScaleLookup = Callable[[JsonObj, str], int | None]


class ExpectedCountError(Exception):
    """The controller could not size the budget; it then allows no disruptions."""


def is_pod_ready(pod: JsonObj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def controller_of(obj: JsonObj) -> JsonObj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def selects(pdb: JsonObj, pod: JsonObj) -> bool:
    selector = selector_from_spec((pdb.get("spec") or {}).get("selector"))
    return selector.matches((pod.get("metadata") or {}).get("labels"))


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _expected_scale(pods: Sequence[JsonObj], *, namespace: str, scale_of: ScaleLookup) -> int:
    scales: dict[str, int] = {}
    for pod in pods:
        ref = controller_of(pod)
        if ref is None:
            continue  # unmanaged pods count for nothing here; the real controller only warns about them
        if ref.get("uid") in scales:
            continue
        scale = scale_of(ref, namespace)
        if scale is None:
            raise ExpectedCountError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[str(ref.get("uid"))] = scale
    return sum(scales.values())


def expected_and_desired(pdb: JsonObj, pods: Sequence[JsonObj], *, scale_of: ScaleLookup) -> tuple[int, int]:
    spec = pdb.get("spec") or {}
    namespace = pdb["metadata"].get("namespace", "")
    if spec.get("maxUnavailable") is not None:
        expected = _expected_scale(pods, namespace=namespace, scale_of=scale_of)
        return expected, max(0, expected - _scaled(spec["maxUnavailable"], expected))
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int):
        return len(pods), min_available
    if min_available is not None:
        expected = _expected_scale(pods, namespace=namespace, scale_of=scale_of)
        return expected, _scaled(min_available, expected)
    return 0, 0


def _condition(
    allowed: bool, *, generation: int, now: str, reason: str | None = None, message: str = ""
) -> JsonObj:
    return {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "reason": reason or ("SufficientPods" if allowed else "InsufficientPods"),
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now,
    }


def _with_condition(conditions: list[JsonObj], new: JsonObj) -> list[JsonObj]:
    """Replace the DisruptionAllowed condition, keeping its transition time when its status didn't change."""
    kept = [c for c in conditions if c.get("type") != new["type"]]
    for old in conditions:
        if old.get("type") == new["type"] and old.get("status") == new["status"]:
            new = {**new, "lastTransitionTime": old.get("lastTransitionTime", new["lastTransitionTime"])}
    return [*kept, new]


def compute_status(pdb: JsonObj, pods: Sequence[JsonObj], *, scale_of: ScaleLookup, now: datetime) -> JsonObj:
    """The status the disruption controller would write for `pdb`, given every pod in its namespace."""
    status = dict(pdb.get("status") or {})
    generation = int(pdb["metadata"].get("generation", 1))
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    selected = [p for p in pods if selects(pdb, p)]
    try:
        expected, desired = expected_and_desired(pdb, selected, scale_of=scale_of)
    except ExpectedCountError as error:
        status["disruptionsAllowed"] = 0
        status["conditions"] = _with_condition(
            status.get("conditions") or [],
            _condition(False, generation=generation, now=stamp, reason="SyncFailed", message=str(error)),
        )
        return status
    disrupted: dict[str, str] = {}
    previous = status.get("disruptedPods") or {}
    for pod in selected:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp") or name not in previous:
            continue
        if parse_time(previous[name]) + DELETION_TIMEOUT > now:
            disrupted[name] = previous[name]
    healthy = sum(
        1
        for pod in selected
        if not pod["metadata"].get("deletionTimestamp")
        and pod["metadata"]["name"] not in disrupted
        and is_pod_ready(pod)
    )
    allowed = healthy - desired if expected > 0 else 0
    new: JsonObj = {
        "observedGeneration": generation,
        "disruptionsAllowed": max(0, allowed),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if disrupted:
        new["disruptedPods"] = disrupted
    new["conditions"] = _with_condition(
        status.get("conditions") or [], _condition(allowed > 0, generation=generation, now=stamp)
    )
    return new
