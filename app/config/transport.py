"""Settings of the listener and of the read routes: TLS, connection timeouts, the reads' cache and budget.

Part of `app.config.settings` (its `Settings` holds them as `tls`, `http`, `reads`), kept apart so that
file stays about the service as a whole.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TlsSettings(BaseModel):
    """HTTPS for the listener: a PEM certificate chain and its key (a cert-manager Secret mounts both).

    With both files set the port speaks TLS only. The files are re-read when either one's modification
    time changes (checked every `reload_interval_s`), so a renewed certificate is served without a restart.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cert_file: Path | None = None
    key_file: Path | None = None
    reload_interval_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _both_or_neither(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls needs both cert_file and key_file (or neither)")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class HttpSettings(BaseModel):
    """Connection limits of the listener."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # aiohttp arms one timer per connection when it opens and again after each response: a connection
    # that has not sent complete request headers (or its next request) within this many seconds is
    # closed. It is both the idle timeout and the header-read timeout (slow clients, idle floods).
    idle_timeout_s: float = Field(default=10.0, gt=0, le=3600)


class ReadSettings(BaseModel):
    """The read routes' share of the API server (`GET /`, `/api/v1/nodes[/{name}]`).

    Reads are served from a short cache, one API call per key however many readers wait on it, and the
    calls they do make draw on their own small budget and client limiter, so a flood of readers never
    takes the tokens remediation needs. Past the budget a read answers 429 (the status page says so).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cache_ttl_s: float = Field(default=3.0, ge=0, le=300)
    qps: float = Field(default=5.0, gt=0)
    burst: int = Field(default=10, ge=1)
    # How many requests all read routes together are served a second, however cheap (a cached answer still costs the event
    # loop that remediation runs on): the rest wait their turn, up to `max_wait_s`, then get 429. Readers
    # who wait send nothing more, so a flood paces itself to this rate.
    requests_per_s: float = Field(default=100.0, gt=0)
    requests_burst: int = Field(default=50, ge=1)
    max_wait_s: float = Field(default=30.0, ge=0, le=600)
    # How many distinct keys (node names, selectors) the cache holds at most.
    max_entries: int = Field(default=1024, ge=1)
