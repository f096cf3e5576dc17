"""promtool runs that turn OpenMetrics files into TSDB blocks, up to `jobs` at once in the background.

promtool parses a file once per block it makes and keeps the block in memory, so each run holds one
window's block; a failed run raises `BackfillError` with the end of its output.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from app.sim.fleet.backfill_results import BackfillError


class Promtool:
    """Up to `jobs` `promtool tsdb create-blocks-from openmetrics` runs at once, in the background."""

    def __init__(self, promtool: Path, tsdb_dir: Path, *, block_s: float, jobs: int) -> None:
        self.promtool = promtool
        self.tsdb_dir = tsdb_dir
        self.block_s = block_s
        self.jobs = max(1, jobs)
        self.seconds = 0.0
        self._running: list[tuple[subprocess.Popen[bytes], Path, float, bool]] = []

    def start(self, path: Path, *, remove: bool) -> None:
        while len(self._running) >= self.jobs:
            self._wait_oldest()
        command = [
            str(self.promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            f"--max-block-duration={int(self.block_s)}s",
            str(path),
            str(self.tsdb_dir),
        ]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._running.append((proc, path, time.perf_counter(), remove))

    def wait(self) -> None:
        while self._running:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        proc, path, started, remove = self._running.pop(0)
        output, _ = proc.communicate()
        self.seconds += time.perf_counter() - started
        if proc.returncode != 0:
            text = output.decode(errors="replace")[-3000:]
            raise BackfillError(f"promtool failed on {path} (exit {proc.returncode}):\n{text}")
        if remove:
            path.unlink(missing_ok=True)

    def stop(self) -> None:
        for proc, *_ in self._running:
            proc.kill()
            proc.wait()
        self._running.clear()


def find_promtool(explicit: Path | None = None) -> Path:
    """`explicit`, or promtool on PATH."""
    if explicit is not None:
        return explicit
    found = shutil.which("promtool")
    if found is None:
        raise BackfillError("promtool not found: install Prometheus (Debian package `prometheus`)")
    return Path(found)
