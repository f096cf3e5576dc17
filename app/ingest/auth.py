"""Caller authentication as Alertmanager's `http_config` sends it: a bearer token or basic auth.

Comparisons are constant-time and work on any bytes a header holds (aiohttp hands undecodable bytes on as
surrogates). A request without valid credentials gets 401 and nothing is read beyond its headers. This is
the webhook's check; `app.ingest.callers` decides who else may call what.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

from app.config.settings import AuthSettings


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    problem: str = ""


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _equal(given: str, expected: str) -> bool:
    try:
        return hmac.compare_digest(_raw(given), _raw(expected))
    except UnicodeEncodeError:  # a lone surrogate that did not come from undecodable bytes
        return False


def bearer_token(header: str | None) -> str | None:
    """The token of a `Bearer` Authorization header, None when there is none."""
    if not header:
        return None
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None


def matches(given: str, *accepted: SecretStr | None) -> bool:
    """Whether `given` equals one of the configured secrets; every one is compared (no early exit)."""
    found = False
    for secret in accepted:
        if secret is not None and secret.get_secret_value():
            found = _equal(given, secret.get_secret_value()) | found
    return found


def check(header: str | None, settings: AuthSettings) -> Verdict:
    if settings.mode == "none":
        return Verdict(ok=True)
    if not header:
        return Verdict(ok=False, problem="missing Authorization header")
    scheme, _, credentials = header.partition(" ")
    scheme = scheme.lower()
    if settings.mode == "bearer":
        if scheme != "bearer":
            return Verdict(ok=False, problem="expected a Bearer token")
        ok = matches(credentials.strip(), settings.token, settings.previous_token)
        return Verdict(ok=True) if ok else Verdict(ok=False, problem="bad token")
    if scheme != "basic":
        return Verdict(ok=False, problem="expected Basic credentials")
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return Verdict(ok=False, problem="malformed Basic credentials")
    user, _, password = decoded.partition(":")
    expected_password = settings.password.get_secret_value() if settings.password else ""
    # Evaluate both comparisons so timing does not reveal which half was wrong.
    user_ok = _equal(user, settings.username or "")
    password_ok = _equal(password, expected_password)
    return Verdict(ok=True) if user_ok and password_ok else Verdict(ok=False, problem="bad credentials")
