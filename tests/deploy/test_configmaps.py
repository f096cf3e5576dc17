"""The ConfigMaps for policy and XID catalog are rules/ itself (deploy/gen_configmaps.py keeps the copies
Kustomize may read), and the Deployment's environment plus the settings file are a configuration that
`sickbay serve` accepts. Reads the raw base, so it runs without kubectl.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from app.config import rules as rules_config
from app.config import verification
from tests.deploy import support

GENERATOR = support.DEPLOY / "gen_configmaps.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_configmaps", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_copies_match_rules() -> None:
    stale = _generator().stale()
    assert not stale, (
        f"stale copies of rules/: {[str(p.relative_to(support.ROOT)) for p in stale]}; "
        "run `python deploy/gen_configmaps.py`"
    )


def test_every_rules_file_the_service_reads_is_generated() -> None:
    module = _generator()
    assert set(module.SOURCES) == {
        "rules/policy.yaml",
        "rules/xid-catalog.yaml",
        "rules/verification-job.yaml",
    }
    generated = {p.name for p in (support.BASE / "generated").iterdir()}
    assert generated == set(module.SOURCES.values()), "a file in deploy/base/generated/ has no source"


def test_the_generator_feeds_the_config_map_generator() -> None:
    configmaps = support.generated_configmaps(support.BASE)
    assert set(configmaps) == {"sickbay-config", "sickbay-policy", "sickbay-xid-catalog"}
    # The verification Job template sits beside the policy: `verification.template` is relative to it.
    assert set(configmaps["sickbay-policy"]) == {"policy.yaml", "verification-job.yaml"}
    assert set(configmaps["sickbay-xid-catalog"]) == {"xid-catalog.yaml"}


def test_the_copies_load_like_the_originals(tmp_path: Path) -> None:
    generated = support.BASE / "generated"
    rules = support.ROOT / "rules"
    assert rules_config.load_policy(generated / "policy.yaml") == rules_config.load_policy(
        rules / "policy.yaml"
    )
    assert rules_config.load_catalog(generated / "xid-catalog.yaml") == rules_config.load_catalog(
        rules / "xid-catalog.yaml"
    )


def test_the_base_deployment_configures_a_service_that_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = support.one(support.load_all(support.BASE / "deployment.yaml"), "Deployment")
    settings = support.load_deployment_settings(
        deployment, support.generated_configmaps(support.BASE), tmp_path, monkeypatch
    )
    assert settings.kube.enabled
    assert settings.kube.in_cluster
    assert settings.leader.enabled
    assert settings.leader.namespace == support.NAMESPACE
    assert not settings.dry_run
    assert settings.identity.startswith("sickbay-")
    assert settings.auth.mode == "bearer"
    assert settings.auth.token is not None
    assert settings.listen_port == 8080
    # The files the service reads are the mounted ConfigMaps, and they parse.
    assert settings.policy_file.is_relative_to(tmp_path)
    policy = rules_config.load_policy(settings.policy_file)
    enabled = policy.verification.model_copy(update={"enabled": True})
    template = verification.load_template(enabled, policy_dir=settings.policy_file.parent)
    assert "dcgmi diag" in template
    rules_config.load_catalog(settings.xid_catalog_file)
    # The inbox lives on the `state` volume, not on the read-only root filesystem.
    mounts = {m["name"]: m["mountPath"] for m in support.container(deployment, "sickbay")["volumeMounts"]}
    assert Path(settings.inbox.path).parent == Path(mounts["state"])
