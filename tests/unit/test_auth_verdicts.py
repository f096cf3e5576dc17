"""The webhook's credential check, case by case: which headers pass, and the problem each refusal names
(the 401's message). Table-driven over both modes, the rotation token, and what a header may look like."""

from __future__ import annotations

import base64

import pytest
from pydantic import SecretStr

from app.config.settings import AuthSettings
from app.ingest import auth

BEARER = AuthSettings(mode="bearer", token="s3cret", previous_token="old")
BASIC = AuthSettings(mode="basic", username="am", password="p:w")
NONE = AuthSettings(mode="none")


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("header", "settings", "problem"),
    [
        # mode none: anything passes, no header at all included
        (None, NONE, None),
        ("Bearer wrong", NONE, None),
        # bearer
        ("Bearer s3cret", BEARER, None),
        ("bearer s3cret", BEARER, None),  # the scheme is case-insensitive
        ("BEARER s3cret", BEARER, None),
        ("Bearer s3cret  ", BEARER, None),  # surrounding blanks are not part of the token
        ("Bearer old", BEARER, None),  # the previous token still works during a rotation
        (None, BEARER, "missing Authorization header"),
        ("", BEARER, "missing Authorization header"),
        ("Bearer wrong", BEARER, "bad token"),
        ("Bearer s3cre", BEARER, "bad token"),
        ("Bearer s3cretx", BEARER, "bad token"),
        ("Bearer ", BEARER, "bad token"),
        ("Bearer", BEARER, "bad token"),
        ("s3cret", BEARER, "expected a Bearer token"),
        ("Basic s3cret", BEARER, "expected a Bearer token"),
        ("Bearers3cret", BEARER, "expected a Bearer token"),
        # basic: the password may itself hold a colon; only the first one splits
        (basic("am:p:w"), BASIC, None),
        ("basic " + basic("am:p:w")[6:], BASIC, None),
        ("Basic  " + basic("am:p:w")[6:] + " ", BASIC, None),
        (None, BASIC, "missing Authorization header"),
        (basic("am:p:x"), BASIC, "bad credentials"),
        (basic("xm:p:w"), BASIC, "bad credentials"),
        (basic("am"), BASIC, "bad credentials"),
        (basic("am:"), BASIC, "bad credentials"),
        (basic(":p:w"), BASIC, "bad credentials"),
        (basic("am:p"), BASIC, "bad credentials"),
        ("Bearer s3cret", BASIC, "expected Basic credentials"),
        (basic("am:p:w")[6:], BASIC, "expected Basic credentials"),
        # characters outside the base64 alphabet are refused, not skipped over
        ("Basic " + basic("am:p:w")[6:10] + "*" + basic("am:p:w")[10:], BASIC, "malformed Basic credentials"),
        ("Basic YW06cDp3", BASIC, None),
        ("Basic YW06cDp3!", BASIC, "malformed Basic credentials"),
        ("Basic " + base64.b64encode(b"am:\xff").decode(), BASIC, "malformed Basic credentials"),
    ],
)
def test_each_header_gets_the_verdict_it_should(
    header: str | None, settings: AuthSettings, problem: str | None
) -> None:
    verdict = auth.check(header, settings)
    if problem is None:
        assert verdict == auth.Verdict(ok=True, problem="")
    else:
        assert verdict == auth.Verdict(ok=False, problem=problem)


def test_a_basic_setup_without_a_password_takes_only_an_empty_one() -> None:
    no_password = AuthSettings.model_construct(mode="basic", username="am", password=None)
    assert auth.check(basic("am:"), no_password).ok
    assert auth.check(basic("am:x"), no_password) == auth.Verdict(ok=False, problem="bad credentials")
    no_user = AuthSettings.model_construct(mode="basic", username=None, password=SecretStr("pw"))
    assert auth.check(basic(":pw"), no_user).ok
    assert not auth.check(basic("x:pw"), no_user).ok


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BeArEr  abc ", "abc"),
        ("Bearer ", None),
        ("Bearer    ", None),
        ("Bearer", None),
        ("Basic abc", None),
        ("abc", None),
        ("Bearer a b", "a b"),
    ],
)
def test_bearer_token_reads_the_token_or_none(header: str | None, token: str | None) -> None:
    assert auth.bearer_token(header) == token


@pytest.mark.parametrize(
    ("given", "accepted", "expected"),
    [
        ("a", (SecretStr("a"),), True),
        ("a", (SecretStr("a"), SecretStr("b")), True),  # a match is not undone by a later miss
        ("b", (SecretStr("a"), SecretStr("b")), True),
        ("c", (SecretStr("a"), SecretStr("b")), False),
        ("a", (None, SecretStr("a")), True),
        ("a", (SecretStr("a"), None), True),
        ("a", (None,), False),
        ("a", (), False),
        # an unset (empty) secret matches nothing, not even an empty credential
        ("", (SecretStr(""),), False),
        ("", (None, SecretStr("")), False),
        ("", (SecretStr(""), SecretStr("a")), False),
        ("a", (SecretStr("A"),), False),
        ("\udcff", (SecretStr("\udcff"),), True),  # any text compares, lone surrogates included
        ("\udcff", (SecretStr("?"),), False),
    ],
)
def test_matches_any_configured_secret(
    given: str, accepted: tuple[SecretStr | None, ...], expected: bool
) -> None:
    assert auth.matches(given, *accepted) is expected
