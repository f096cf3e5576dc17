"""The admission checks kube-apiserver applies to the objects Sickbay writes, answered as 422 Invalid.

Only checks that catch real client mistakes are here: names, label and annotation syntax, taint shape and
uniqueness, owner references, the pod spec fields an update may not change, PDB and Lease fields, and the
rule that an Event lives in its involved object's namespace. Each function returns every problem found,
not just the first.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

from app.sim.kubeapi.resources import JsonObj, ResourceType
from app.sim.kubeapi.selectors import label_key_problem, label_value_problem

Cause = tuple[str, str, str]  # (reason, field, message), as in a Status cause

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_ANNOTATIONS_MAX = 256 * 1024


def _invalid(field: str, value: Any, why: str) -> Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {json.dumps(value)}: {why}")


def _required(field: str, why: str = "") -> Cause:
    return ("FieldValueRequired", field, "Required value" + (f": {why}" if why else ""))


def check_object(rt: ResourceType, obj: JsonObj, *, old: JsonObj | None) -> list[Cause]:
    """Everything wrong with `obj` as a create (old is None) or an update of `old`."""
    causes = list(_metadata(rt, obj.get("metadata") or {}))
    check = _KIND_CHECKS.get(rt.kind)
    if check is not None:
        causes.extend(check(obj, old))
    return causes


def _metadata(rt: ResourceType, meta: JsonObj) -> Iterator[Cause]:
    name = str(meta.get("name") or "")
    pattern, limit, what = (
        (_DNS_LABEL, 63, "a lowercase RFC 1123 label")
        if rt.kind == "Namespace"
        else (_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain")
    )
    if not name:
        yield _required("metadata.name", "name or generateName is required")
    elif len(name) > limit or not pattern.match(name):
        yield _invalid(
            "metadata.name",
            name,
            f"{what} must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character",
        )
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        yield _invalid("metadata.labels", labels, "must be a map of strings")
        labels = {}
    for key, value in labels.items():
        problem = label_key_problem(str(key))
        if problem:
            yield _invalid("metadata.labels", key, problem)
        if not isinstance(value, str):
            yield _invalid(f"metadata.labels.{key}", value, "must be a string")
            continue
        problem = label_value_problem(value)
        if problem:
            yield _invalid("metadata.labels", value, problem)
    annotations = meta.get("annotations") or {}
    size = 0
    for key, value in annotations.items():
        problem = label_key_problem(str(key))
        if problem:
            yield _invalid("metadata.annotations", key, problem)
        if not isinstance(value, str):
            yield _invalid(f"metadata.annotations.{key}", value, "must be a string")
            continue
        size += len(key) + len(value)
    if size > _ANNOTATIONS_MAX:
        yield (
            "FieldValueTooLong",
            "metadata.annotations",
            f"Too long: must have at most {_ANNOTATIONS_MAX} bytes",
        )
    controllers = 0
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        for required in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(required):
                yield _required(f"metadata.ownerReferences[{index}].{required}")
        controllers += bool(ref.get("controller"))
    if controllers > 1:
        yield _invalid(
            "metadata.ownerReferences", controllers, "Only one reference can have Controller set to true"
        )


def _node(obj: JsonObj, old: JsonObj | None) -> Iterator[Cause]:
    """Node taints, reported where kube-apiserver reports them: under `metadata.taints[i]`, not `spec`.

    pkg/apis/core/validation's ValidateNode calls validateNodeTaints with a path built from
    field.NewPath("metadata"), and a main-endpoint update runs ValidateNode and then ValidateNodeUpdate,
    which validates the taints again ("update taints"): an update lists every taint cause twice (the
    message, de-duplicated by ToAggregate, names it once). The /status endpoint keeps the stored spec, so
    its taints were already valid.
    """
    causes = list(_taints((obj.get("spec") or {}).get("taints") or [], path="metadata.taints"))
    yield from causes
    if old is not None:
        yield from causes


def _go_taint(taint: JsonObj) -> str:
    """A taint as Go's %#v prints core.Taint in a Duplicate cause.

    A set timeAdded prints as a pointer address in the real message; the simulator writes a fixed one.
    """
    added = "(*v1.Time)(nil)" if taint.get("timeAdded") is None else "(*v1.Time)(0xc000000000)"
    return (
        f"core.Taint{{Key:{json.dumps(str(taint.get('key') or ''))}, "
        f"Value:{json.dumps(str(taint.get('value') or ''))}, "
        f"Effect:{json.dumps(str(taint.get('effect') or ''))}, TimeAdded:{added}}}"
    )


def _taints(taints: list[JsonObj], *, path: str) -> Iterator[Cause]:
    """validateNodeTaints: key (a qualified name, so an empty key is Invalid, not Required), value, effect,
    and uniqueness by (key, effect)."""
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        field = f"{path}[{index}]"
        key = str(taint.get("key") or "")
        problem = label_key_problem(key)
        if problem:
            yield _invalid(f"{field}.key", key, problem)
        value = taint.get("value")
        if value is not None and label_value_problem(str(value)):
            yield _invalid(f"{field}.value", value, str(label_value_problem(str(value))))
        effect = taint.get("effect")
        if not effect:
            yield _required(f"{field}.effect")
        elif effect not in _TAINT_EFFECTS:
            yield (
                "FieldValueNotSupported",
                f"{field}.effect",
                f'Unsupported value: "{effect}": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
            )
        if (key, str(effect or "")) in seen:
            why = f"Duplicate value: {_go_taint(taint)}: taints must be unique by key and effect pair"
            yield ("FieldValueDuplicate", field, why)
            continue
        seen.add((key, str(effect or "")))


def _mutable_pod_spec(spec: JsonObj) -> JsonObj:
    """A pod spec with the fields an update may change blanked out."""
    blank: JsonObj = copy.deepcopy(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"):
        blank.pop(key, None)
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for container in blank.get(group) or []:
            container.pop("image", None)
    return blank


def _pod(obj: JsonObj, old: JsonObj | None) -> Iterator[Cause]:
    spec = obj.get("spec") or {}
    if old is None:
        containers = spec.get("containers") or []
        if not containers:
            yield _required("spec.containers")
        for index, container in enumerate(containers):
            if not container.get("name"):
                yield _required(f"spec.containers[{index}].name")
            if not container.get("image"):
                yield _required(f"spec.containers[{index}].image")
        return
    old_tolerations = (old.get("spec") or {}).get("tolerations") or []
    if any(t not in (spec.get("tolerations") or []) for t in old_tolerations):
        yield (
            "FieldValueForbidden",
            "spec.tolerations",
            "Forbidden: existing toleration can not be modified except its tolerationSeconds",
        )
    if _mutable_pod_spec(spec) != _mutable_pod_spec(old.get("spec") or {}):
        yield (
            "FieldValueForbidden",
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
            "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
            "previously negative)",
        )


def _pdb(obj: JsonObj, old: JsonObj | None) -> Iterator[Cause]:
    spec = obj.get("spec") or {}
    if "minAvailable" in spec and "maxUnavailable" in spec:
        yield _invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
    for field in ("minAvailable", "maxUnavailable"):
        value = spec.get(field)
        if isinstance(value, str) and not re.fullmatch(r"\d+%", value):
            yield _invalid(
                f"spec.{field}", value, "a valid percent string must be a numeric string followed by '%'"
            )
        if isinstance(value, int) and value < 0:
            yield _invalid(f"spec.{field}", value, "must be greater than or equal to 0")


def _lease(obj: JsonObj, old: JsonObj | None) -> Iterator[Cause]:
    duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        yield _invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")


def _event(obj: JsonObj, old: JsonObj | None) -> Iterator[Cause]:
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    involved = obj.get("involvedObject") or {}
    involved_ns = involved.get("namespace") or ""
    # Events about cluster-scoped objects (nodes) live in "default"; others in their object's namespace.
    if involved_ns and involved_ns != namespace:
        yield _invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
    if not involved_ns and namespace not in ("", "default"):
        yield _invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")


_KIND_CHECKS = {
    "Node": _node,
    "Pod": _pod,
    "PodDisruptionBudget": _pdb,
    "Lease": _lease,
    "Event": _event,
}
