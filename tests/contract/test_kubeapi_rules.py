"""The simulator's pure rules, table-driven: strategic merge directives, selectors, budget arithmetic.

These pin behaviours the API-level tests reach only indirectly (directives kubectl sends, selector edge
cases, the disruption controller's rounding), without a server.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.sim.kubeapi.disruption import compute_status
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.patches import apply_json_patch, apply_merge_patch
from app.sim.kubeapi.patchmeta import rules_for
from app.sim.kubeapi.selectors import parse_label_selector, selector_from_spec
from app.sim.kubeapi.strategic import apply_strategic_merge_patch

NODE_RULES = rules_for("Node")
POD_RULES = rules_for("Pod")
assert NODE_RULES is not None
assert POD_RULES is not None


def conditions(*types: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": "True"} for t in types]}}


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        # merge by key, new keys appended
        (
            conditions("A", "B"),
            {"status": {"conditions": [{"type": "C", "status": "True"}]}},
            conditions("A", "B", "C"),
        ),
        # $setElementOrder reorders the merged list (kubectl sends it)
        (
            conditions("A", "B"),
            {"status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}]}},
            conditions("B", "A"),
        ),
        # $patch: replace on a map replaces it whole
        ({"spec": {"a": 1, "b": 2}}, {"spec": {"$patch": "replace", "c": 3}}, {"spec": {"c": 3}}),
        # $patch: delete on a map removes it
        ({"spec": {"a": 1}, "x": 1}, {"spec": {"$patch": "delete"}}, {"x": 1}),
        # finalizers merge as a set; $deleteFromPrimitiveList removes
        (
            {"metadata": {"finalizers": ["a", "b"]}},
            {"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}},
            {"metadata": {"finalizers": ["a", "c"]}},
        ),
        # lists without a merge key are replaced
        (
            {"spec": {"taints": [{"key": "a"}]}},
            {"spec": {"taints": [{"key": "b"}]}},
            {"spec": {"taints": [{"key": "b"}]}},
        ),
        # $retainKeys keeps only the named keys
        (
            {"spec": {"a": 1, "b": 2}},
            {"spec": {"$retainKeys": ["a", "c"], "c": 3}},
            {"spec": {"a": 1, "c": 3}},
        ),
    ],
)
def test_strategic_merge_on_nodes(
    original: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert apply_strategic_merge_patch(original, patch, rules=NODE_RULES) == expected


def test_strategic_merge_nested_container_lists() -> None:
    pod = {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}], "image": "x"}]}}
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}
    merged = apply_strategic_merge_patch(pod, patch, rules=POD_RULES)
    assert merged["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert merged["spec"]["containers"][0]["image"] == "x"


def test_strategic_merge_needs_the_merge_key() -> None:
    with pytest.raises(ApiError) as caught:
        apply_strategic_merge_patch(
            conditions("A"), {"status": {"conditions": [{"status": "False"}]}}, rules=NODE_RULES
        )
    assert caught.value.code == 422


def test_patches_never_modify_their_input() -> None:
    original = conditions("A")
    snapshot = repr(original)
    apply_strategic_merge_patch(
        original, {"status": {"conditions": [{"type": "A", "status": "False"}]}}, rules=NODE_RULES
    )
    apply_merge_patch(original, {"status": {"conditions": None}})
    apply_json_patch(original, [{"op": "remove", "path": "/status/conditions/0"}])
    assert repr(original) == snapshot


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3]}),
        ([{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2]}),
        ([{"op": "replace", "path": "/a/1", "value": 9}], {"a": [1, 9]}),
        ([{"op": "move", "from": "/a/0", "path": "/b"}], {"a": [2], "b": 1}),
        ([{"op": "copy", "from": "/a", "path": "/b"}], {"a": [1, 2], "b": [1, 2]}),
    ],
)
def test_json_patch_operations(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert apply_json_patch({"a": [1, 2]}, ops) == expected


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("a=", {"a": ""}, True),
        ("a in (x, )", {"a": ""}, True),
        ("a notin (x)", {}, True),
        ("a<3", {"a": "2"}, True),
        ("a<3", {"a": "x"}, False),
        ("example.com/a=b,!c", {"example.com/a": "b"}, True),
        ("", {"anything": "goes"}, True),
    ],
)
def test_label_selector_edges(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is matches


@pytest.mark.parametrize("selector", ["a in", "a in (x", "a=b c", "-a=b", "a in ()", "a=b=c"])
def test_malformed_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_label_selector(selector)
    assert caught.value.code == 400


def test_pdb_selector_semantics() -> None:
    assert not selector_from_spec(None).matches({"a": "b"})  # a null selector selects nothing
    assert selector_from_spec({}).matches({"a": "b"})  # policy/v1: an empty one selects everything
    expressions = {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}
    assert selector_from_spec(expressions).matches({"a": "y"})


def _pod(
    name: str, *, ready: bool = True, deleting: bool = False, owner_uid: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": "x"}}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    if owner_uid:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": owner_uid, "controller": True}]
    return {
        "metadata": meta,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.mark.parametrize(
    ("spec", "pods", "scale", "expected"),
    [
        # minAvailable as an integer counts selected pods, healthy or not
        ({"minAvailable": 2}, [_pod("a"), _pod("b"), _pod("c", ready=False)], None, (3, 2, 2, 0)),
        # a deleting pod is not healthy
        ({"minAvailable": 1}, [_pod("a"), _pod("b", deleting=True)], None, (2, 1, 1, 0)),
        # percentages round up against the controller's scale
        ({"minAvailable": "50%"}, [_pod("a", owner_uid="u"), _pod("b", owner_uid="u")], 3, (3, 2, 2, 0)),
        ({"maxUnavailable": "34%"}, [_pod(n, owner_uid="u") for n in "abc"], 3, (3, 1, 3, 2)),
    ],
)
def test_disruption_arithmetic(
    spec: dict[str, Any], pods: list[dict[str, Any]], scale: int | None, expected: tuple[int, int, int, int]
) -> None:
    pdb = {
        "metadata": {"name": "b", "namespace": "n", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, **spec},
    }
    status = compute_status(pdb, pods, scale_of=lambda ref, ns: scale, now=datetime(2025, 1, 1, tzinfo=UTC))
    got = (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    )
    assert got == expected
