"""Agent settings: defaults, then `SICKBAY_AGENT_*` environment variables (and `NODE_NAME` from the
downward API), then explicit overrides from the command line.

`load_agent_settings` is the single entry point; it raises `ConfigError` naming every bad field at once. The
agent runs as its own DaemonSet, so these are separate from the service's settings; nothing else lives here.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import AliasChoices, AnyHttpUrl, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.config import errors

ENV_PREFIX = "SICKBAY_AGENT_"


class AgentSettings(BaseSettings):
    """What `sickbay agent` needs to know at start."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, populate_by_name=True
    )

    # The service's base URL; events go to <service_url>/api/v1/gpu-events.
    service_url: AnyHttpUrl
    # Bearer token, inline or (preferred, so it can rotate) a file read before every push: in a cluster the
    # pod's projected ServiceAccount token for audience `sickbay`, which the kubelet rotates (the DaemonSet).
    token: SecretStr | None = None
    token_file: Path | None = None
    # The Kubernetes node name, from the downward API (`NODE_NAME`); the host name when run by hand.
    node_name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        validation_alias=AliasChoices(f"{ENV_PREFIX}NODE_NAME", "NODE_NAME"),
    )
    poll_interval_s: float = Field(default=10.0, gt=0, le=3600)
    listen_host: str = "0.0.0.0"
    # dcgm-exporter owns 9400 on GPU nodes; the agent sits next to it.
    listen_port: int = Field(default=9402, ge=0, le=65535)
    spool_dir: Path = Path("/var/lib/sickbay-agent")
    spool_max_events: int = Field(default=10_000, ge=1)
    spool_max_bytes: int = Field(default=16 * 1024 * 1024, ge=4096)
    # Released dcgm-exporter versions write `Hostname`; the newest write `hostname`.
    hostname_label: Literal["Hostname", "hostname"] = "Hostname"
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    gpu_resource_prefix: str = "nvidia.com/gpu"
    event_wait_ms: int = Field(default=1000, ge=10, le=60_000)
    push_timeout_s: float = Field(default=10.0, gt=0)
    backoff_initial_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="after")
    def _consistent(self) -> AgentSettings:
        if self.token is not None and self.token_file is not None:
            raise ValueError("set token or token_file, not both")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must not be below backoff_initial_s")
        return self

    @property
    def events_url(self) -> str:
        return str(self.service_url).rstrip("/") + "/api/v1/gpu-events"

    @property
    def spool_path(self) -> Path:
        return self.spool_dir / "events.sqlite"


def load_agent_settings(**overrides: Any) -> AgentSettings:
    """Environment plus overrides (None values ignored); ConfigError with every problem in one message."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return AgentSettings(**given)
    except pydantic.ValidationError as exc:
        raise errors.describe(exc, source=f"agent settings ({ENV_PREFIX}* environment)") from None
