"""Entry points for `sickbay agent`: `run_agent(settings)` for the CLI, `main_agent(argv)` for a bare process.

They turn start-up failures into one line on stderr and an exit code, and run until SIGTERM/SIGINT. The
real `pynvml` is imported here and only here, lazily, so tests pass a fake and a node without the binding
gets a readable error instead of a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO, cast

from app.agent import nvml as nvml_port
from app.agent.agent import Agent
from app.agent.settings import AgentSettings, load_agent_settings
from app.config.errors import ConfigError

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_NO_NVML = 3


def load_real_nvml() -> nvml_port.NvmlLibrary:
    """The nvidia-ml-py binding; ImportError when it is not installed."""
    import pynvml  # noqa: PLC0415 - deliberately lazy: only production loads the real binding

    return cast(nvml_port.NvmlLibrary, pynvml)


async def run_agent(
    settings: AgentSettings,
    *,
    nvml: nvml_port.NvmlLibrary | None = None,
    stop: asyncio.Event | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run until `stop` is set (or SIGTERM/SIGINT); the process exit code."""
    err = stderr or sys.stderr
    if nvml is None:
        try:
            nvml = load_real_nvml()
        except ImportError:
            print("sickbay agent: the nvidia-ml-py package (module pynvml) is not installed", file=err)
            return EXIT_NO_NVML
    agent = Agent(settings, nvml)
    try:
        await agent.start()
    except nvml_port.NvmlUnavailableError as exc:
        print(f"sickbay agent: {exc}", file=err)
        return EXIT_NO_NVML
    except (OSError, sqlite3.Error) as exc:
        print(f"sickbay agent: cannot start: {exc}", file=err)
        return EXIT_FAILED
    log.info(
        "agent for node %s serving /metrics on %s:%d, pushing to %s",
        settings.node_name,
        settings.listen_host,
        agent.port,
        settings.events_url,
    )
    stopping = stop or asyncio.Event()
    with _signals_set(stopping):
        await stopping.wait()
    await agent.stop()
    return EXIT_OK


@contextlib.contextmanager
def _signals_set(event: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, event.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signal support: the caller's stop event still works
    try:
        yield None
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sickbay agent",
        description="Node-local NVML collector: dcgm-exporter-compatible /metrics and pushed GPU events. "
        "Every option can also be set as SICKBAY_AGENT_<NAME> in the environment.",
    )
    parser.add_argument("--service-url", help="Sickbay service base URL, e.g. http://sickbay.sickbay:8080")
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token")
    parser.add_argument("--node-name", help="Kubernetes node name (default: $NODE_NAME, else host name)")
    parser.add_argument("--listen-port", type=int, help="port for /metrics (default 9402)")
    parser.add_argument("--poll-interval-s", type=float, help="seconds between counter polls (default 10)")
    parser.add_argument("--spool-dir", type=Path, help="directory for the undelivered-event spool")
    parser.add_argument(
        "--hostname-label",
        choices=["Hostname", "hostname"],
        help="label name for the host: Hostname (released dcgm-exporter) or hostname (newest)",
    )
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser.parse_args(argv)


def main_agent(argv: Sequence[str] | None = None) -> int:
    """Parse flags, load settings, run the agent; the process exit code."""
    args = parse_args(argv)
    try:
        settings = load_agent_settings(**vars(args))
    except ConfigError as exc:
        print(f"sickbay agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    return asyncio.run(run_agent(settings))
