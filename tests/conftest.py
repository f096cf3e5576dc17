"""Shared fixtures: free ports, Debian's Prometheus binaries, and real `sickbay serve` processes that are
always stopped at teardown."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from app.demo.processes import free_port as _free_port
from tests import year_ahead
from tests.tlsfiles import TlsFiles

REPO = Path(__file__).resolve().parents[1]
_CLOCK_LINE = pytest.StashKey[str | None]()


def pytest_configure(config: pytest.Config) -> None:
    """A run asked to be a year ahead (scripts/year-ahead.sh) stops here, failing, if its clock is not."""
    try:
        config.stash[_CLOCK_LINE] = year_ahead.check()
    except year_ahead.NotAhead as exc:
        raise pytest.UsageError(f"year-ahead run: {exc}") from exc


def pytest_report_header(config: pytest.Config) -> str | None:
    return config.stash.get(_CLOCK_LINE, None)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    line = config.stash.get(_CLOCK_LINE, None)
    if line:  # also under -q, which hides the header: the log of a year-ahead run says it was one
        terminalreporter.write_line(f"year-ahead run: {line}")


@pytest.fixture(autouse=True)
def _no_risk_model_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the shipped model costs ~0.3 s of CPU per service start; only the tests about prediction
    need it (they pass `prediction=...` to the settings, which wins over the environment)."""
    monkeypatch.setenv("SICKBAY_PREDICTION__ENABLED", "false")


def _sickbay_command() -> list[str]:
    script = Path(sys.executable).with_name("sickbay")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


@dataclass
class SickbayServer:
    """One `sickbay serve` child process; `url` is its base URL, `log` holds its stderr and stdout."""

    proc: subprocess.Popen[bytes]
    port: int
    db: Path
    token: str
    log: Path
    log_file: IO[bytes] | None = field(repr=False, default=None)
    ca: Path | None = None  # the CA that signed its certificate, when it serves HTTPS

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting the server's CA; None for plain HTTP."""
        return None if self.ca is None else ssl.create_default_context(cafile=str(self.ca))

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash or an OOM kill."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.log_file is not None:
            self.log_file.close()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll /readyz until it answers 200; fail early (with the log) if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sickbay exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(
                    f"{self.url}/readyz", timeout=2, context=self.ssl_context()
                ) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"sickbay not ready after {timeout:.0f}s:\n{self.log_tail()}")


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus`; `make setup` installs it)")
    return Path(found)


@pytest.fixture
def promtool() -> Path:
    return _binary("promtool")


@pytest.fixture
def prometheus() -> Path:
    return _binary("prometheus")


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A factory of currently unused loopback TCP ports."""
    return _free_port


@pytest.fixture
def sickbay_server(tmp_path: Path) -> Iterator[Callable[..., SickbayServer]]:
    """Factory: `start(db=..., token=...)` runs `sickbay serve` on a free port and waits until it is ready.

    Every process it started is stopped at teardown, whatever the test did with it.
    """
    started: list[SickbayServer] = []

    def start(
        *,
        db: Path | None = None,
        token: str = "test-token",
        env: dict[str, str] | None = None,
        tls: TlsFiles | None = None,
    ) -> SickbayServer:
        db = db or tmp_path / "sickbay.db"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
        # No risk model unless the test asks (as in-process, `_no_risk_model_unless_asked`): loading one
        # costs each child seconds of CPU on a loaded 2-core machine.
        child_env |= {"SICKBAY_AUTH__TOKEN": token, "SICKBAY_PREDICTION__ENABLED": "false", **(env or {})}
        if tls is not None:
            child_env |= {"SICKBAY_TLS__CERT_FILE": str(tls.cert), "SICKBAY_TLS__KEY_FILE": str(tls.key)}
        last_error: Exception | None = None
        for attempt in range(3):  # a port picked free can be taken before the child binds it: retry
            port = _free_port()
            log = tmp_path / f"sickbay-{len(started)}-{attempt}.log"
            log_file = log.open("wb")
            proc = subprocess.Popen(
                [*_sickbay_command(), "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(db)],
                cwd=REPO,
                env=child_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
            server = SickbayServer(
                proc=proc,
                port=port,
                db=db,
                token=token,
                log=log,
                log_file=log_file,
                ca=None if tls is None else tls.ca,
            )
            started.append(server)
            try:
                server.wait_ready()
            except RuntimeError as exc:  # exited: retry only if the port was taken
                last_error = exc
                if "address already in use" not in server.log_tail().lower():
                    raise
                continue
            return server
        raise RuntimeError(f"could not start sickbay: {last_error}")

    try:
        yield start
    finally:
        for server in started:
            server.stop()
