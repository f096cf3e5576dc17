"""`sickbay serve`'s listener, as a real process: a renewed certificate is served without a restart, and
connections that stay idle or never finish their headers are closed after `http.idle_timeout_s`."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import time
from pathlib import Path

import pytest

from tests.tlsfiles import make_ca, make_server_cert, needs_openssl

pytestmark = pytest.mark.slow


def served_common_name(port: int, ca: Path) -> str:
    """The CN of the certificate a fresh TLS connection to `port` is shown, verified against `ca`."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    subject = dict(pair[0] for pair in cert["subject"])
    return str(subject["commonName"])


def closed_by_server(sock: socket.socket, *, within: float) -> bool:
    """True when the server closes `sock` (EOF or reset) before `within` seconds pass."""
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@needs_openssl
def test_a_renewed_certificate_is_served_without_a_restart(sickbay_server, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    first = make_server_cert(tmp_path / "first", ca, common_name="sickbay-first")
    second = make_server_cert(tmp_path / "second", ca, common_name="sickbay-second")
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "tls.crt", live / "tls.key"
    shutil.copy(first.cert, cert)
    shutil.copy(first.key, key)
    tls = type(first)(ca=first.ca, cert=cert, key=key)
    server = sickbay_server(tls=tls, env={"SICKBAY_TLS__RELOAD_INTERVAL_S": "0.2"})
    assert served_common_name(server.port, ca[0]) == "sickbay-first"

    # A half-written renewal (the key not yet replaced) must not take the served certificate down.
    shutil.copy(second.cert, cert)
    time.sleep(1.0)
    assert served_common_name(server.port, ca[0]) == "sickbay-first"
    assert "kept the old one" in server.log_tail()

    # As cert-manager's kubelet mount does it: new files swapped in whole.
    for source, target in ((second.key, key), (second.cert, cert)):
        staged = target.with_suffix(".new")
        shutil.copy(source, staged)
        os.replace(staged, target)
    deadline = time.monotonic() + 30
    while served_common_name(server.port, ca[0]) != "sickbay-second":
        assert time.monotonic() < deadline, f"never served the renewed certificate:\n{server.log_tail()}"
        time.sleep(0.1)
    assert "reloaded the certificate" in server.log_tail()


def test_idle_and_header_dribbling_connections_are_closed(sickbay_server) -> None:
    server = sickbay_server(env={"SICKBAY_HTTP__IDLE_TIMEOUT_S": "0.5"})
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    dribbling = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    dribbling.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    kept_alive = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        assert kept_alive.recv(4096).startswith(b"HTTP/1.1 200")
        # Generous bounds: the point is that the server closes them at all (the default held them on).
        assert closed_by_server(idle, within=20)
        assert closed_by_server(dribbling, within=20)
        assert closed_by_server(kept_alive, within=20)  # idle after its answer
    finally:
        for sock in (idle, dribbling, kept_alive):
            sock.close()
