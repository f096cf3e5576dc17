"""Legacy discovery documents (/api, /apis, /version), built from the resource catalog.

kubectl asks for aggregated discovery first; answering with plain `application/json` makes it fall back
to these documents, which is how older API servers behave. Advertised verbs are only the ones served,
so a client that checks discovery sees the truth.
"""

from __future__ import annotations

from app.sim.kubeapi.resources import EVICTION_SUBRESOURCE, Catalog, JsonObj, ResourceType

SERVER_VERSION: JsonObj = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-sickbay-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource_entry(rt: ResourceType) -> JsonObj:
    entry: JsonObj = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _resources(types: list[ResourceType]) -> list[JsonObj]:
    found: list[JsonObj] = []
    for rt in types:
        found.append(_resource_entry(rt))
        if rt.has_status:
            found.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if rt.kind == "Pod" and not rt.group:
            found.append(dict(EVICTION_SUBRESOURCE))
    return found


def core_versions(server_address: str) -> JsonObj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def resource_list(catalog: Catalog, *, group: str, version: str) -> JsonObj | None:
    types = catalog.in_group_version(group, version)
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": _resources(types),
    }


def _group(name: str, versions: list[str]) -> JsonObj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def group_list(catalog: Catalog) -> JsonObj:
    groups = [_group(name, versions) for name, versions in catalog.group_versions().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(catalog: Catalog, name: str) -> JsonObj | None:
    versions = catalog.group_versions().get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}
