"""Kubernetes write semantics over the store: create, update, patch and delete as kube-apiserver does them.

What lives here is exactly what a fake tends to get wrong: resourceVersion preconditions (409), server-owned
metadata a client cannot overwrite, a main endpoint that ignores status and a /status endpoint that keeps
the spec (and what each kind's status strategy resets), MicroTime fields that must decode, generation
bumps, no-op writes that keep the resourceVersion, finalizers and graceful pod deletion, and the disruption
controller told of every write that can change a budget, and the Job controller (`jobs`) of every Job
created. Every public method is synchronous, so each
request's read-modify-write is atomic on the event loop. How a body is decoded and defaulted is
`bodies`', what a delete's options and grace period mean `deletion`'s; this module reads and writes the store.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

from app.sim.kubeapi import controllers, deletion, errors, jobs, kueue, microtime, strategies
from app.sim.kubeapi.bodies import check_names, decoded, default_for_create, typed_body
from app.sim.kubeapi.patches import apply_json_patch, apply_merge_patch
from app.sim.kubeapi.patchmeta import rules_for
from app.sim.kubeapi.resources import JOBS, NAMESPACES, PODS, JsonObj, Ref, ResourceType
from app.sim.kubeapi.selectors import FieldSelector, LabelSelector, field_value
from app.sim.kubeapi.store import Store, parse_time
from app.sim.kubeapi.strategic import apply_strategic_merge_patch
from app.sim.kubeapi.validation import check_object

Scheduler = controllers.Scheduler

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


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
        self.jobs = jobs.JobController(
            store, create_pod=lambda body, ns: self.create(PODS, body, namespace=ns), schedule=schedule
        )
        self.kueue = kueue.KueueController(store, delete_pod=self.delete, schedule=schedule)

    @property
    def _kubelet(self) -> bool:
        """Whether a simulated kubelet confirms graceful pod deletions (else pods go at once)."""
        return self.grace_scale > 0 and self._schedule is not None

    def list(
        self, rt: ResourceType, *, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> list[JsonObj]:
        matches = selection(labels, fields)
        return [o for o in self.store.items(rt, namespace=namespace) if matches is None or matches(o)]

    # -- create --------------------------------------------------------------------------------------------

    def create(self, rt: ResourceType, body: Any, *, namespace: str, dry_run: bool = False) -> JsonObj:
        obj = decoded(rt, typed_body(rt, body))
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            check_names(Ref(rt, namespace=namespace, name=meta.get("name", "")), meta)
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
        default_for_create(rt, obj)
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
        if rt is JOBS:
            self.jobs.created(stored)  # answered as created: the controller's status comes after
        return stored

    def load(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        """Insert a seed object as given (status included), filling only the server-owned fields it lacks."""
        obj = copy.deepcopy(obj)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        obj = decoded(rt, obj)
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
        self.kueue.sync_now(rt, meta.get("namespace", ""))  # a seeded Workload is admitted at once
        return stored

    # -- update and patch ----------------------------------------------------------------------------------

    def update(
        self, ref: Ref, body: Any, *, subresource: str | None = None, dry_run: bool = False
    ) -> JsonObj:
        current = self.store.require(ref)
        proposed = decoded(ref.rt, typed_body(ref.rt, body))
        check_names(ref, proposed.get("metadata") or {})
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
        check_names(ref, meta)
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
            and not deletion.grace_pending(current)
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
        deletion.check_preconditions(rt, current, preconditions=(options or {}).get("preconditions") or {})
        returns_object = rt in (PODS, NAMESPACES)
        if dry_run:
            return current if returns_object else deletion.deleted_status(rt, current)
        meta = current["metadata"]
        grace = deletion.grace_seconds(rt, current, options=options or {}, kubelet=self._kubelet)
        if grace is None:  # a graceful deletion is already pending and this one does not shorten it
            return current
        marked = copy.deepcopy(current)
        if rt is PODS and grace > 0:
            grace = deletion.mark_terminating(marked, grace=grace, now=self.store.clock())
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
            return gone if returns_object else deletion.deleted_status(rt, gone)
        stored = self.store.put(rt, marked) if marked != current else current
        self._after_write(rt, ref.namespace)
        if rt is PODS and grace > 0:
            self._kubelet_confirms_later(ref, uid=str(meta["uid"]), grace=grace)
        return stored if returns_object else deletion.deleted_status(rt, stored)

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

    def _after_write(self, rt: ResourceType, namespace: str) -> None:
        self.disruption.observe(rt, namespace)
        self.kueue.observe(rt, namespace)


def selection(labels: LabelSelector, fields: FieldSelector) -> Callable[[JsonObj], bool] | None:
    """The predicate a list applies to each object; None when neither selector selects anything out."""
    if labels.empty and not fields.terms:
        return None

    def matches(obj: JsonObj) -> bool:
        return labels.matches(obj["metadata"].get("labels")) and fields.matches(
            lambda label: field_value(obj, label)
        )

    return matches
