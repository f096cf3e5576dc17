"""Settings, policy and catalog: a bad value fails start-up with one message naming the field."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app.config import rules
from app.config.errors import ConfigError
from app.config.settings import RULES_DIR, load_settings


def test_defaults_need_a_token_because_auth_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SICKBAY_AUTH__TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"auth: .*needs auth.token"):
        load_settings()


def test_auth_off_only_when_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_AUTH__MODE", "none")
    assert load_settings().auth.mode == "none"


def test_yaml_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sickbay.yaml"
    config.write_text("listen_port: 9999\nauth: {mode: bearer, token: from-file}\ninbox: {path: /tmp/x.db}\n")
    monkeypatch.setenv("SICKBAY_LISTEN_PORT", "7777")
    settings = load_settings(config)
    assert settings.listen_port == 7777  # the environment wins over the file
    assert settings.auth.token is not None
    assert settings.auth.token.get_secret_value() == "from-file"
    assert str(settings.inbox.path) == "/tmp/x.db"


class _ReadOnlyEnviron(dict[str, str]):
    """os.environ for one test: reads as usual, any write fails the test."""

    def __setitem__(self, key: str, value: str) -> None:
        raise AssertionError(f"loading settings wrote ${key}")

    def __delitem__(self, key: str) -> None:
        raise AssertionError(f"loading settings removed ${key}")

    def pop(self, key: str, *default: object) -> str:  # type: ignore[override]
        raise AssertionError(f"loading settings removed ${key}")


def test_the_file_is_a_settings_source_not_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given, from_env = tmp_path / "given.yaml", tmp_path / "from-env.yaml"
    given.write_text("listen_port: 1111\nauth: {mode: none}\n")
    from_env.write_text("listen_port: 2222\nauth: {mode: none}\n")
    monkeypatch.delenv("SICKBAY_LISTEN_PORT", raising=False)
    monkeypatch.setenv("SICKBAY_CONFIG", str(from_env))
    before = dict(os.environ)
    with monkeypatch.context() as scoped:
        scoped.setattr(os, "environ", _ReadOnlyEnviron(os.environ))
        assert load_settings(given).listen_port == 1111  # the file given wins over $SICKBAY_CONFIG's
        assert load_settings().listen_port == 2222
    assert dict(os.environ) == before


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("listen_port: lots\nauth: {mode: none}\n", "listen_port"),
        ("auth: {mode: basic, username: u}\n", "auth"),
        ("auth: {mode: none}\nmax_body_bytes: 1\n", "max_body_bytes"),
        ("auth: {mode: none}\nno_such_setting: 1\n", "no_such_setting"),
        ("auth: {mode: none}\npipeline: {node_concurrency: 0}\n", "pipeline.node_concurrency"),
    ],
)
def test_bad_field_is_named(tmp_path: Path, text: str, field: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert str(config) in message
    assert f"{field}:" in message
    assert "\n" not in message


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(broken)


def test_shipped_rules_load() -> None:
    catalog = rules.load_catalog(RULES_DIR / "xid-catalog.yaml")
    policy = rules.load_policy(RULES_DIR / "policy.yaml")
    assert catalog.entry(79) is not None
    assert policy.escalation.distinct_workloads >= 2


# The fields every entry needs besides its class, so each case below has exactly one problem.
_REST = "name: x, nvidia_action: RESET_GPU, source: s"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            f"version: 1\nxids: {{48: {{class: depends, {_REST}, note: n}}}}\n",
            "xids.48.rule: Value error, a 'depends'",
        ),
        (
            f"version: 1\nxids: {{13: {{class: restart-workload, {_REST}, rule: per-link, note: n}}}}\n",
            "xids.13.rule: Value error, 'rule' only applies",
        ),
        (f"version: 1\nxids: {{13: {{class: explode, {_REST}}}}}\n", "xids.13.class"),
        ("version: 2\nxids: {}\n", "version"),
        (f"version: 1\nxids: {{5000: {{class: reset-gpu, {_REST}}}}}\n", "between 1 and 999"),
        (
            "version: 1\nxids: {79: {class: reboot-node, nvidia_action: RESTART_BM, name: x}}\n",
            "xids.79.source",
        ),
        (f"version: 1\nxids: {{46: {{class: ignore, {_REST}}}}}\n", "xids.46.note"),
    ],
)
def test_bad_catalog_is_refused_with_the_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "xid.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(problem)) as raised:
        rules.load_catalog(path)
    assert "problems)" not in str(raised.value), f"more than the one intended problem: {raised.value}"


def test_bad_catalog_entries_are_all_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "xid.yaml"
    path.write_text(
        "version: 1\n"
        "default_class: transient\n"
        "xids:\n"
        "  31: {class: restart-workload, nvidia_action: RESTART_APP, name: x}\n"  # no source
        "  32: {class: restart-workload, nvidia_action: RESTART_APP, name: x, source: '  '}\n"  # blank source
        "  45: {class: depends, nvidia_action: WORKFLOW_XID_45, name: x, source: s}\n"  # no rule
        "  46: {class: restart-workload, nvidia_action: RESET_GPU, name: x, source: s}\n"  # differs, no note
        "  162: {class: ignore, nvidia_action: null, name: x, source: s}\n"  # no bucket, no note
        "  163: {class: ignore, name: x, source: s, note: n}\n"  # bucket not stated
        "  2000: {class: ignore, nvidia_action: IGNORE, name: x, source: s}\n"  # out of range
    )
    with pytest.raises(ConfigError) as raised:
        rules.load_catalog(path)
    message = str(raised.value)
    expected = {
        "default_class: Value error, 'default_class' moved to rules/policy.yaml": "the old key",
        "xids.31.source: Field required": "missing source",
        "xids.32.source: String should have at least 1 character": "blank source",
        "xids.45.rule: Value error, a 'depends' XID needs a 'rule'": "depends without a rule",
        "xids.46.note: Value error, class restart-workload differs from NVIDIA's RESET_GPU": "unexplained class",
        "xids.162.note: Value error, NVIDIA gives no immediate action": "no bucket, no note",
        "xids.163.nvidia_action: Field required": "bucket not stated",
        "xids.2000.[key]: Value error, XIDs must be between 1 and 999": "bad XID",
    }
    missing = [why for text, why in expected.items() if text not in message]
    assert not missing, f"not reported: {missing}\n{message}"
    assert f"({len(expected)} problems)" in message
    assert "classification: {unknown_xid: transient}" in message


def test_unknown_xid_is_a_policy_setting(tmp_path: Path) -> None:
    assert rules.load_policy(RULES_DIR / "policy.yaml").classification.unknown_xid == "transient"
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nclassification: {unknown_xid: reset-gpu}\n")
    assert rules.load_policy(path).classification.unknown_xid == "reset-gpu"
    path.write_text("version: 1\nclassification: {unknown_xid: depends}\n")
    with pytest.raises(ConfigError, match=r"classification\.unknown_xid"):
        rules.load_policy(path)


def test_bad_policy_durations(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nretry: {initial: 10 minutes}\n")
    with pytest.raises(ConfigError, match=r"retry\.initial"):
        rules.load_policy(path)
    path.write_text("version: 1\nretry: {initial: 1h, max: 5m}\n")
    with pytest.raises(ConfigError, match="must not exceed"):
        rules.load_policy(path)


@pytest.mark.parametrize(
    ("auth", "problem"),
    [
        (
            {"mode": "bearer", "token": "same", "operator": {"token": "same"}},
            "auth.operator.token must differ",
        ),
        (
            {"mode": "bearer", "token": "same", "agents": {"mode": "token", "token": "same"}},
            "auth.agents.token must differ",
        ),
        (
            {"mode": "bearer", "token": "w", "operator": {"token": "o"}, "reads": {"token": "o"}},
            "auth.reads.token must differ from auth.operator.token",
        ),
        ({"mode": "bearer", "token": "w", "agents": {"mode": "token"}}, "needs auth.agents.token"),
    ],
)
def test_one_credential_is_never_two_callers(
    monkeypatch: pytest.MonkeyPatch, auth: dict[str, object], problem: str
) -> None:
    """A token shared between callers would give each the other's power (issue 16)."""
    monkeypatch.delenv("SICKBAY_AUTH__TOKEN", raising=False)
    with pytest.raises(ConfigError, match=problem):
        load_settings(auth=auth)


def test_each_callers_credential_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_AUTH__TOKEN", "webhook")
    monkeypatch.setenv("SICKBAY_AUTH__OPERATOR__TOKEN", "operator")
    monkeypatch.setenv("SICKBAY_AUTH__READS__REQUIRED", "true")
    monkeypatch.setenv("SICKBAY_AUTH__AGENTS__CACHE_TTL_S", "5")
    auth = load_settings().auth
    assert auth.token is not None
    assert auth.token.get_secret_value() == "webhook"
    assert auth.operator.token is not None
    assert auth.operator.token.get_secret_value() == "operator"
    assert auth.reads.required is True
    assert (auth.agents.mode, auth.agents.audience, auth.agents.cache_ttl_s) == (
        "serviceaccount",
        "sickbay",
        5.0,
    )
    assert auth.agents.service_account == "system:serviceaccount:sickbay:sickbay-agent"
