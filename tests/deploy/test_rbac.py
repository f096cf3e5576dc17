"""RBAC is least privilege and written down: the ClusterRole and Role of deploy/base/rbac.yaml grant
exactly the (apiGroup, resource, verb) triples of `app.kube.port.CALLS` (plus what a configured
`custom-resource` remediator creates), scoped as narrowly as the code allows.

A new call in the kube port without a grant fails here, and so does a grant no call needs. Reads the raw
manifest, so it runs without kubectl; test_kustomize.py checks the rendered overlays.
"""

from __future__ import annotations

import collections
import re

import yaml

from app.act import remediate
from app.config import rules as rules_config
from app.config.settings import Settings
from app.kube.custom_objects import plural_of
from app.kube.port import CALLS
from tests.deploy import support

RBAC = support.BASE / "rbac.yaml"
POLICY = support.ROOT / "rules" / "policy.yaml"
SETTINGS_FILE = support.BASE / "config" / "sickbay.yaml"
SERVICE_ACCOUNT = "sickbay"

# Calls granted only in Sickbay's own namespace (a Role), never cluster-wide, and why.
NAMESPACED = {
    # Leader election: the Lease lives in Sickbay's namespace.
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    # patch_pod_labels: only the leader labelling its own pod (app/service/runtime/leadership.py `_label_own_pod`).
    ("", "pods", "patch"),
    # pod_node: the node of an agent's pod (a DaemonSet in Sickbay's namespace), for a token that names no node.
    ("", "pods", "get"),
    # create_job, get_job: verification Jobs run in Sickbay's namespace (policy `verification.namespace`).
    ("batch", "jobs", "create"),
    ("batch", "jobs", "get"),
}


def _objects() -> list[support.Obj]:
    return support.load_all(RBAC)


def _custom_resource_grants() -> set[tuple[str, str, str]]:
    """`create` on the group and plural of every custom-resource remediator's template in the policy."""
    policy = rules_config.load_policy(POLICY)
    grants = set()
    for remediator in policy.remediation.values():
        if remediator.kind != "custom-resource":
            continue
        manifest = remediate.render(remediator.template or "", node="n", action="a", reason="r")
        group, _, _version = str(manifest["apiVersion"]).rpartition("/")
        grants.add((group, plural_of(str(manifest["kind"]), group, {}), "create"))
    return grants


def expected() -> set[tuple[str, str, str]]:
    return set(CALLS) | _custom_resource_grants()


def granted(objects: list[support.Obj]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for group, resource, verb, _ in support.rbac_grants(objects)}


def test_grants_are_exactly_the_calls_of_the_kube_port() -> None:
    grants = granted(_objects())
    missing = expected() - grants
    extra = grants - expected()
    assert not missing, (
        f"calls in app.kube.port.CALLS that deploy/base/rbac.yaml does not grant: {sorted(missing)}"
    )
    assert not extra, (
        f"grants in deploy/base/rbac.yaml that no call in app.kube.port.CALLS needs: {sorted(extra)}"
    )


def test_no_grant_is_repeated() -> None:
    counts = collections.Counter(
        (obj["kind"], group, resource, verb) for group, resource, verb, obj in support.rbac_grants(_objects())
    )
    assert [key for key, n in counts.items() if n > 1] == []


def test_no_wildcards_and_no_non_resource_urls() -> None:
    for obj in _objects():
        for rule in obj.get("rules") or []:
            assert "nonResourceURLs" not in rule, rule
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (
                    f"wildcard in {obj['kind']} {obj['metadata']['name']}: {rule}"
                )


def test_namespace_scoped_calls_are_granted_by_the_role_only() -> None:
    scope = {
        (group, resource, verb): obj["kind"] for group, resource, verb, obj in support.rbac_grants(_objects())
    }
    for call in CALLS:
        want = "Role" if call in NAMESPACED else "ClusterRole"
        assert scope.get(call) == want, f"{call} should be granted by a {want}, is by {scope.get(call)}"
    role = support.one(_objects(), "Role")
    assert role["metadata"]["namespace"] == support.NAMESPACE


def test_the_lease_rule_names_the_configured_lease() -> None:
    configured = yaml.safe_load(SETTINGS_FILE.read_text(encoding="utf-8")).get("leader", {})
    lease_name = configured.get("lease_name", Settings.model_fields["leader"].default.lease_name)
    role = support.one(_objects(), "Role")
    for rule in role["rules"]:
        if "leases" not in rule["resources"]:
            continue
        if "create" in rule["verbs"]:
            # The authoriser does not know the name of an object being created.
            assert "resourceNames" not in rule, "resourceNames on `create` would deny it"
        else:
            assert rule.get("resourceNames") == [lease_name], rule


def test_bindings_give_the_roles_to_sickbays_service_account() -> None:
    objects = _objects()
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = support.one(objects, binding_kind)
        role = support.one(objects, role_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": support.NAMESPACE}
        ]
    deployment = support.one(support.load_all(support.BASE / "deployment.yaml"), "Deployment")
    assert support.pod_spec(deployment)["serviceAccountName"] == SERVICE_ACCOUNT


def test_the_agents_account_has_no_binding_and_no_token() -> None:
    objects = _objects()
    agent = support.one(objects, "ServiceAccount", "sickbay-agent")
    assert agent["automountServiceAccountToken"] is False
    bound = {s["name"] for b in objects if b["kind"].endswith("Binding") for s in b["subjects"]}
    assert "sickbay-agent" not in bound
    daemonset = support.one(support.load_all(support.BASE / "agent-daemonset.yaml"), "DaemonSet")
    assert support.pod_spec(daemonset)["serviceAccountName"] == "sickbay-agent"
    assert support.pod_spec(daemonset)["automountServiceAccountToken"] is False


def test_every_rule_says_which_call_needs_it() -> None:
    """Each rule of the manifest is preceded by a comment naming the call(s) that need it."""
    lines = RBAC.read_text(encoding="utf-8").splitlines()
    port_calls = set(re.findall(r"async def (\w+)\(", (support.ROOT / "app/kube/port.py").read_text()))
    for number, line in enumerate(lines):
        if not re.match(r"^  - apiGroups:", line):
            continue
        comment = []
        for previous in reversed(lines[:number]):
            if not previous.strip().startswith("#"):
                break
            comment.append(previous)
        text = " ".join(comment)
        assert comment, f"rbac.yaml line {number + 1}: a rule without a comment saying which call needs it"
        assert any(call in text for call in port_calls) or "election" in text.lower(), (
            f"rbac.yaml line {number + 1}: the comment names no call of app/kube/port.py: {text}"
        )
