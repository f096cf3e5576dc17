"""Kubernetes write semantics over the store: create, update, patch and delete as kube-apiserver does them.

What lives here is exactly what a fake tends to get wrong: resourceVersion preconditions (409), server-owned
metadata a client cannot overwrite, a main endpoint that ignores status and a /status endpoint that keeps
the spec (and what each kind's status strategy resets), MicroTime fields that must decode, generation
bumps, no-op writes that keep the resourceVersion, finalizers and graceful pod deletion, and the disruption
controller told of every write that can change a budget. Every public method is synchronous, so each
request's read-modify-write is atomic on the event loop.
"""

from __future__ import annotations

import contextlib
import copy
from datetime import timedelta
from typing import Any

from app.sim.kubeapi import controllers, disruption, errors, microtime, pods, strategies
from app.sim.kubeapi.patches import apply_json_patch, apply_merge_patch
from app.sim.kubeapi.patchmeta import rules_for
from app.sim.kubeapi.resources import NAMESPACES, PDBS, PODS, JsonObj, Ref, ResourceType
from app.sim.kubeapi.selectors import FieldSelector, LabelSelector
from app.sim.kubeapi.store import Store, format_time, parse_time
from app.sim.kubeapi.strategic import apply_strategic_merge_patch
from app.sim.kubeapi.validation import check_object

Scheduler = controllers.Scheduler

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_NODE_INFO_KEYS = (
    "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture",
)  # fmt: skip


def field_value(obj: JsonObj, label: str) -> str:
    """The string a field selector compares against; absent booleans read "false" as in Kubernetes."""
    if label == "source":
        return str((obj.get("source") or {}).get("component", ""))
    node: Any = obj
    for part in label.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool) or label in ("spec.unschedulable", "spec.hostNetwork"):
        return "true" if node else "false"
    return "" if node is None else str(node)


def _typed_body(rt: ResourceType, body: Any) -> JsonObj:
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


def _decoded(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """The body as the server's decoder leaves it, or 400 as transformDecodeError words a decoding failure
    (k8s.io/apiserver/pkg/endpoints/handlers/rest.go): only MicroTime fields can fail to decode here."""
    try:
        microtime.normalise(rt, obj)
    except microtime.MicroTimeError as error:
        raise errors.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}'
        ) from error
    return obj


def _default_for_create(rt: ResourceType, obj: JsonObj) -> None:
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


def _check_names(ref: Ref, meta: JsonObj) -> None:
    if meta.get("name") and meta["name"] != ref.name:
        raise errors.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({ref.name})"
        )
    if ref.rt.namespaced and meta.get("namespace") and meta["namespace"] != ref.namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


class Registry:
    def __init__(
        self,
        store: Store,
        *,
        grace_scale: float = 0.0,
        schedule: Scheduler | None = None,
        disruption_sync_s: float = 0.0,
    ) -> None:
        """`grace_scale`: simulated seconds a terminating pod takes per second of its grace period (0.01 turns
        the default 30 s into 0.3 s); 0 removes deleted pods at once, as if no kubelet had to stop anything."""
        self.store = store
        self.grace_scale = grace_scale
        self._schedule = schedule
        self.disruption = controllers.DisruptionController(
            store, sync_delay_s=disruption_sync_s, schedule=schedule
        )

    def list(
        self, rt: ResourceType, *, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> list[JsonObj]:
        found = []
        for obj in self.store.items(rt, namespace=namespace):

            def read(label: str, obj: JsonObj = obj) -> str:
                return field_value(obj, label)

            if labels.matches(obj["metadata"].get("labels")) and fields.matches(read):
                found.append(obj)
        return found

    # -- create --------------------------------------------------------------------------------------------

    def create(self, rt: ResourceType, body: Any, *, namespace: str, dry_run: bool = False) -> JsonObj:
        obj = _decoded(rt, _typed_body(rt, body))
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            _check_names(Ref(rt, namespace=namespace, name=meta.get("name", "")), meta)
            meta["namespace"] = namespace
            if self.store.get(Ref(NAMESPACES, name=namespace)) is None:
                raise errors.not_found(NAMESPACES, namespace)
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.internal("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self.store.random_suffix()}"
        for key in strategies.SERVER_META:
            meta.pop(key, None)
        _default_for_create(rt, obj)
        causes = check_object(rt, obj, old=None)
        if causes:
            raise errors.invalid(rt, str(meta.get("name") or ""), causes=causes)
        if self.store.get(Ref(rt, namespace=namespace, name=meta["name"])) is not None:
            raise errors.already_exists(rt, meta["name"])
        meta["uid"] = self.store.new_uid()
        meta["creationTimestamp"] = self.store.now()
        if rt.has_generation:
            meta["generation"] = 1
        if dry_run:
            return obj
        stored = self.store.put(rt, obj)
        self._after_write(rt, namespace)
        return stored

    def load(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        """Insert a seed object as given (status included), filling only the server-owned fields it lacks."""
        obj = copy.deepcopy(obj)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        obj = _decoded(rt, obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", self.store.new_uid())
        meta.setdefault("creationTimestamp", self.store.now())
        if rt.has_generation:
            meta.setdefault("generation", 1)
        causes = check_object(rt, obj, old=None)
        if causes:
            raise errors.invalid(rt, str(meta.get("name") or ""), causes=causes)
        if self.store.get(Ref(rt, namespace=meta.get("namespace", ""), name=meta["name"])) is not None:
            raise errors.already_exists(rt, meta["name"])
        stored = self.store.put(rt, obj)
        self.disruption.sync_now(rt, meta.get("namespace", ""))
        return stored

    # -- update and patch ----------------------------------------------------------------------------------

    def update(
        self, ref: Ref, body: Any, *, subresource: str | None = None, dry_run: bool = False
    ) -> JsonObj:
        current = self.store.require(ref)
        proposed = _decoded(ref.rt, _typed_body(ref.rt, body))
        _check_names(ref, proposed.get("metadata") or {})
        return self._commit(ref.rt, current, proposed=proposed, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        ref: Ref,
        patch: Any,
        *,
        content_type: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JsonObj:
        rt = ref.rt
        current = self.store.require(ref)
        if content_type == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise errors.bad_request("merge patch must be a JSON object")
            patched = apply_merge_patch(current, patch)
        elif content_type == JSON_PATCH:
            patched = apply_json_patch(current, patch)
        elif content_type == STRATEGIC_PATCH:
            rules = rules_for(rt.kind) if rt.builtin else None
            if rules is None:  # custom resources have no Go struct tags to merge by
                accepted = [JSON_PATCH, MERGE_PATCH, "application/apply-patch+yaml"]
                raise errors.unsupported_media_type(content_type, accepted)
            patched = apply_strategic_merge_patch(current, patch, rules=rules)
        else:
            raise errors.unsupported_media_type(content_type, [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH])
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch must produce an object")
        try:
            microtime.normalise(rt, patched)
        except microtime.MicroTimeError as error:
            # The patch handlers decode the patched object into its Go type and answer a failure as
            # NewInvalid(schema.GroupKind{}, "", [field.Invalid("patch", …)]) (endpoints/handlers/patch.go).
            raise errors.invalid_patch(patched, why=str(error)) from error
        meta: JsonObj = patched["metadata"] if isinstance(patched.get("metadata"), dict) else {}
        _check_names(ref, meta)
        if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
            why = f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {current['metadata']['uid']}"
            raise errors.conflict(rt, ref.name, why=why)
        return self._commit(rt, current, proposed=patched, subresource=subresource, dry_run=dry_run)

    def _commit(
        self, rt: ResourceType, current: JsonObj, *, proposed: JsonObj, subresource: str | None, dry_run: bool
    ) -> JsonObj:
        cur_meta = current["metadata"]
        name = cur_meta["name"]
        wanted_rv = (proposed.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != cur_meta["resourceVersion"]:
            raise errors.conflict(rt, name)
        new = strategies.merge_for_update(rt, current, proposed, status_only=subresource == "status")
        causes = check_object(rt, new, old=current)
        if causes:
            raise errors.invalid(rt, name, causes=causes)
        if new == current:
            return current  # a no-op write keeps the resourceVersion, as etcd3's GuaranteedUpdate does
        if dry_run:
            return new
        ref = Ref(rt, namespace=cur_meta.get("namespace", ""), name=name)
        if (
            cur_meta.get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not self._grace_pending(current)
        ):
            self._remove(ref)  # the last finalizer is gone: the pending deletion completes
            return new
        stored = self.store.put(rt, new)
        self._after_write(rt, ref.namespace)
        return stored

    # -- delete --------------------------------------------------------------------------------------------

    def delete(self, ref: Ref, *, options: JsonObj | None = None, dry_run: bool = False) -> JsonObj:
        """Delete and return the response body: the object for pods and namespaces, a Success Status otherwise.

        A pod bound to a node is deleted gracefully, as kube-apiserver's generic store does (rest.BeforeDelete
        in staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go, Store.Delete in .../generic/registry/
        store.go): it gets `deletionTimestamp` = now + its grace period and `deletionGracePeriodSeconds`, stays
        (Terminating) and is only removed when the kubelet confirms with a grace-0 delete. A second delete
        may only shorten a pending grace period; one that does not is answered with the object, unchanged.
        """
        rt = ref.rt
        current = self.store.require(ref)
        self.check_preconditions(rt, current, preconditions=(options or {}).get("preconditions") or {})
        returns_object = rt in (PODS, NAMESPACES)
        if dry_run:
            return current if returns_object else self._deleted_status(rt, current)
        meta = current["metadata"]
        grace = self._grace_seconds(rt, current, options=options or {})
        if grace is None:  # a graceful deletion is already pending and this one does not shorten it
            return current
        marked = copy.deepcopy(current)
        if rt is PODS and grace > 0:
            grace = self._mark_terminating(marked, grace=grace)
        elif meta.get("finalizers"):
            # store.go markAsDeleting: the deletion waits for the finalizers, with no grace period left, and
            # a deletionTimestamp still in the future moves to now.
            stamped = meta.get("deletionTimestamp")
            if not stamped or parse_time(stamped) > self.store.clock():
                marked["metadata"]["deletionTimestamp"] = self.store.now()
            if rt is PODS:
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
        else:
            gone = self._remove(ref)
            return gone if returns_object else self._deleted_status(rt, gone)
        stored = self.store.put(rt, marked) if marked != current else current
        self._after_write(rt, ref.namespace)
        if rt is PODS and grace > 0:
            self._kubelet_confirms_later(ref, uid=str(meta["uid"]), grace=grace)
        return stored if returns_object else self._deleted_status(rt, stored)

    def _remove(self, ref: Ref) -> JsonObj:
        gone = copy.deepcopy(self.store.remove(ref))
        gone["metadata"].setdefault("deletionTimestamp", self.store.now())
        if ref.rt is NAMESPACES:  # the namespace controller's job, done at once
            for other in self.store.catalog:
                if other.namespaced:
                    for obj in self.store.items(other, namespace=ref.name):
                        self.store.remove(Ref(other, namespace=ref.name, name=obj["metadata"]["name"]))
        self._after_write(ref.rt, ref.namespace)
        return gone

    def check_preconditions(self, rt: ResourceType, current: JsonObj, *, preconditions: JsonObj) -> None:
        """A stale UID or resourceVersion in DeleteOptions is 409 Conflict, worded as rest.BeforeDelete words it.

        kube-apiserver checks them in k8s.io/apiserver/pkg/registry/rest/delete.go (BeforeDelete) before it
        touches storage, and EvictionREST's addConditionAndDeletePod repeats the same text. The storage
        layer's own "Precondition failed: UID in precondition: …" (storage.Preconditions.Check) is reached
        only when the object changes between that check and the delete, which cannot happen here.
        """
        meta = current["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            why = (
                f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record "
                f"({meta['uid']}). The object might have been deleted and then recreated"
            )
            raise errors.conflict(rt, meta["name"], why=why, by_kind=True)
        if (
            preconditions.get("resourceVersion")
            and preconditions["resourceVersion"] != meta["resourceVersion"]
        ):
            why = (
                f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) does not match "
                f"the ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified"
            )
            raise errors.conflict(rt, meta["name"], why=why, by_kind=True)

    def _grace_seconds(self, rt: ResourceType, current: JsonObj, *, options: JsonObj) -> int | None:
        """The grace period this delete leaves a pod; 0 deletes now; None: a longer one is already pending.

        podStrategy.CheckGracefulDelete (pkg/registry/core/pod/strategy.go): the request's
        `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`; 0 for a pod not bound to a
        node or already Succeeded/Failed (no kubelet has anything to stop); a negative value becomes 1.
        With `grace_scale` 0 there is no kubelet to wait for and every pod goes at once.
        """
        if rt is not PODS or self.grace_scale <= 0 or self._schedule is None:
            return 0
        meta = current["metadata"]
        requested = options.get("gracePeriodSeconds")
        if meta.get("deletionTimestamp"):
            pending = meta.get("deletionGracePeriodSeconds")
            if not pending:  # nothing left to wait for: finish the deletion (store.go's recovery path)
                return 0
            if requested is None or int(requested) >= int(pending):
                return None
            return max(0, int(requested))
        spec = current.get("spec") or {}
        if requested is None:
            requested = spec.get("terminationGracePeriodSeconds", 0)
        if not spec.get("nodeName") or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        period = int(requested)
        return 1 if period < 0 else period

    def _mark_terminating(self, pod: JsonObj, *, grace: int) -> int:
        """Stamp (or shorten) a graceful deletion; returns the grace period it got.

        `deletionTimestamp` is when the kubelet must be done. Shortening moves it back by the difference but
        never into the past: past it, a nonzero grace period becomes 1 s (rest/delete.go, BeforeDelete).
        """
        meta = pod["metadata"]
        now = self.store.clock()
        deadline = now + timedelta(seconds=grace)
        if meta.get("deletionTimestamp"):
            requested_at = parse_time(meta["deletionTimestamp"]) - timedelta(
                seconds=int(meta["deletionGracePeriodSeconds"])
            )
            deadline = requested_at + timedelta(seconds=grace)
            if deadline < now:
                deadline, grace = now, 1
        meta["deletionTimestamp"] = format_time(deadline)
        meta["deletionGracePeriodSeconds"] = grace
        return grace

    def _grace_pending(self, current: JsonObj) -> bool:
        return current.get("kind") == "Pod" and bool(current["metadata"].get("deletionGracePeriodSeconds"))

    def _kubelet_confirms_later(self, ref: Ref, *, uid: str, grace: int) -> None:
        """The simulated kubelet: it stops the containers within the grace period (`grace * grace_scale` here,
        the whole period: a GPU job spends it on its checkpoint), then deletes the pod with
        gracePeriodSeconds=0 and its UID as a precondition, so a pod recreated under the same name is never
        touched (pkg/kubelet/status/status_manager.go, syncPod). A shortened grace period gets a timer of
        its own; the earlier, longer one then finds the pod gone."""

        def confirm() -> None:
            with contextlib.suppress(errors.ApiError):  # gone already, or a new pod under the same name
                self.delete(ref, options={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

        assert self._schedule is not None
        self._schedule(grace * self.grace_scale, confirm)

    def _deleted_status(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        details: JsonObj = {"name": obj["metadata"]["name"]}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = obj["metadata"]["uid"]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _after_write(self, rt: ResourceType, namespace: str) -> None:
        self.disruption.observe(rt, namespace)
