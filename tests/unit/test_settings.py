"""Settings, policy and catalog: a bad value fails start-up with one message naming the field."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version: 1\nxids: {48: {class: depends, name: x}}\n", "xids.48"),
        ("version: 1\nxids: {13: {class: restart-workload, name: x, rule: per-link}}\n", "xids.13"),
        ("version: 1\nxids: {13: {class: explode, name: x}}\n", "xids.13.class"),
        ("version: 2\nxids: {}\n", "version"),
        ("version: 1\nxids: {5000: {class: ignore, name: x}}\n", "between 1 and 999"),
    ],
)
def test_bad_catalog_is_refused_with_the_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "xid.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        rules.load_catalog(path)


def test_bad_policy_durations(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nretry: {initial: 10 minutes}\n")
    with pytest.raises(ConfigError, match=r"retry\.initial"):
        rules.load_policy(path)
    path.write_text("version: 1\nretry: {initial: 1h, max: 5m}\n")
    with pytest.raises(ConfigError, match="must not exceed"):
        rules.load_policy(path)
