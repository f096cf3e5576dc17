"""Caller authentication as Alertmanager's `http_config` sends it: a bearer token or basic auth.

Comparisons are constant-time and take any text: aiohttp decodes header bytes that are not UTF-8 as lone
surrogates (surrogateescape), which strict UTF-8 cannot encode, so a header of `\xff\xfe` must answer 401,
never raise. A request without valid credentials gets 401 and nothing is read beyond its headers.
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass

from app.config.settings import AuthSettings


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    problem: str = ""


def _equal(given: str, expected: str) -> bool:
    # surrogatepass encodes every str, lone surrogates included; those become bytes (ED A0..BF ..) that
    # no surrogate-free text encodes to, so a mangled header can never equal a configured secret.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def check(header: str | None, settings: AuthSettings) -> Verdict:
    if settings.mode == "none":
        return Verdict(ok=True)
    if not header:
        return Verdict(ok=False, problem="missing Authorization header")
    scheme, _, credentials = header.partition(" ")
    scheme = scheme.lower()
    if settings.mode == "bearer":
        token = settings.token.get_secret_value() if settings.token else ""
        if scheme != "bearer":
            return Verdict(ok=False, problem="expected a Bearer token")
        return (
            Verdict(ok=True) if _equal(credentials.strip(), token) else Verdict(ok=False, problem="bad token")
        )
    if scheme != "basic":
        return Verdict(ok=False, problem="expected Basic credentials")
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except ValueError:  # binascii.Error, a str with non-ASCII characters, bad UTF-8: all ValueErrors
        return Verdict(ok=False, problem="malformed Basic credentials")
    user, _, password = decoded.partition(":")
    expected_password = settings.password.get_secret_value() if settings.password else ""
    # Evaluate both comparisons so timing does not reveal which half was wrong.
    user_ok = _equal(user, settings.username or "")
    password_ok = _equal(password, expected_password)
    return Verdict(ok=True) if user_ok and password_ok else Verdict(ok=False, problem="bad credentials")
