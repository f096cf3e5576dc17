"""Request bodies as kube-apiserver decodes them before a write: kind and apiVersion checked against the
endpoint, MicroTime fields decoded, names matched with the URL, and what a create strategy defaults.

Pure functions over JSON values; the registry (`registry.Registry`) calls them and owns the store.
"""

from __future__ import annotations

import copy
from typing import Any

from app.sim.kubeapi import disruption, errors, microtime, pods
from app.sim.kubeapi.resources import NAMESPACES, PDBS, PODS, JsonObj, Ref, ResourceType

_NODE_INFO_KEYS = (
    "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture",
)  # fmt: skip


def typed_body(rt: ResourceType, body: Any) -> JsonObj:
    """A copy of the request body with kind and apiVersion checked against the endpoint, then filled in."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request must be a {rt.kind} object")
    obj = copy.deepcopy(body)
    if obj.get("apiVersion") not in (None, "", rt.api_version):
        raise errors.bad_request(
            f"the API version in the data ({obj['apiVersion']}) does not match the expected API version "
            f"({rt.api_version})"
        )
    if obj.get("kind") not in (None, "", rt.kind):
        raise errors.bad_request(
            f"the kind in the data ({obj['kind']}) does not match the expected kind ({rt.kind})"
        )
    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
    return obj


def decoded(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """The body as the server's decoder leaves it, or 400 as transformDecodeError words a decoding failure
    (k8s.io/apiserver/pkg/endpoints/handlers/rest.go): only MicroTime fields can fail to decode here."""
    try:
        microtime.normalise(rt, obj)
    except microtime.MicroTimeError as error:
        raise errors.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}'
        ) from error
    return obj


def default_for_create(rt: ResourceType, obj: JsonObj) -> None:
    """Status sent on create is dropped, as the real create strategies do; nodes keep theirs."""
    if rt is PODS:
        pods.default_pod(obj)
    elif rt is NAMESPACES:
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    elif rt.kind == "Node":
        status = obj.setdefault("status", {})
        status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
        status.setdefault("nodeInfo", dict.fromkeys(_NODE_INFO_KEYS, ""))
    elif rt is PDBS:
        # PrepareForCreate sets an empty PodDisruptionBudgetStatus (pkg/registry/policy/poddisruptionbudget/
        # strategy.go), and policy/v1 serialises its four counts without omitempty: zeros, not null.
        obj["status"] = dict(disruption.NEW_STATUS)
    elif rt.has_status:
        obj.pop("status", None)


def check_names(ref: Ref, meta: JsonObj) -> None:
    if meta.get("name") and meta["name"] != ref.name:
        raise errors.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({ref.name})"
        )
    if ref.rt.namespaced and meta.get("namespace") and meta["namespace"] != ref.namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
