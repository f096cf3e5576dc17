"""The listening socket: TLS (reloaded when the files change), connection timeouts, and the refusal to
serve without authentication where others can reach the port.

`serve` is what `sickbay serve` runs once the application is built. With `tls.cert_file` and
`tls.key_file` set the port speaks HTTPS only (a plain HTTP request fails the handshake). A cert-manager
Secret is renewed in place, as a new pair of files behind the mount's symlinks: `watch_certificate`
re-reads both whenever either one's modification time (or inode) changes, proves them on a scratch
context, then loads them into the live `SSLContext`, so new connections get the new certificate and open
ones keep theirs; a pair that fails to load (caught half-written) leaves the old one serving and is tried
again on the next check.

Reads settings handed to it; no argv or environment.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from app.config.errors import ConfigError
from app.config.settings import Settings
from app.config.transport import TlsSettings

log = logging.getLogger(__name__)
Stamp = tuple[tuple[float, int], tuple[float, int]]
TLS_CONTEXT = web.AppKey("tls_context", ssl.SSLContext)


def tls_context(settings: TlsSettings) -> ssl.SSLContext | None:
    """A server context holding the configured pair (TLS 1.2 at least); None when TLS is not configured.

    Raises `ConfigError` naming the files when they cannot be loaded, so start-up fails readably."""
    if settings.cert_file is None or settings.key_file is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"tls: cannot load certificate {settings.cert_file} with key {settings.key_file}: {exc}"
        ) from None
    return context


def _pair(settings: TlsSettings) -> tuple[Path, Path]:
    if settings.cert_file is None or settings.key_file is None:
        raise ValueError("tls is not configured")
    return settings.cert_file, settings.key_file


def stamp(settings: TlsSettings) -> Stamp | None:
    """(mtime, inode) of both files, following symlinks; None when either cannot be read now."""
    cert_file, key_file = _pair(settings)
    try:
        cert, key = os.stat(cert_file), os.stat(key_file)
    except OSError:
        return None
    return (cert.st_mtime, cert.st_ino), (key.st_mtime, key.st_ino)


def reload_if_changed(context: ssl.SSLContext, settings: TlsSettings, seen: Stamp | None) -> Stamp | None:
    """Re-read the pair into `context` when the files changed since `seen`; the stamp now in use.

    OpenSSL replaces the certificate before it checks the key, so loading a mismatched pair straight into
    the live context would leave it serving a certificate without its key. The pair is therefore read
    once, loaded into a scratch context to prove it, and only then into the live one, from the same bytes.
    """
    now = stamp(settings)
    if now is None or now == seen:
        return seen
    cert_file, key_file = _pair(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="sickbay-tls-") as scratch:
            cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert.write_bytes(cert_file.read_bytes())
            key.touch(mode=0o600)
            key.write_bytes(key_file.read_bytes())
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        log.warning("tls: the changed certificate does not load (kept the old one, will retry): %s", exc)
        return seen
    log.info("tls: reloaded the certificate from %s", cert_file)
    return now


def watch_certificate(settings: TlsSettings) -> Callable[[web.Application], AsyncIterator[None]]:
    """A `cleanup_ctx` step that checks the pair every `reload_interval_s` while the app runs."""

    async def watching(app: web.Application) -> AsyncIterator[None]:
        context = app[TLS_CONTEXT]

        async def loop() -> None:
            seen = stamp(settings)
            while True:
                await asyncio.sleep(settings.reload_interval_s)
                seen = reload_if_changed(context, settings, seen)

        task = asyncio.create_task(loop(), name="sickbay-tls-reload")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    return watching


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: assume others can reach it


def check_exposure(settings: Settings) -> None:
    """Say loudly that `auth.mode: none` lets anyone act; refuse it off loopback unless forced."""
    if settings.auth.mode != "none":
        return
    host = settings.listen_host
    if not is_loopback(host) and not settings.auth.allow_none_on_public_bind:
        raise ConfigError(
            f"auth.mode is 'none' and the listener binds {host}: anyone who reaches port "
            f"{settings.listen_port} could post alerts and reset the breaker. Bind 127.0.0.1, configure "
            "auth, or set auth.allow_none_on_public_bind: true if that is really meant"
        )
    log.warning(
        "AUTHENTICATION IS OFF (auth.mode: none): anyone who reaches %s:%d can post alerts, drive "
        "quarantines and reset the breaker",
        host,
        settings.listen_port,
    )


def prepare(app: web.Application, settings: Settings) -> ssl.SSLContext | None:
    """Check the exposure and load TLS before anything starts; the context `serve` listens with."""
    check_exposure(settings)
    context = tls_context(settings.tls)
    if context is not None:
        app[TLS_CONTEXT] = context
        app.cleanup_ctx.append(watch_certificate(settings.tls))
    return context


def serve(app: web.Application, settings: Settings, *, say: Callable[[str], None]) -> None:
    """Run the app on the configured port until a signal stops it (`web.run_app`, which `say`s where)."""
    context = prepare(app, settings)
    web.run_app(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        ssl_context=context,
        # aiohttp arms this timer when a connection opens and after each response: it bounds both the
        # time to send complete request headers and the time a connection may sit idle.
        keepalive_timeout=settings.http.idle_timeout_s,
        print=say,
        access_log=None,
    )
