"""The API server's proxy from the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), read once.

The official async client opens its aiohttp session with `trust_env=True`, and aiohttp then reads the
proxy variables (and `~/.netrc`) again on every request, in a worker thread: two thread hops per request,
which in a storm of node writes was a visible share of the client's CPU. The API server's address does
not change while the client lives, so `connect` asks here once, hands the answer to the client as its
configured proxy and turns `trust_env` off. What is decided is what aiohttp decides per request
(`aiohttp.helpers.get_env_proxy_for_url`): no proxy for a host `NO_PROXY` covers, else the proxy for
the URL's scheme; an `https://` proxy URL is not supported by aiohttp and is ignored with a warning;
credentials in the proxy URL become a `Proxy-Authorization` header. `~/.netrc` is not read: the client
authenticates with its own header, which aiohttp refuses to combine with a netrc login anyway.
"""

from __future__ import annotations

import base64
import logging
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Proxy:
    url: str
    headers: dict[str, str] = field(default_factory=dict)


def env_proxy(server: str) -> Proxy | None:
    """The proxy the environment names for requests to `server` (the API server's URL), or None."""
    parts = urllib.parse.urlsplit(server)
    host = parts.hostname or ""
    if host and urllib.request.proxy_bypass(host):
        return None
    raw = urllib.request.getproxies().get(parts.scheme)
    if not raw:
        return None
    proxy = urllib.parse.urlsplit(raw)
    if proxy.scheme in ("https", "wss"):
        log.warning("%s proxies %s are not supported, ignoring", proxy.scheme.upper(), raw)
        return None
    if proxy.username is None:
        return Proxy(url=raw)
    login = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
    netloc = proxy.hostname or ""
    if ":" in netloc:  # an IPv6 address keeps its brackets
        netloc = f"[{netloc}]"
    if proxy.port is not None:
        netloc = f"{netloc}:{proxy.port}"
    bare = urllib.parse.urlunsplit((proxy.scheme, netloc, proxy.path, proxy.query, proxy.fragment))
    token = base64.b64encode(login.encode("latin-1")).decode("ascii")
    return Proxy(url=bare, headers={"Proxy-Authorization": f"Basic {token}"})
