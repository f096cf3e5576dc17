"""Agent settings come from SICKBAY_AGENT_* and the downward API's NODE_NAME; mistakes fail in one message."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.agent.settings import load_agent_settings
from app.config.errors import ConfigError


def test_environment_configures_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_AGENT_SERVICE_URL", "http://sickbay.sickbay.svc:8080")
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")
    monkeypatch.setenv("SICKBAY_AGENT_TOKEN_FILE", "/var/run/secrets/sickbay/token")
    monkeypatch.setenv("SICKBAY_AGENT_HOSTNAME_LABEL", "hostname")
    monkeypatch.setenv("SICKBAY_AGENT_SPOOL_MAX_EVENTS", "500")

    settings = load_agent_settings()

    assert settings.events_url == "http://sickbay.sickbay.svc:8080/api/v1/gpu-events"
    assert settings.node_name == "gpu-node-17"
    assert settings.token_file == Path("/var/run/secrets/sickbay/token")
    assert settings.hostname_label == "hostname"
    assert settings.spool_max_events == 500
    assert settings.listen_port == 9402


def test_the_prefixed_node_name_wins_and_flags_win_over_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_AGENT_SERVICE_URL", "http://svc")
    monkeypatch.setenv("NODE_NAME", "from-downward-api")
    monkeypatch.setenv("SICKBAY_AGENT_NODE_NAME", "from-prefix")

    assert load_agent_settings().node_name == "from-prefix"
    assert load_agent_settings(node_name="from-flag", listen_port=None).node_name == "from-flag"


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load_agent_settings(service_url="not a url", poll_interval_s=0, hostname_label="HOSTNAME")

    message = str(caught.value)
    assert "3 problems" in message
    for field in ("service_url", "poll_interval_s", "hostname_label"):
        assert field in message


def test_token_and_token_file_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="token or token_file"):
        load_agent_settings(service_url="http://svc", token="x", token_file=Path("/t"))
