"""Child processes of the stack (Prometheus, Alertmanager, `sickbay serve`): free ports, log files, readiness,
stop."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import aiohttp


class StackError(RuntimeError):
    """A part of the stack did not start or stopped unexpectedly; the message carries its log."""


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def binary(name: str, fallback: str) -> str:
    return shutil.which(name) or fallback


def sickbay_command() -> list[str]:
    script = Path(sys.executable).with_name("sickbay")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


_SETPRIV = shutil.which("setpriv")


@dataclass
class Child:
    """One child process with its log file; stopped with SIGTERM, then SIGKILL."""

    name: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = field(default=None, repr=False)

    def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        # The child gets SIGTERM if this process dies without stopping it (setpriv's parent-death signal),
        # and its own process group, so a Ctrl-C at the terminal reaches only us and we stop it in order.
        prefix = [_SETPRIV, "--pdeathsig", "TERM", "--"] if _SETPRIV else []
        self._out = self.log.open("ab")
        self._out.write(f"\n--- {datetime.now(UTC).isoformat()} {' '.join(argv)}\n".encode())
        self._out.flush()
        self.proc = subprocess.Popen(
            [*prefix, *argv],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        if self.running and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        if self._out is not None:
            self._out.close()
            self._out = None

    def stop(self, timeout: float = 10.0) -> None:
        self.terminate()
        self.wait(timeout)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


async def http_get(session: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, bytes]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2), **kwargs) as response:
            return response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return 0, b""


async def wait_http(session: aiohttp.ClientSession, child: Child, url: str, *, within_s: float) -> bool:
    """True once `url` answers 200; False if the child exited (e.g. its port was taken)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not child.running:
            return False
        status, _ = await http_get(session, url)
        if status == 200:
            return True
        await asyncio.sleep(0.05)
    raise StackError(f"{child.name} not ready after {within_s:.0f}s:\n{child.tail()}")


async def start_on_free_port(
    session: aiohttp.ClientSession,
    child: Child,
    argv_for_port: Callable[[int], Sequence[str]],
    ready_path: str,
    *,
    within_s: float,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> str:
    """Start `child` on `port` (or a free one) and wait until `ready_path` answers; its URL."""
    for attempt in range(3):  # a port picked free can be taken before the child binds it: retry
        port = port if attempt == 0 and port is not None else free_port()
        child.start(argv_for_port(port), env=env, cwd=cwd)
        url = f"http://127.0.0.1:{port}"
        if await wait_http(session, child, url + ready_path, within_s=within_s):
            return url
        child.wait(timeout=5)
        if "address already in use" not in child.tail().lower():
            break
    raise StackError(f"{child.name} exited during start:\n{child.tail()}")
