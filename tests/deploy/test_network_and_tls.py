"""Who can reach Sickbay in a cluster, and over what: the NetworkPolicy every overlay ships, and the tls
overlay's cert-manager certificate, mounted where the settings say and trusted by every caller.

Rendered with `kubectl kustomize` like tests/deploy/test_kustomize.py (skips the same way without it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy import support

PEERS = {"sickbay-agent", "alertmanager", "prometheus"}  # `app.kubernetes.io/name` of whom it admits


@pytest.mark.parametrize("overlay", support.OVERLAY_NAMES)
def test_the_network_policy_admits_only_the_callers_on_the_one_port(overlay: str) -> None:
    objects = support.render(overlay)
    policy = support.one(objects, "NetworkPolicy", "sickbay")
    spec = policy["spec"]
    deployment = support.one(objects, "Deployment", "sickbay")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert support.labels_match(spec["podSelector"]["matchLabels"], pod_labels)
    assert spec["policyTypes"] == ["Ingress"]
    port_names = {p["name"]: p["containerPort"] for p in support.container(deployment, "sickbay")["ports"]}
    admitted: set[str] = set()
    for rule in spec["ingress"]:
        assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
        assert "http" in port_names
        for peer in rule["from"]:
            assert "ipBlock" not in peer, "admit pods by label, never an address range"
            admitted.add(peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"])
            if "namespaceSelector" not in peer:  # a peer in Sickbay's own namespace: the agents
                agent = support.one(objects, "DaemonSet", "sickbay-agent")
                agent_labels = agent["spec"]["template"]["metadata"]["labels"]
                assert support.labels_match(peer["podSelector"]["matchLabels"], agent_labels)
            else:
                assert peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "monitoring"
                }
    assert admitted == PEERS


def test_the_tls_overlay_serves_the_cert_manager_secret_to_callers_that_trust_its_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = support.render("tls")
    certificates = {c["metadata"]["name"]: c for c in support.of_kind(objects, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in support.of_kind(objects, "Issuer")}
    for cert in certificates.values():
        assert cert["apiVersion"] == "cert-manager.io/v1"
        assert cert["spec"]["issuerRef"]["name"] in issuers, "every certificate's issuer is shipped"
    serving = certificates["sickbay-tls"]["spec"]
    # The names the callers use are in the certificate.
    assert {"sickbay.sickbay.svc", "sickbay-metrics.sickbay.svc"} <= set(serving["dnsNames"])
    assert "server auth" in serving["usages"]
    ca_secret = certificates["sickbay-ca"]["spec"]["secretName"]
    assert issuers[serving["issuerRef"]["name"]]["spec"]["ca"]["secretName"] == ca_secret

    # Sickbay mounts that Secret (whole, so renewals reach it) and its settings name the mounted files.
    deployment = support.one(objects, "Deployment", "sickbay")
    sickbay = support.container(deployment, "sickbay")
    volumes = {v["name"]: v for v in support.pod_spec(deployment)["volumes"]}
    (mount,) = (
        m
        for m in sickbay["volumeMounts"]
        if volumes[m["name"]].get("secret", {}).get("secretName") == serving["secretName"]
    )
    assert "subPath" not in mount, "a subPath mount is never updated by the kubelet"
    settings = support.load_deployment_settings(
        deployment,
        {c["metadata"]["name"]: c.get("data", {}) for c in support.of_kind(objects, "ConfigMap")},
        tmp_path,
        monkeypatch,
    )
    projected = {item["key"] for item in volumes[mount["name"]]["secret"]["items"]}
    assert projected == {"tls.crt", "tls.key"}
    assert settings.tls.cert_file == Path(mount["mountPath"]) / "tls.crt"
    assert settings.tls.key_file == Path(mount["mountPath"]) / "tls.key"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert sickbay[probe]["httpGet"]["scheme"] == "HTTPS", probe

    # The agents speak https and trust the CA from a ConfigMap; no Secret (no serving key) on GPU nodes.
    agent = support.one(objects, "DaemonSet", "sickbay-agent")
    container = support.container(agent, "agent")
    env = support.env_of(container)
    assert env["SICKBAY_AGENT_SERVICE_URL"]["value"].startswith("https://sickbay.sickbay.svc:")
    agent_volumes = {v["name"]: v for v in support.pod_spec(agent)["volumes"]}
    assert all(
        v.get("secret", {}).get("secretName") not in (serving["secretName"], ca_secret)
        for v in agent_volumes.values()
    )
    ca_file = Path(env["SSL_CERT_FILE"]["value"])
    (ca_mount,) = (m for m in container["volumeMounts"] if Path(m["mountPath"]) == ca_file.parent)
    assert agent_volumes[ca_mount["name"]]["configMap"]["name"] == "sickbay-tls-ca"


def test_the_receiver_example_shows_the_tls_http_config() -> None:
    """The shipped Alertmanager example says how to deliver over TLS (commented, as the default is http)."""
    text = support.RECEIVER.read_text()
    commented = "\n".join(
        line.replace("#", "", 1) for line in text.splitlines() if line.lstrip().startswith("# ")
    )
    assert "https://sickbay.sickbay.svc:8080/api/v1/alerts" in commented
    assert "tls_config:" in commented
    assert "ca_file:" in commented
    receivers = yaml.safe_load(text)["receivers"]
    (sickbay,) = (r for r in receivers if r["name"] == "sickbay")
    assert sickbay["webhook_configs"][0]["url"].startswith("http://")
