"""A real Alertmanager delivers to `sickbay serve` over HTTPS, trusting the CA through its `http_config`.

With `tls.cert_file` and `tls.key_file` set, the port speaks TLS only: the alert arrives through the
webhook receiver's `http_config.tls_config.ca_file` (Alertmanager's documented way to trust a private CA:
https://prometheus.io/docs/alerting/latest/configuration/#tls_config), is journaled, and a plain HTTP
request to the same port gets no HTTP answer at all.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.integration.test_alertmanager_delivery import (
    TOKEN,
    alertmanager,  # noqa: F401 - the fixture
    amtool_add,
    fault_seqs,
    inbox_rows,
    metric,
    wait_for,
)
from tests.integration.test_alertmanager_delivery import pytestmark as _delivery_marks
from tests.tlsfiles import make_tls, needs_openssl

# The same marks as the plain delivery test (slow, real clock, skipped without Alertmanager), and openssl.
pytestmark = [*_delivery_marks, needs_openssl]

FATAL = {
    "alertname": "GpuXidFatal",
    "node": "gpu-tls-1",
    "gpu": "2",
    "xid": "79",
    "sickbay_class": "reboot-node",
}


def fetch(url: str, *, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """(status, body); status 0 when no HTTP answer came back (refused, reset, not HTTP)."""
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, http.client.HTTPException):
        return 0, b""


def test_alertmanager_delivers_over_tls_and_plain_http_is_refused(
    sickbay_server,
    alertmanager,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    tls = make_tls(tmp_path / "tls")
    server = sickbay_server(token=TOKEN, tls=tls)
    assert server.url.startswith("https://")
    trust = server.ssl_context()

    # HTTPS only: plain HTTP to the same port gets no HTTP answer; HTTPS without trusting the CA fails too.
    plain = server.url.replace("https://", "http://", 1)
    assert fetch(f"{plain}/healthz") == (0, b"")
    assert fetch(f"{server.url}/healthz", context=ssl.create_default_context())[0] == 0
    assert fetch(f"{server.url}/healthz", context=trust) == (200, b'{"status": "ok"}')

    am = alertmanager(f"{server.url}/api/v1/alerts", ca_file=tls.ca)
    amtool_add(am.url, FATAL, start=(datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0))

    rows = wait_for("the alert in the inbox over TLS", lambda: inbox_rows(server.db) or None)
    assert [(r["node"], r["source"], r["status"]) for r in rows] == [("gpu-tls-1", "alertmanager", "firing")]
    wait_for("the alert journaled", lambda: fault_seqs(server.db) == [rows[0]["seq"]])
    status, body = fetch(f"{server.url}/api/v1/actions", context=trust)
    assert status == 200
    (entry,) = json.loads(body)["items"]
    assert (entry["node"], entry["xid"], entry["class"]) == ("gpu-tls-1", 79, "reboot-node")

    am_metrics = fetch(f"{am.url}/metrics")[1].decode()
    assert metric(am_metrics, "alertmanager_notifications_failed_total", integration="webhook") == 0
    assert metric(am_metrics, "alertmanager_notifications_total", integration="webhook") >= 1
