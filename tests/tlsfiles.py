"""Throwaway TLS material for tests: a self-signed CA and a server certificate it signs, made with the
`openssl` command (no Python crypto dependency), valid for 127.0.0.1 and localhost.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate a client trusts
    cert: Path  # the server's certificate (PEM)
    key: Path  # the server's private key (PEM)


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    done = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)} failed: {done.stderr.decode(errors='replace')}"


def make_ca(folder: Path, *, name: str = "sickbay-test-ca") -> tuple[Path, Path]:
    """(CA certificate, CA key) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
        cwd=folder,
    )  # fmt: skip
    return cert, key


def make_server_cert(
    folder: Path, ca: tuple[Path, Path], *, name: str = "server", common_name: str = "sickbay"
) -> TlsFiles:
    """A server certificate signed by `ca`, for 127.0.0.1 and localhost, written to `folder/name.*`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = ca
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    ext = folder / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n"
    )
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={common_name}",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext),
        cwd=folder,
    )  # fmt: skip
    return TlsFiles(ca=ca_cert, cert=cert, key=key)


def make_tls(folder: Path) -> TlsFiles:
    """A fresh CA and a server certificate from it."""
    return make_server_cert(folder, make_ca(folder))
