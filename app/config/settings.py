"""Service settings: defaults, then a YAML file, then `SICKBAY_*` environment variables (nested with `__`).

`load_settings` is the single entry point; it raises `ConfigError` naming every bad field at once.
"""

from __future__ import annotations

import os
import re
import socket
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from app.config import errors
from app.config.retention import RetentionSettings
from app.config.transport import HttpSettings, ReadSettings, TlsSettings

CONFIG_ENV = "SICKBAY_CONFIG"
DEFAULT_NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
# The exporters whose own pod a `pod` label names under prometheus-operator's scrape (honorLabels: false):
# dcgm-exporter's Helm chart, the GPU Operator's DaemonSet, and Sickbay's agent.
DEFAULT_EXPORTERS = ("dcgm-exporter", "nvidia-dcgm-exporter", "sickbay-agent")
RULES_DIR = Path(__file__).resolve().parents[2] / "rules"


class AgentAuthSettings(BaseModel):
    """How the NVML agents prove who they are, and so which node they may report for.

    `serviceaccount` (the default): the agent sends its pod's projected ServiceAccount token (audience
    `audience`); Sickbay verifies it with a TokenReview, checks the user is `service_account`, and binds
    the caller to the node its pod runs on, so it may report only that node's GPUs. Needs `kube.enabled`.
    `token`: one static agent token, for clusters Sickbay does not talk to (the demo): any node, so weaker.
    `none`: no check at all, said explicitly.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["serviceaccount", "token", "none"] = "serviceaccount"
    audience: str = Field(default="sickbay", min_length=1)
    service_account: str = Field(
        default="system:serviceaccount:sickbay:sickbay-agent",
        pattern=r"^system:serviceaccount:[a-z0-9-]{1,63}:[a-z0-9.-]{1,253}$",
    )
    # Verdicts are cached by token hash, so each agent costs one TokenReview per `cache_ttl_s`; a token
    # revoked (its pod deleted) is still accepted for at most that long.
    cache_ttl_s: float = Field(default=60.0, gt=0, le=3600)
    cache_size: int = Field(default=4096, ge=1, le=1_000_000)
    token: SecretStr | None = None
    # Also accepted while a rotation rolls out (see docs/operators-guide.md, "Credentials").
    previous_token: SecretStr | None = None

    @model_validator(mode="after")
    def _token_present(self) -> AgentAuthSettings:
        if self.mode == "token" and not (self.token and self.token.get_secret_value()):
            raise ValueError("auth.agents.mode 'token' needs auth.agents.token")
        return self


class OperatorAuthSettings(BaseModel):
    """Who may change the service's behaviour: breaker reset, model validate/shadow, any later write.

    A static `token`, and/or (`kubernetes: true`) any Kubernetes user whose bearer token passes a
    TokenReview and whom RBAC allows `update` on `sickbay.io` `breakers` (the breaker) or `models` (the
    model's standing), checked with a SubjectAccessReview. With neither, every write is refused (403).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: SecretStr | None = None
    previous_token: SecretStr | None = None
    kubernetes: bool = False
    cache_ttl_s: float = Field(default=30.0, gt=0, le=3600)


class ReadAuthSettings(BaseModel):
    """Whether the read routes (GET /, /api/v1/nodes, /actions, ...) need credentials; off by default.

    When required, an operator credential or `token` (a read-only one) is accepted, and with
    `auth.operator.kubernetes` any user RBAC allows `get` on `sickbay.io` `status`. /healthz, /readyz and
    /metrics stay open for probes and scrapes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    required: bool = False
    token: SecretStr | None = None


class AuthSettings(BaseModel):
    """How each caller proves who it is. Turning auth off must be said explicitly (`mode: none`).

    `mode`, `token`, `username`, `password` are Alertmanager's (the webhook): they may post alerts and
    nothing else. Before issue 16 the same token was also the agents' and the operators'; it still works
    for alerts, never for a write.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, revalidate_instances="always")

    mode: Literal["bearer", "basic", "none"] = "bearer"
    token: SecretStr | None = None
    previous_token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    # `mode: none` on a bind other than loopback lets anyone who reaches the port post alerts and reset
    # the breaker: `sickbay serve` refuses to start that way unless this says it is meant.
    allow_none_on_public_bind: bool = False
    agents: AgentAuthSettings = AgentAuthSettings()
    operator: OperatorAuthSettings = OperatorAuthSettings()
    reads: ReadAuthSettings = ReadAuthSettings()

    @model_validator(mode="after")
    def _credentials_present(self) -> AuthSettings:
        if self.mode == "bearer" and not (self.token and self.token.get_secret_value()):
            raise ValueError("auth.mode 'bearer' needs auth.token (or SICKBAY_AUTH__TOKEN)")
        if self.mode == "basic" and not (self.username and self.password):
            raise ValueError("auth.mode 'basic' needs auth.username and auth.password")
        # One credential, one power: a token shared between callers would give each the other's.
        webhook = {_secret(self.token), _secret(self.previous_token), _secret(self.password)} - {""}
        for name, other in (
            ("auth.operator.token", self.operator.token),
            ("auth.operator.previous_token", self.operator.previous_token),
            ("auth.agents.token", self.agents.token),
            ("auth.reads.token", self.reads.token),
        ):
            if _secret(other) and _secret(other) in webhook:
                raise ValueError(f"{name} must differ from the webhook's credentials (auth.token)")
        operator = {_secret(self.operator.token), _secret(self.operator.previous_token)} - {""}
        for name, other in (("auth.agents.token", self.agents.token), ("auth.reads.token", self.reads.token)):
            if _secret(other) and _secret(other) in operator:
                raise ValueError(f"{name} must differ from auth.operator.token")
        return self


def _secret(value: SecretStr | None) -> str:
    return value.get_secret_value() if value is not None else ""


class InboxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Path("sickbay.db")
    # Group commit: how many rows one transaction may carry, so a huge burst still commits in slices.
    max_batch_rows: int = Field(default=5000, ge=1)
    # Alerts and agent events refused one by one (GET /api/v1/rejected): the newest this many distinct
    # ones are kept, in the same file; a resend of one already kept counts on its row instead.
    dead_letter_rows: int = Field(default=1000, ge=1, le=1_000_000)


class PipelineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # How many nodes are processed at once; one node's signals are always handled in arrival order.
    node_concurrency: int = Field(default=16, ge=1, le=1024)
    poll_interval_s: float = Field(default=0.5, gt=0)
    # Recent signals on the same GPU that classification may use as context (XID 45 and 48, NVLink repeats).
    context_window_s: float = Field(default=3600.0, gt=0)
    # How often due re-checks of transient signals are looked for (the backoff itself is policy: retry).
    recheck_poll_s: float = Field(default=5.0, gt=0)


class KubeSettings(BaseModel):
    """How to reach the API server. Disabled means "journal what would be done, touch nothing"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    # Above client-go's 20/30: a storm of quarantines shares the bucket with evictions and Events.
    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)
    request_timeout_s: float = Field(default=10.0, gt=0)
    retry_attempts: int = Field(default=5, ge=1)
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    # Reconciliation and the status page read nodes and GPU pods from a view kept by watches (list once,
    # then O(changes)) instead of listing every round; off, they list as before.
    watch: bool = True
    # How long reconciliation and the audit wait at start-up for the view's first lists before listing
    # themselves (client-go's WaitForCacheSync; controller-runtime's CacheSyncTimeout is 2 minutes). 0:
    # never wait (the first round then lists the fleet while the view lists it too).
    view_sync_wait_s: float = Field(default=120.0, ge=0)


class LeaderSettings(BaseModel):
    """One active replica through a coordination.k8s.io Lease; followers answer 503 to alerts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    lease_name: str = "sickbay-leader"
    namespace: str = "sickbay"
    lease_duration_s: float = Field(default=15.0, gt=0)
    renew_deadline_s: float = Field(default=10.0, gt=0)
    retry_period_s: float = Field(default=2.0, gt=0)
    # The leader labels its own pod with this, so the Service (which selects it) routes alerts to it only.
    pod_label: str = "sickbay.io/leader"

    @model_validator(mode="after")
    def _ordered(self) -> LeaderSettings:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("need retry_period_s < renew_deadline_s < lease_duration_s")
        return self


class PredictionSettings(BaseModel):
    """Risk scoring from DCGM history. Without a Prometheus URL the model is still loaded (and checked).

    Retraining (`retrain_*`) runs only with a Prometheus URL, on the leader: on the `retrain_cron`
    schedule (standard crontab, UTC; day of week 0 or 7 is Sunday) it trains a challenger on the last
    `retrain_window_s` of history, sampled every `retrain_step_s`, with `retrain_threads` OpenMP threads,
    and promotes it only if it beats the current model on the same holdout.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    models_dir: Path = RULES_DIR.parent / "models"
    # When models_dir has no model yet (a fresh volume that retraining will write to), copy in the model
    # shipped with Sickbay first (its `models/`), so scoring starts from it rather than rules-only.
    seed_from_shipped: bool = False
    prometheus_url: str | None = None
    # Ask Prometheus for gzip-compressed answers: for a Prometheus across a slow link; in the cluster,
    # compressing costs its CPU more than it saves (`predict.prometheus.ReaderSettings.compress`).
    prometheus_compress: bool = False
    # glibc's mmap threshold while Prometheus' answers are read into arrays (`app.predict.allocator`):
    # those arrays go back to the kernel when freed instead of fragmenting the heap. 0 leaves glibc's.
    mmap_threshold_bytes: int = Field(default=2**20, ge=0, le=32 * 2**20)
    interval_s: float = Field(default=300.0, gt=0)
    lookback_s: float = Field(default=7 * 86400.0, gt=0)
    retrain_enabled: bool = True
    retrain_cron: str = "0 3 * * 0"
    retrain_window_s: float = Field(default=28 * 86400.0, gt=0)
    retrain_step_s: float = Field(default=300.0, gt=0)
    retrain_threads: int = Field(default=2, ge=1)
    # The fleet's name in the validation log (shadow mode): a model is validated per (version, fleet). One
    # journal serves one cluster, so the default is enough unless a journal moves to another cluster.
    fleet: str = Field(default="default", min_length=1, max_length=253)
    # The shadow-mode backtest (after a model loads, then every prediction.shadow.revalidate_every while
    # in shadow): replayed every `validate_step_s`, on the reader's `retrain_step_s` samples.
    validate_enabled: bool = True
    validate_step_s: float = Field(default=1800.0, gt=0)

    @field_validator("retrain_cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        fields = value.split()
        if len(fields) != 5 or not all(re.fullmatch(r"[0-9A-Za-z*,/-]+", f) for f in fields):
            raise ValueError(
                f"retrain_cron {value!r} is not a crontab expression (minute hour day month weekday)"
            )
        return value


class LogSettings(BaseModel):
    """How the service writes its log. Values that came from outside are escaped in either format.

    `text`: one line per record, control and bidi characters escaped, traceback lines marked `| `.
    `json`: one JSON object per line (`ts`, `level`, `logger`, `msg`, `exc` when there is one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["text", "json"] = "text"
    # A message longer than this is cut (and says by how much): one 5,000-digit label is not 5 KB of log.
    max_message_chars: int = Field(default=4096, ge=256)
    # Malformed HTTP requests (aiohttp refuses them before any handler) are logged one line each, at
    # most this many lines a second; the next line says how many were left out.
    rejected_requests_per_s: float = Field(default=5.0, gt=0)


class Settings(BaseSettings):
    """Everything `sickbay serve` needs to know at start. Policy and the XID catalog live in `rules/`."""

    model_config = SettingsConfigDict(
        env_prefix="SICKBAY_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    listen_host: str = "0.0.0.0"
    listen_port: int = Field(default=8080, ge=0, le=65535)
    # Bearer by default and validated even when absent, so a service with no token refuses to start.
    auth: AuthSettings = Field(default_factory=AuthSettings.model_construct, validate_default=True)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    tls: TlsSettings = TlsSettings()
    http: HttpSettings = HttpSettings()
    reads: ReadSettings = ReadSettings()
    node_label_keys: tuple[str, ...] = DEFAULT_NODE_LABELS
    # A `pod` label equal to one of these, or to `<name>-<suffix>`, or whose `container` is one, or named
    # after the alert's `job`, is the scrape target, never the workload (see README, "Attribution").
    exporter_names: tuple[str, ...] = DEFAULT_EXPORTERS
    policy_file: Path = RULES_DIR / "policy.yaml"
    xid_catalog_file: Path = RULES_DIR / "xid-catalog.yaml"
    inbox: InboxSettings = InboxSettings()
    pipeline: PipelineSettings = PipelineSettings()
    kube: KubeSettings = KubeSettings()
    leader: LeaderSettings = LeaderSettings()
    prediction: PredictionSettings = PredictionSettings()
    # How long each growing table is kept (`app.decide.retention` checks it against the policy at start).
    retention: RetentionSettings = RetentionSettings()
    # Who this replica is (the pod name in a cluster); written into `sickbay.io/owned-by`.
    identity: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname())
    pod_namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "sickbay"))
    reconcile_interval_s: float = Field(default=10.0, gt=0)
    # Alertmanager to reconcile against on becoming leader (GET /api/v2/alerts); none to skip.
    alertmanager_url: str | None = None
    # Only alerts routed to this receiver are reconciled (Alertmanager's `receiver` filter); none for all.
    alertmanager_receiver: str | None = "sickbay"
    alertmanager_sync_interval_s: float = Field(default=300.0, gt=0)
    # The audit of GPU-node hygiene (`sickbay audit`) on the scheduler, for the status page and the
    # `sickbay_audit_findings` metric; 0 (the default) runs none. It lists every node, pod and Job.
    audit_interval_s: float = Field(default=0.0, ge=0)
    dry_run: bool = False
    pause: bool = False
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log: LogSettings = LogSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the YAML file: `load_settings`'s, else `$SICKBAY_CONFIG`."""
        path = _config_file.get() or os.environ.get(CONFIG_ENV)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


# The file `load_settings` was given, for `settings_customise_sources` while that one call builds its
# Settings: a context variable, so no other thread or task (and not the environment) ever sees it.
_config_file: ContextVar[Path | None] = ContextVar("sickbay_config_file", default=None)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Read settings from `config_file` (or `$SICKBAY_CONFIG`) and the environment, highest last-named."""
    path = config_file or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    source = str(path) if path else "environment"
    if path is not None:
        _check_yaml(path)
    token = _config_file.set(path)
    try:
        return Settings(**overrides)
    except pydantic.ValidationError as exc:
        raise errors.describe(exc, source=source) from None
    finally:
        _config_file.reset(token)


def _check_yaml(path: Path) -> None:
    """Fail on a missing or unparsable file with its name, before pydantic reports something vaguer."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise errors.ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"configuration file {path} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise errors.ConfigError(f"configuration file {path} must hold a mapping at the top level")
