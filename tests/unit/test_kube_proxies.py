"""The environment's proxy for the API server, read once: what aiohttp would pick per request."""

from __future__ import annotations

import pytest

from app.kube.proxies import env_proxy


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_no_proxy_variables_no_proxy() -> None:
    assert env_proxy("https://10.0.0.1:6443") is None


def test_the_schemes_proxy_with_its_credentials_as_a_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "http://user:p%40ss@proxy.example:3128")
    found = env_proxy("https://api.example:6443")
    assert found is not None
    assert found.url == "http://proxy.example:3128"
    assert found.headers == {"Proxy-Authorization": "Basic dXNlcjpwQHNz"}  # user:p@ss


def test_no_proxy_covers_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "api.example")
    assert env_proxy("https://api.example:6443") is None


def test_an_https_proxy_is_ignored_as_aiohttp_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "https://proxy.example:3128")
    assert env_proxy("https://api.example:6443") is None
