"""The HTTP face of the simulator: one handler for every /api and /apis URL.

Order per request: authenticate, add the configured latency, count, decide an injected fault, and only then
read the body and run the operation — synchronously, with no await between reading state and writing it.
Responses are the JSON kube-apiserver sends (lists without per-item kind, Status bodies for errors), or a
Table when kubectl asks for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from app.sim.kubeapi import discovery, errors, eviction, paging, tables, watch
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.registry import selection
from app.sim.kubeapi.requestinfo import MediaChoice, RequestInfo, negotiate, parse_path, verb_of
from app.sim.kubeapi.resources import PODS, REVIEW_TYPES, TOKENREVIEWS, JsonObj, Ref, ResourceType
from app.sim.kubeapi.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from app.sim.kubeapi.state import STATE, SimState

_NOT_FOUND = ApiError(404, "NotFound", message="the server could not find the requested resource", details={})
_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def json_response(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        headers=dict(headers or {}),
        content_type="application/json",
    )


def error_response(error: ApiError) -> web.Response:
    return json_response(error.status(), status=error.code, headers=error.headers)


@dataclass(frozen=True)
class Call:
    """One resource request, parsed: what the operation functions below need."""

    state: SimState
    request: web.Request
    rt: ResourceType
    info: RequestInfo
    verb: str
    media: MediaChoice

    @property
    def ref(self) -> Ref:
        return Ref(self.rt, namespace=self.info.namespace, name=self.info.name)

    @property
    def dry_run(self) -> bool:
        return "All" in self.request.query.getall("dryRun", [])


async def handle_api(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        response = await _serve(request, state)
    except ApiError as error:
        response = error_response(error)
    state.counters.record_response(response.status)
    return response


async def _serve(request: web.Request, state: SimState) -> web.StreamResponse:
    _authenticate(request, state)
    latency = state.faults.config.latency_ms
    if latency > 0:
        await asyncio.sleep(latency / 1000)
    document = _discovery(request.path, state)
    if document is not None:
        return json_response(document)
    info = parse_path(request.path)
    rt = state.catalog.find(info.group, info.version, info.resource) if info else None
    if info is None or rt is None:
        raise _NOT_FOUND
    verb = verb_of(request.method, info, query=request.query)
    state.counters.record_request(verb, info.counted_resource)
    fault = state.faults.decide(verb, info.counted_resource)
    if fault is not None:
        state.counters.record_fault(fault)
        await _inject(fault, state)
    media = negotiate(request.headers.get("Accept"))
    if not media.acceptable:
        raise errors.not_acceptable(request.headers.get("Accept", ""))
    raw = await request.read() if request.can_read_body else b""
    call = Call(state=state, request=request, rt=rt, info=info, verb=verb, media=media)
    if verb == "watch":  # a stream, not one answer: it reads state between its writes (see `watch`)
        _check_scope(call)
        labels, fields = _selectors(call)
        return await watch.serve(call, state.watch, labels=labels, fields=fields)
    # From here on nothing awaits: the operation reads and writes state in one step.
    code, result = _dispatch(call, raw)
    response = json_response(result, status=code)
    body = response.body
    state.counters.record_bytes(verb, info.counted_resource, len(body) if isinstance(body, bytes) else 0)
    return response


def _discovery(path: str, state: SimState) -> JsonObj | None:
    """The discovery document for `path`, None when it names resources; unknown groups are 404."""
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return discovery.core_versions(state.server_address)
    if parts == ["apis"]:
        return discovery.group_list(state.catalog)
    if len(parts) == 2 and parts[0] == "apis":
        found = discovery.group(state.catalog, parts[1])
    elif (len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis"):
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        found = discovery.resource_list(state.catalog, group=group, version=version)
    else:
        return None
    if found is None:
        raise _NOT_FOUND
    return found


def _authenticate(request: web.Request, state: SimState) -> None:
    """A wrong token is 401; no credentials at all is the anonymous user, whom this cluster lets through.

    kubectl never sends a bearer token over plain HTTP, so anonymous access stands in for it here, as on a
    real server started with anonymous auth and permissive RBAC.
    """
    header = request.headers.get("Authorization")
    if state.token is None or header is None:
        return
    if header != f"Bearer {state.token}":
        raise ApiError(401, "Unauthorized", message="Unauthorized")


async def _inject(fault: str, state: SimState) -> None:
    cfg = state.faults.config
    if fault == "429":
        raise errors.too_many_requests(
            "Too many requests, please try again later. (injected by the Sickbay simulator)",
            retry_after_s=cfg.retry_after_s,
        )
    if fault == "500":
        raise errors.internal("injected by the Sickbay simulator")
    # A hang: hold the request until the client gives up (the handler is cancelled), the cap passes, or the
    # server stops. A released request gets the 504 kube-apiserver sends when its own timeout fires.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(state.closing.wait(), timeout=cfg.hang_s)
    raise errors.timeout("Timeout: request did not complete within the allotted timeout (injected)")


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw.strip():
        return None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as error:
        raise errors.bad_request(f"the body of the request could not be decoded: {error}") from error


def _check_scope(call: Call) -> None:
    rt, info, verb = call.rt, call.info, call.verb
    if not rt.namespaced and info.namespace:
        raise _NOT_FOUND
    if rt.namespaced and not info.namespace and verb not in ("list", "watch"):
        raise errors.method_not_allowed()
    allowed = {"": True, "status": rt.has_status, "eviction": rt is PODS}
    if not allowed.get(info.subresource, False):
        raise _NOT_FOUND
    if info.subresource == "eviction" and verb != "create":
        raise errors.method_not_allowed()
    if info.subresource == "status" and verb not in ("get", "update", "patch"):
        raise errors.method_not_allowed()
    if verb not in rt.verbs and info.subresource != "eviction":
        raise errors.method_not_allowed()


def _dispatch(call: Call, raw: bytes) -> tuple[int, JsonObj]:
    _check_scope(call)
    registry = call.state.registry
    content_type = call.request.content_type
    body = _parse_body(raw, content_type) if call.verb in _WRITE_VERBS else None
    subresource = call.info.subresource or None
    if call.rt in REVIEW_TYPES:  # create-only, never stored (the verb check above refused the others)
        reviews = call.state.reviews
        return 201, reviews.token_review(body) if call.rt is TOKENREVIEWS else reviews.access_review(body)
    if call.verb == "get":
        obj = registry.store.require(call.ref)
        return 200, _table(call, [obj]) if call.media.table_version else obj
    if call.verb == "list":
        return 200, _list(call)
    if call.verb == "create" and subresource == "eviction":
        return 201, _evict(call, body)
    if call.verb == "create":
        return 201, registry.create(call.rt, body, namespace=call.info.namespace, dry_run=call.dry_run)
    if call.verb == "update":
        return 200, registry.update(call.ref, body, subresource=subresource, dry_run=call.dry_run)
    if call.verb == "patch":
        patched = registry.patch(
            call.ref, body, content_type=content_type, subresource=subresource, dry_run=call.dry_run
        )
        return 200, patched
    options = _delete_options(body, call.request)
    if call.verb == "delete":
        return 200, registry.delete(call.ref, options=options, dry_run=call.dry_run)
    if call.verb == "deletecollection":
        labels, fields = _selectors(call)
        doomed = registry.list(call.rt, namespace=call.info.namespace or None, labels=labels, fields=fields)
        gone = [
            registry.delete(
                Ref(call.rt, namespace=o["metadata"].get("namespace", ""), name=o["metadata"]["name"]),
                options=options,
                dry_run=call.dry_run,
            )
            for o in doomed
        ]
        return 200, {
            "kind": f"{call.rt.kind}List",
            "apiVersion": call.rt.api_version,
            "metadata": {},
            "items": gone,
        }
    raise errors.method_not_allowed()


def _evict(call: Call, body: Any) -> JsonObj:
    counters = call.state.counters
    # A configured failure answers before the pod is read: authorization and admission both run before
    # EvictionREST looks the pod up, so even a missing pod gets the 403 or the webhook's 400.
    failure = call.state.faults.eviction_failure(call.info.namespace, call.info.name)
    if failure is not None:
        counters.record_eviction("failed")
        raise failure
    try:
        result = eviction.evict(call.state.registry, call.ref, body=body, dry_run=call.dry_run)
    except ApiError as error:
        if error.code == 429:
            counters.record_eviction("refused")
        raise
    counters.record_eviction("evicted")
    return result


def _delete_options(body: Any, request: web.Request) -> JsonObj:
    options: JsonObj = dict(body) if isinstance(body, dict) else {}
    grace = request.query.get("gracePeriodSeconds")
    if grace is not None and "gracePeriodSeconds" not in options:
        try:
            options["gracePeriodSeconds"] = int(grace)
        except ValueError as error:
            raise errors.bad_request(f"invalid gracePeriodSeconds {grace!r}") from error
    return options


def _selectors(call: Call) -> tuple[LabelSelector, FieldSelector]:
    rt, query = call.rt, call.request.query
    labels = parse_label_selector(query.get("labelSelector"))
    allowed = frozenset({"metadata.name", "metadata.namespace"}) | rt.field_labels
    resource = f"{rt.group_version if rt.group else '/' + rt.version}, Resource={rt.plural}"
    fields = parse_field_selector(query.get("fieldSelector"), allowed=allowed, resource=resource)
    return labels, fields


def _list(call: Call) -> JsonObj:
    labels, fields = _selectors(call)
    query = call.request.query
    limit = query.get("limit", "")
    page = paging.list_page(
        call.state.registry.store,
        call.rt,
        namespace=call.info.namespace or None,
        matches=selection(labels, fields),
        limit=int(limit) if limit.isdigit() and int(limit) > 0 else None,
        token=query.get("continue") or None,
        resource_version=query.get("resourceVersion"),
    )
    list_meta = page.list_meta()
    if call.media.table_version:
        return _table(
            call, page.items, list_meta={k: v for k, v in list_meta.items() if k != "resourceVersion"}
        )
    stripped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in page.items]
    return {
        "kind": f"{call.rt.kind}List",
        "apiVersion": call.rt.api_version,
        "metadata": list_meta,
        "items": stripped,
    }


def _table(call: Call, objects: list[JsonObj], *, list_meta: JsonObj | None = None) -> JsonObj:
    store = call.state.registry.store
    return tables.render_table(
        call.rt,
        objects,
        now=store.clock(),
        resource_version=store.resource_version,
        include_object=call.request.query.get("includeObject", "Metadata"),
        table_version=call.media.table_version or "v1",
        list_meta=list_meta,
    )
