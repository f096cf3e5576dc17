"""Seed documents: a compact YAML description of a GPU cluster, expanded into full objects and loaded.

Sections (all optional), expanded in this order:

    namespaces:  [training]                                  # any namespace used is created anyway
    nodes:       [{name: "gpu-{i:02d}", count: 8, gpus: 8, labels: {...}, unschedulable, taints, ready}]
    deployments: [{name, namespace, nodes: [..], gpus_per_pod, labels}]      # Deployment → ReplicaSet → pods
    daemonsets:  [{name, namespace, labels, nodes: all | [..]}]              # one pod per node
    jobsets:     [{name, namespace, nodes: [..], gpus_per_pod, replicated_job, labels}]  # JobSet → Jobs → pods
    jobs:        [{name, namespace, nodes: [..], gpus_per_pod, labels}]      # indexed Job → pods (and,
                 # with label kueue.x-k8s.io/queue-name, its admitted Kueue Workload)
    pods:        [{name, namespace, node, gpus, phase, ready, labels, owner: {kind, name}}]
    pdbs:        [{name, namespace, minAvailable | maxUnavailable, matchLabels | selector}]
    objects:     [<any full Kubernetes object of a served kind, taken as given>]

Every problem in a document is reported at once (SeedError), and nothing is loaded unless all of it can be.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from app.sim.kubeapi import builders, expansion
from app.sim.kubeapi.expansion import Expansion, SeedObject
from app.sim.kubeapi.registry import Registry
from app.sim.kubeapi.resources import NAMESPACES, JsonObj, Ref
from app.sim.kubeapi.store import Store
from app.sim.kubeapi.validation import check_object

BASE_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_EXPANDERS: tuple[tuple[str, Callable[[Expansion, Sequence[Any]], None]], ...] = (
    ("nodes", expansion.expand_nodes),
    ("deployments", expansion.expand_deployments),
    ("daemonsets", expansion.expand_daemonsets),
    ("jobsets", expansion.expand_jobsets),
    ("jobs", expansion.expand_jobs),
    ("pods", expansion.expand_pods),
    ("pdbs", expansion.expand_pdbs),
    ("objects", expansion.expand_objects),
)
SECTIONS = ("namespaces", *(name for name, _ in _EXPANDERS))


class SeedError(ValueError):
    """A seed document that cannot be expanded or loaded; the message lists every problem."""


def read_seed_file(path: str | Path) -> JsonObj:
    document = yaml.safe_load(Path(path).read_text())
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise SeedError(f"{path}: a seed document must be a mapping of sections")
    return document


def _section(document: Mapping[str, Any], name: str, *, problems: list[str]) -> list[Any]:
    value = document.get(name) or []
    if not isinstance(value, list):
        problems.append(f"{name}: must be a list")
        return []
    return value


def expand_seed(document: Mapping[str, Any], *, store: Store) -> list[SeedObject]:
    """Expand a seed document into objects in load order; raises SeedError listing every problem."""
    ex = Expansion(store)
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        ex.problems.append(f"unknown sections {unknown}; known: {list(SECTIONS)}")
    for name in _section(document, "namespaces", problems=ex.problems):
        ex.add(NAMESPACES, builders.namespace(str(name), uid=ex.uid(), now=ex.now))
    for name, expand in _EXPANDERS:
        try:
            expand(ex, _section(document, name, problems=ex.problems))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            ex.problems.append(f"{name}: {type(error).__name__}: {error}")
    if ex.problems:
        raise SeedError("invalid seed:\n  " + "\n  ".join(ex.problems))
    return _namespaces_first(ex)


def _namespaces_first(ex: Expansion) -> list[SeedObject]:
    """Namespaces lead — the declared ones and any that objects use but nobody declared."""
    declared = {o["metadata"]["name"] for rt, o in ex.out if rt is NAMESPACES}
    used = {o["metadata"].get("namespace", "default") for rt, o in ex.out if rt.namespaced}
    missing = sorted(n for n in used - declared if ex.store.get(Ref(NAMESPACES, name=n)) is None)
    extra = [(NAMESPACES, builders.namespace(n, uid=ex.uid(), now=ex.now)) for n in missing]
    spaces = [item for item in ex.out if item[0] is NAMESPACES]
    rest = [item for item in ex.out if item[0] is not NAMESPACES]
    return [*spaces, *extra, *rest]


def base_objects(store: Store) -> list[SeedObject]:
    """The namespaces every cluster has."""
    return [
        (NAMESPACES, builders.namespace(name, uid=store.new_uid(), now=store.now()))
        for name in BASE_NAMESPACES
        if store.get(Ref(NAMESPACES, name=name)) is None
    ]


def load_objects(registry: Registry, objects: Sequence[SeedObject]) -> int:
    """Insert expanded objects, all or none: clashes and invalid objects are reported before any is loaded."""
    problems = []
    seen: set[tuple[str, str, str]] = set()
    for rt, obj in objects:
        meta = obj.get("metadata") or {}
        ref = Ref(rt, namespace=str(meta.get("namespace", "default")), name=str(meta.get("name")))
        key = (rt.key(), *ref.key)
        if key in seen or registry.store.get(ref) is not None:
            problems.append(f"{rt.kind} {'/'.join(filter(None, ref.key))}: already exists")
        seen.add(key)
        causes = check_object(rt, obj, old=None)
        problems.extend(f"{rt.kind} {ref.name}: {field}: {message}" for _, field, message in causes)
    if problems:
        raise SeedError("could not load seed:\n  " + "\n  ".join(problems))
    for rt, obj in objects:
        registry.load(rt, obj)
    return len(objects)
