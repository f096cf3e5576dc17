"""Every overlay of deploy/ renders with `kubectl kustomize`, and what it renders is right.

- Built-in kinds are validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: an
  unknown field fails) for the oldest and newest Kubernetes versions we support. The Prometheus Operator's
  kinds (ServiceMonitor, PodMonitor, PrometheusRule, AlertmanagerConfig) are not in those schemas and are
  checked structurally here instead, and against what they point at.
- The PrometheusRule's groups pass `promtool check rules`; the AlertmanagerConfig, turned back into an
  alertmanager.yml, passes `amtool check-config` and routes every class exactly like
  deploy/alertmanager/sickbay-receiver.yaml.
- Each overlay's Deployment is a configuration `sickbay serve` accepts (its env and mounted ConfigMaps,
  loaded with the service's own settings loader); the dry-run overlay can write nothing.

Skips (with the reason) when kubectl, kubernetes-validate, promtool or amtool is missing.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import rules as rules_config
from tests.deploy import support
from tests.deploy.test_rbac import expected as expected_grants

try:
    import kubernetes_validate as kv
except ImportError:  # not installed: the schema test skips, saying so
    kv = None

EXPECTED_OVERLAYS = {"default", "dry-run", "prometheus-operator", "persistent-journal", "tls"}
SINGLE_REPLICA = {"dry-run", "persistent-journal"}
# Oldest and newest Kubernetes minor versions the manifests are validated against.
K8S_VERSIONS = ("1.29.0", "1.37.0")
READ_VERBS = frozenset({"get", "list", "watch"})
LEADER_LABEL = "sickbay.io/leader"
DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")

OPERATOR_API = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PodMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "AlertmanagerConfig": "monitoring.coreos.com/v1alpha1",
}
OPERATOR_SPEC_KEYS = {
    "ServiceMonitor": {
        "selector",
        "endpoints",
        "namespaceSelector",
        "jobLabel",
        "targetLabels",
        "sampleLimit",
    },
    "PodMonitor": {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"},
    "PrometheusRule": {"groups"},
    "AlertmanagerConfig": {"route", "receivers", "inhibitRules", "muteTimeIntervals"},
}
ENDPOINT_KEYS = {
    "port",
    "path",
    "interval",
    "scrapeTimeout",
    "scheme",
    "honorLabels",
    "relabelings",
    "metricRelabelings",
}
RELABEL_KEYS = {"action", "sourceLabels", "targetLabel", "replacement", "regex", "separator", "modulus"}
RELABEL_ACTIONS = {"replace", "keep", "drop", "labeldrop", "labelkeep", "labelmap", "hashmod", "lowercase"}
AMC_ROUTE_KEYS = {
    "receiver",
    "matchers",
    "groupBy",
    "groupWait",
    "groupInterval",
    "repeatInterval",
    "continue",
    "routes",
}
AMC_WEBHOOK_KEYS = {"url", "urlSecret", "sendResolved", "maxAlerts", "httpConfig"}
CLASSES = (
    "ignore",
    "restart-workload",
    "reset-gpu",
    "reboot-node",
    "replace",
    "depends",
    "transient",
    "driver-mismatch",
)


def _deployment(objects: list[support.Obj]) -> support.Obj:
    return support.one(objects, "Deployment", "sickbay")


def _rendered_configmaps(objects: list[support.Obj]) -> dict[str, dict[str, str]]:
    return {obj["metadata"]["name"]: obj.get("data", {}) for obj in support.of_kind(objects, "ConfigMap")}


# --------------------------------------------------------------------------------------------- all overlays


def test_every_overlay_is_covered() -> None:
    assert set(support.OVERLAY_NAMES) == EXPECTED_OVERLAYS, "a new overlay: add what it must guarantee here"


@functools.cache
def _schema_problem(text: str, version: str) -> str | None:
    """Why the object (as JSON text) is invalid for a Kubernetes version; None when it is valid.
    Cached: the overlays share most objects, and each validation loads the schemas again."""
    assert kv is not None
    obj = json.loads(text)
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as exc:
        return f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {exc}"
    except kv.SchemaNotFoundError:
        return f"{obj['kind']} {obj['apiVersion']}: no schema for Kubernetes {version}"
    return None


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_objects_validate_against_the_kubernetes_schemas(overlay: str) -> None:
    if kv is None:
        pytest.skip("kubernetes-validate is not installed: pip install kubernetes-validate (dev extra)")
    problems = [
        problem
        for obj in support.render(overlay)
        # no schema there: checked structurally below
        if obj["kind"] not in support.OPERATOR_KINDS | support.CERT_MANAGER_KINDS
        for version in K8S_VERSIONS
        if (problem := _schema_problem(json.dumps(obj, sort_keys=True), version)) is not None
    ]
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_every_object_is_in_sickbays_namespace_and_unique(overlay: str) -> None:
    objects = support.render(overlay)
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in support.CLUSTER_SCOPED:
            assert namespace is None, f"{obj['kind']} {obj['metadata']['name']} is cluster-scoped"
        else:
            assert namespace == support.NAMESPACE, f"{obj['kind']} {obj['metadata']['name']}: {namespace}"
    keys = collections.Counter(
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects
    )
    assert [key for key, n in keys.items() if n > 1] == []
    assert support.one(objects, "Namespace")["metadata"]["name"] == support.NAMESPACE


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_operator_kinds_only_in_the_prometheus_operator_overlay(overlay: str) -> None:
    kinds = collections.Counter(obj["kind"] for obj in support.render(overlay))
    if overlay == "prometheus-operator":
        assert all(kinds[kind] == 1 for kind in support.OPERATOR_KINDS), kinds
    else:
        assert not set(kinds) & support.OPERATOR_KINDS


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_the_sickbay_container_is_hardened_and_probed(overlay: str) -> None:
    deployment = _deployment(support.render(overlay))
    pod = support.pod_spec(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == "sickbay"
    sickbay = support.container(deployment, "sickbay")
    security = sickbay["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    for kind in ("requests", "limits"):
        assert set(sickbay["resources"][kind]) == {"cpu", "memory"}, kind
    ports = {port["name"]: port["containerPort"] for port in sickbay["ports"]}
    assert ports == {"http": 8080}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = sickbay[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == 8080
    # Every writable path is a volume: the root filesystem is read-only.
    mounts = {m["mountPath"] for m in sickbay["volumeMounts"] if not m.get("readOnly")}
    assert "/var/lib/sickbay" in mounts


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_the_deployment_is_a_configuration_sickbay_accepts(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = support.render(overlay)
    deployment = _deployment(objects)
    settings = support.load_deployment_settings(
        deployment, _rendered_configmaps(objects), tmp_path, monkeypatch
    )
    assert settings.kube.enabled
    assert settings.kube.in_cluster
    assert settings.dry_run is (overlay == "dry-run")
    assert settings.leader.enabled is (overlay != "dry-run")
    assert settings.leader.namespace == support.NAMESPACE
    assert settings.tls.enabled is (overlay == "tls")
    # The mounted policy and catalog are those of rules/.
    assert rules_config.load_policy(settings.policy_file) == rules_config.load_policy(
        support.ROOT / "rules" / "policy.yaml"
    )
    assert rules_config.load_catalog(settings.xid_catalog_file) == rules_config.load_catalog(
        support.ROOT / "rules" / "xid-catalog.yaml"
    )
    # The inbox is on the `state` volume; the Lease the Role names is the one the service uses.
    mounts = {m["name"]: m["mountPath"] for m in support.container(deployment, "sickbay")["volumeMounts"]}
    assert Path(settings.inbox.path).parent == Path(mounts["state"])
    role = support.one(objects, "Role", "sickbay")
    named = [rule.get("resourceNames") for rule in role["rules"] if "resourceNames" in rule]
    assert named in ([], [[settings.leader.lease_name]])


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_the_services_route_to_sickbay(overlay: str) -> None:
    objects = support.render(overlay)
    deployment = _deployment(objects)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    leader_elected = support.env_of(support.container(deployment, "sickbay"))["SICKBAY_LEADER__ENABLED"]
    api = support.one(objects, "Service", "sickbay")
    selector = dict(api["spec"]["selector"])
    if leader_elected["value"] == "true":
        # The leader labels its own pod; the Service must select that label so alerts reach the leader.
        assert selector.pop(LEADER_LABEL) == "true"
    else:
        assert LEADER_LABEL not in selector
    assert support.labels_match(selector, pod_labels)
    metrics = support.one(objects, "Service", "sickbay-metrics")
    assert LEADER_LABEL not in metrics["spec"]["selector"]
    assert support.labels_match(metrics["spec"]["selector"], pod_labels)
    for service in (api, metrics):
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8080, "http")]
    # The agent and Alertmanager reach the leader through the `sickbay` Service.
    agent = support.one(objects, "DaemonSet", "sickbay-agent")
    url = support.env_of(support.container(agent, "agent"))["SICKBAY_AGENT_SERVICE_URL"]["value"]
    scheme = "https" if overlay == "tls" else "http"
    assert url == f"{scheme}://sickbay.{support.NAMESPACE}.svc:8080"
    # The Deployment's selector keeps the agent's pods out, and the other way round.
    agent_labels = agent["spec"]["template"]["metadata"]["labels"]
    assert not support.labels_match(deployment["spec"]["selector"]["matchLabels"], agent_labels)
    assert not support.labels_match(agent["spec"]["selector"]["matchLabels"], pod_labels)


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_each_caller_has_its_own_credential(overlay: str) -> None:
    """Alertmanager's token from its Secret, the operators' from another (optional), and each agent its
    pod's projected ServiceAccount token for audience `sickbay`: never the webhook's (issue 16)."""
    objects = support.render(overlay)
    env = support.env_of(support.container(_deployment(objects), "sickbay"))
    assert env["SICKBAY_AUTH__TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "sickbay-webhook-token",
        "key": "token",
    }
    assert env["SICKBAY_AUTH__OPERATOR__TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "sickbay-operator-token",
        "key": "token",
        "optional": True,
    }
    agent = support.one(objects, "DaemonSet", "sickbay-agent")
    volumes = {v["name"]: v for v in support.pod_spec(agent)["volumes"]}
    assert "secret" not in volumes["token"], "the agent must not carry a shared Secret"
    (source,) = volumes["token"]["projected"]["sources"]
    settings = yaml.safe_load((support.BASE / "config" / "sickbay.yaml").read_text(encoding="utf-8"))
    assert source["serviceAccountToken"]["audience"] == settings["auth"]["agents"]["audience"]
    assert source["serviceAccountToken"]["path"] == "token"
    account = support.pod_spec(agent)["serviceAccountName"]
    assert (
        settings["auth"]["agents"]["service_account"]
        == f"system:serviceaccount:{support.NAMESPACE}:{account}"
    )
    agent_env = support.env_of(support.container(agent, "agent"))
    assert agent_env["SICKBAY_AGENT_TOKEN_FILE"]["value"] == "/var/run/secrets/sickbay/token"
    # The read routes need credentials in the prometheus-operator overlay only (off by default).
    reads = env.get("SICKBAY_AUTH__READS__REQUIRED", {}).get("value")
    assert reads == ("true" if overlay == "prometheus-operator" else None)
    assert not support.of_kind(objects, "Secret"), (
        "the token Secret is created by the operator, never shipped"
    )


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_rbac_grants_only_calls_of_the_kube_port(overlay: str) -> None:
    objects = support.render(overlay)
    granted = {(g, r, v) for g, r, v, _ in support.rbac_grants(objects)}
    assert granted <= expected_grants(), sorted(granted - expected_grants())
    if overlay != "dry-run":
        assert granted == expected_grants(), sorted(expected_grants() - granted)


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_the_disruption_budget_never_blocks_a_drain(overlay: str) -> None:
    objects = support.render(overlay)
    replicas = _deployment(objects)["spec"]["replicas"]
    spec = support.one(objects, "PodDisruptionBudget", "sickbay")["spec"]
    assert support.labels_match(
        spec["selector"]["matchLabels"], _deployment(objects)["spec"]["selector"]["matchLabels"]
    )
    if "minAvailable" in spec:
        assert spec["minAvailable"] < replicas, (
            "minAvailable >= replicas: no node running Sickbay could drain"
        )
    else:
        assert spec["maxUnavailable"] >= 1
    assert replicas == (1 if overlay in SINGLE_REPLICA else 2)


# --------------------------------------------------------------------------------------------- dry-run


def test_the_dry_run_overlay_sets_dry_run_and_has_no_write_verb() -> None:
    objects = support.render("dry-run")
    verbs = {verb for _, _, verb, _ in support.rbac_grants(objects)}
    assert verbs <= READ_VERBS, f"write verbs in the dry-run overlay: {sorted(verbs - READ_VERBS)}"
    assert support.one(objects, "Role", "sickbay")["rules"] == []
    deployment = _deployment(objects)
    env = support.env_of(support.container(deployment, "sickbay"))
    assert env["SICKBAY_DRY_RUN"]["value"] == "true"
    assert env["SICKBAY_LEADER__ENABLED"]["value"] == "false"
    assert env["SICKBAY_KUBE__ENABLED"]["value"] == "true", "a dry run reads the cluster to plan exactly"
    assert deployment["spec"]["replicas"] == 1, "without leader election, one replica"


def test_the_dry_run_overlay_keeps_the_objects_of_the_default_one() -> None:
    """So `kubectl apply -k` switches between them in place, in both directions."""

    def keys(overlay: str) -> set[tuple[str, str]]:
        return {
            (o["kind"], re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"])) for o in support.render(overlay)
        }

    assert keys("dry-run") == keys("default")


# --------------------------------------------------------------------------------------------- persistent journal


def test_the_persistent_journal_is_one_replica_on_a_read_write_once_claim() -> None:
    objects = support.render("persistent-journal")
    claim = support.one(objects, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    deployment = _deployment(objects)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, (
        "the old pod must let go of the volume first"
    )
    state = {v["name"]: v for v in support.pod_spec(deployment)["volumes"]}["state"]
    assert state == {"name": "state", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}


# --------------------------------------------------------------------------------------------- operator kinds


def _operator_objects() -> list[support.Obj]:
    return [o for o in support.render("prometheus-operator") if o["kind"] in support.OPERATOR_KINDS]


def test_operator_objects_are_well_formed() -> None:
    for obj in _operator_objects():
        kind = obj["kind"]
        assert obj["apiVersion"] == OPERATOR_API[kind], kind
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}, kind
        assert set(obj["spec"]) <= OPERATOR_SPEC_KEYS[kind], (
            kind,
            set(obj["spec"]) - OPERATOR_SPEC_KEYS[kind],
        )
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "sickbay"
        for endpoint in obj["spec"].get("endpoints", []) + obj["spec"].get("podMetricsEndpoints", []):
            assert set(endpoint) <= ENDPOINT_KEYS, endpoint
            for key in ("interval", "scrapeTimeout"):
                assert key not in endpoint or DURATION.match(endpoint[key]), endpoint
            for relabel in endpoint.get("relabelings", []) + endpoint.get("metricRelabelings", []):
                assert set(relabel) <= RELABEL_KEYS, relabel
                assert relabel.get("action", "replace") in RELABEL_ACTIONS, relabel
                if "regex" in relabel:
                    re.compile(relabel["regex"])


def test_the_service_monitor_scrapes_every_replica() -> None:
    objects = support.render("prometheus-operator")
    monitor = support.one(objects, "ServiceMonitor")
    selected = [
        s
        for s in support.of_kind(objects, "Service")
        if support.labels_match(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert [s["metadata"]["name"] for s in selected] == ["sickbay-metrics"], "one Service, every replica"
    ports = {p["name"] for p in selected[0]["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}


def test_the_pod_monitor_scrapes_the_agent_as_a_dcgm_job() -> None:
    objects = support.render("prometheus-operator")
    monitor = support.one(objects, "PodMonitor")
    agent = support.one(objects, "DaemonSet", "sickbay-agent")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert support.labels_match(selector, agent["spec"]["template"]["metadata"]["labels"])
    assert not support.labels_match(selector, _deployment(objects)["spec"]["template"]["metadata"]["labels"])
    ports = {p["name"] for p in support.container(agent, "agent")["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    relabel = {r.get("targetLabel") or r["action"]: r for r in endpoint["relabelings"]}
    # The rule bundle's GpuExporterDown / GpuMissingFromExporter look at up{job=~".*dcgm.*"}.
    assert re.fullmatch(".*dcgm.*", relabel["job"]["replacement"])
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert set(relabel["labeldrop"]["regex"].split("|")) == {"pod", "namespace", "container"}


def test_the_prometheus_rule_is_the_bundle_and_passes_promtool(tmp_path: Path) -> None:
    rule = support.one(support.render("prometheus-operator"), "PrometheusRule")
    bundle = yaml.safe_load(support.RULES.read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == bundle["groups"]
    extracted = tmp_path / "groups.yaml"
    extracted.write_text(
        yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False), encoding="utf-8"
    )
    support.assert_ok(support.run([support.tool("promtool"), "check", "rules", str(extracted)]))


def test_the_grafana_dashboard_config_map() -> None:
    configmap = support.one(support.render("prometheus-operator"), "ConfigMap", "sickbay-grafana-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    text = support.DASHBOARD.read_text(encoding="utf-8")
    assert configmap["data"] == {support.DASHBOARD.name: text}
    json.loads(text)
    # Client-side `kubectl apply` copies the object into an annotation, which is limited to 256 KiB.
    assert len(text.encode()) < 200_000


# --------------------------------------------------------------------------------------------- Alertmanager


def _matcher_text(matcher: dict[str, str]) -> str:
    return f"{matcher['name']}{matcher.get('matchType', '=')}{json.dumps(matcher['value'])}"


def _am_route(route: dict[str, Any]) -> dict[str, Any]:
    """An AlertmanagerConfig route in alertmanager.yml's spelling."""
    assert set(route) <= AMC_ROUTE_KEYS, set(route) - AMC_ROUTE_KEYS
    names = {
        "groupBy": "group_by",
        "groupWait": "group_wait",
        "groupInterval": "group_interval",
        "repeatInterval": "repeat_interval",
    }
    out: dict[str, Any] = {}
    for key, value in route.items():
        if key == "matchers":
            for matcher in value:
                assert set(matcher) <= {"name", "value", "matchType"}, matcher
                assert matcher.get("matchType", "=") in ("=", "!=", "=~", "!~"), matcher
            out["matchers"] = [_matcher_text(m) for m in value]
        elif key == "routes":
            out["routes"] = [_am_route(child) for child in value]
        elif key in names:
            assert not key.endswith(("Wait", "Interval")) or DURATION.match(value), (key, value)
            out[names[key]] = value
        else:
            out[key] = value
    return out


def _am_receiver(receiver: dict[str, Any], secrets: dict[tuple[str, str], str]) -> dict[str, Any]:
    assert set(receiver) <= {"name", "webhookConfigs"}, receiver
    configs = []
    for webhook in receiver["webhookConfigs"]:
        assert set(webhook) <= AMC_WEBHOOK_KEYS, webhook
        auth = webhook["httpConfig"]["authorization"]
        credentials = secrets[(auth["credentials"]["name"], auth["credentials"]["key"])]
        configs.append(
            {
                "url": webhook["url"],
                "send_resolved": webhook.get("sendResolved", True),
                "max_alerts": webhook.get("maxAlerts", 0),
                "http_config": {"authorization": {"type": auth["type"], "credentials": credentials}},
            }
        )
    return {"name": receiver["name"], "webhook_configs": configs}


def alertmanager_yml_from_the_config_resource() -> dict[str, Any]:
    """What the operator generates from the AlertmanagerConfig (with alertmanagerConfigMatcherStrategy
    None), inside the example's top-level route and default receiver."""
    resource = support.one(support.render("prometheus-operator"), "AlertmanagerConfig")
    secrets = {("sickbay-webhook-token", "token"): "token-from-the-secret"}
    example = yaml.safe_load(support.RECEIVER.read_text(encoding="utf-8"))
    route = {k: v for k, v in example["route"].items() if k != "routes"}
    route["routes"] = [_am_route(resource["spec"]["route"])]
    receivers = [r for r in example["receivers"] if r["name"] != "sickbay"]
    receivers += [_am_receiver(r, secrets) for r in resource["spec"]["receivers"]]
    return {"global": example.get("global", {}), "route": route, "receivers": receivers}


def test_the_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        yaml.safe_dump(alertmanager_yml_from_the_config_resource(), sort_keys=False), encoding="utf-8"
    )
    support.assert_ok(support.run([support.tool("amtool"), "check-config", str(config)]))


def test_the_alertmanager_config_reaches_the_leader_with_the_shared_token() -> None:
    objects = support.render("prometheus-operator")
    resource = support.one(objects, "AlertmanagerConfig")
    names = {r["name"] for r in resource["spec"]["receivers"]}

    def receivers_of(route: dict[str, Any]) -> set[str]:
        return {route["receiver"]} | {r for child in route.get("routes", []) for r in receivers_of(child)}

    assert receivers_of(resource["spec"]["route"]) <= names
    (webhook,) = resource["spec"]["receivers"][0]["webhookConfigs"]
    service = support.one(objects, "Service", "sickbay")
    assert (
        webhook["url"] == f"http://{service['metadata']['name']}.{support.NAMESPACE}.svc:8080/api/v1/alerts"
    )
    assert webhook["httpConfig"]["authorization"]["credentials"] == {
        "name": "sickbay-webhook-token",
        "key": "token",
    }


def _matches(route: dict[str, Any], labels: dict[str, str]) -> bool:
    for text in route.get("matchers", []):
        name, op, value = re.fullmatch(r'(\w+)(=~|!~|!=|=)"?(.*?)"?', text).groups()  # type: ignore[union-attr]
        have = labels.get(name, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    return True


def _routes_for(
    route: dict[str, Any], labels: dict[str, str], inherited: dict[str, Any]
) -> list[dict[str, Any]]:
    """Alertmanager's routing: the effective settings of every route an alert ends at."""
    params = ("receiver", "group_by", "group_wait", "group_interval", "repeat_interval")
    effective = {**inherited, **{k: route[k] for k in params if k in route}}
    found: list[dict[str, Any]] = []
    for child in route.get("routes", []):
        if _matches(child, labels):
            found += _routes_for(child, labels, effective)
            if not child.get("continue", False):
                break
    return found or [effective]


@pytest.mark.parametrize("fault_class", [*CLASSES, None])
def test_the_alertmanager_config_routes_like_the_receiver_example(fault_class: str | None) -> None:
    labels = {"alertname": "GpuSomething", "node": "n1", "gpu": "0"}
    if fault_class is not None:
        labels["sickbay_class"] = fault_class
    example = yaml.safe_load(support.RECEIVER.read_text(encoding="utf-8"))
    generated = alertmanager_yml_from_the_config_resource()

    def routed(config: dict[str, Any]) -> list[dict[str, Any]]:
        found = _routes_for(config["route"], labels, {})
        return [{**r, "group_by": sorted(r["group_by"])} for r in found]

    assert routed(generated) == routed(example)
    assert [r["receiver"] for r in routed(example)] == (["sickbay"] if fault_class else ["default"])
    sickbay = {r["name"]: r for r in generated["receivers"]}["sickbay"]["webhook_configs"][0]
    reference = {r["name"]: r for r in example["receivers"]}["sickbay"]["webhook_configs"][0]
    for key in ("url", "send_resolved", "max_alerts"):
        assert sickbay[key] == reference[key], key
    assert (
        sickbay["http_config"]["authorization"]["type"] == reference["http_config"]["authorization"]["type"]
    )


def test_the_monitoring_component_composes_with_the_dry_run(tmp_path: Path) -> None:
    """What the operator's guide suggests for a dry run with monitoring: dry-run plus the component."""
    overlay = tmp_path / "dry-run-with-monitoring"
    overlay.mkdir()
    dry_run = os.path.relpath(support.OVERLAYS / "dry-run", overlay)
    component = os.path.relpath(support.DEPLOY / "components" / "prometheus-operator", overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [dry_run],
                "components": [component],
            }
        ),
        encoding="utf-8",
    )
    proc = support.run([support.kubectl(), "kustomize", str(overlay)])
    support.assert_ok(proc)
    objects = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    assert {o["kind"] for o in objects} >= support.OPERATOR_KINDS
    assert {verb for _, _, verb, _ in support.rbac_grants(objects)} <= READ_VERBS
    env = support.env_of(support.container(_deployment(objects), "sickbay"))
    assert env["SICKBAY_DRY_RUN"]["value"] == "true"
