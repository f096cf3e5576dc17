"""Turning an HTTP request into Kubernetes terms: group, version, namespace, resource, name, verb, media.

Mirrors kube-apiserver's RequestInfoFactory, including its one oddity (`/namespaces/{name}/status` is the
namespace's own subresource, not a resource called "status"), and the content negotiation kubectl relies
on: `as=Table` for printing, plain JSON for everything else. Pure functions over path, method, headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_TABLE_VERSIONS = ("v1", "v1beta1")


@dataclass(frozen=True, kw_only=True)
class RequestInfo:
    group: str
    version: str
    resource: str = ""  # empty for the group-version discovery document
    namespace: str = ""
    name: str = ""
    subresource: str = ""

    @property
    def counted_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def parse_path(path: str) -> RequestInfo | None:
    """Parse /api/v1/... or /apis/{group}/{version}/...; None for paths that are not resource URLs."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        if len(rest) == 2 or rest[2] in _NAMESPACE_SUBRESOURCES:
            # /namespaces/{name}[/status]: the namespace object itself.
            sub = rest[2] if len(rest) > 2 else ""
            return RequestInfo(
                group=group, version=version, resource="namespaces", name=rest[1], subresource=sub
            )
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return RequestInfo(group=group, version=version) if not rest else None
    return RequestInfo(
        group=group,
        version=version,
        resource=rest[0],
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else "",
        subresource=rest[2] if len(rest) > 2 else "",
    )


def verb_of(method: str, info: RequestInfo, *, query: Mapping[str, str]) -> str:
    """The Kubernetes verb: get/list/watch/create/update/patch/delete/deletecollection."""
    method = method.upper()
    if method == "GET":
        if query.get("watch") in ("1", "true"):
            return "watch"
        return "get" if info.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if info.name else "deletecollection"
    return method.lower()


@dataclass(frozen=True)
class MediaChoice:
    table_version: str | None  # "v1"/"v1beta1" when a Table was asked for
    acceptable: bool


def _params(segment: str) -> tuple[str, dict[str, str]]:
    pieces = [p.strip() for p in segment.split(";")]
    params = {}
    for piece in pieces[1:]:
        key, _, value = piece.partition("=")
        params[key.strip()] = value.strip()
    return pieces[0].lower(), params


def negotiate(accept: str | None) -> MediaChoice:
    """Pick the response form from an Accept header, honouring its order like kube-apiserver."""
    if not accept:
        return MediaChoice(None, True)
    for segment in accept.split(","):
        media, params = _params(segment)
        if media not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return MediaChoice(None, True)
        if (
            params["as"] == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in _TABLE_VERSIONS
        ):
            return MediaChoice(params["v"], True)
        # Other `as=` forms (aggregated discovery, PartialObjectMetadata) are declined; try the next option.
    return MediaChoice(None, False)
