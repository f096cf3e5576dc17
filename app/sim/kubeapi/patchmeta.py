"""Strategic-merge metadata: which lists Kubernetes merges by key, per kind.

These are the `patchStrategy`/`patchMergeKey` struct tags of k8s.io/api for the fields Sickbay touches.
A list not named here is replaced whole, exactly as kube-apiserver does — node `spec.taints` and pod
`spec.tolerations` have no merge key, so a strategic patch that sends one taint drops all the others.
"""

from __future__ import annotations

from collections.abc import Mapping

Path = tuple[str, ...]
# A rule is the merge key for lists of objects, or None for lists of scalars merged as a set.
Rules = Mapping[Path, str | None]

_METADATA: dict[Path, str | None] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,
}

_CONTAINER_LISTS: dict[Path, str | None] = {
    ("env",): "name",
    ("ports",): "containerPort",
    ("volumeMounts",): "mountPath",
    ("volumeDevices",): "devicePath",
}

_POD_SPEC_LISTS: dict[Path, str | None] = {
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("topologySpreadConstraints",): "topologyKey",
    ("schedulingGates",): "name",
    ("resourceClaims",): "name",
}


def _pod_spec(prefix: Path) -> dict[Path, str | None]:
    rules = {prefix + path: key for path, key in _POD_SPEC_LISTS.items()}
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        rules[(*prefix, containers)] = "name"
        for path, key in _CONTAINER_LISTS.items():
            rules[(*prefix, containers, *path)] = key
    return rules


def _with_metadata(*parts: Mapping[Path, str | None]) -> dict[Path, str | None]:
    rules = dict(_METADATA)
    for part in parts:
        rules.update(part)
    return rules


_STATUS_CONDITIONS: dict[Path, str | None] = {("status", "conditions"): "type"}
_TEMPLATE = ("spec", "template", "spec")

RULES_BY_KIND: Mapping[str, Rules] = {
    "Node": _with_metadata(
        {
            ("spec", "podCIDRs"): None,
            ("status", "conditions"): "type",
            ("status", "addresses"): "type",
        }
    ),
    "Pod": _with_metadata(
        _pod_spec(("spec",)),
        {
            ("status", "conditions"): "type",
            ("status", "podIPs"): "ip",
            ("status", "hostIPs"): "ip",
            ("status", "resourceClaimStatuses"): "name",
        },
    ),
    "Namespace": _with_metadata(_STATUS_CONDITIONS),
    "PodDisruptionBudget": _with_metadata(_STATUS_CONDITIONS),
    "Event": _with_metadata(),
    "Lease": _with_metadata(),
    "DaemonSet": _with_metadata(_pod_spec(_TEMPLATE), _STATUS_CONDITIONS),
    "ReplicaSet": _with_metadata(_pod_spec(_TEMPLATE), _STATUS_CONDITIONS),
    "Deployment": _with_metadata(_pod_spec(_TEMPLATE), _STATUS_CONDITIONS),
    "StatefulSet": _with_metadata(_pod_spec(_TEMPLATE), _STATUS_CONDITIONS),
    "Job": _with_metadata(_pod_spec(_TEMPLATE), _STATUS_CONDITIONS),
}


def rules_for(kind: str) -> Rules | None:
    """The merge rules for a built-in kind, or None when strategic merge does not apply to it."""
    return RULES_BY_KIND.get(kind)
