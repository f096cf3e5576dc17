"""What `sickbay agent` runs: `run(args)` for the command line (`app.agent.commands` declares its flags),
`run_agent(settings)` for tests and anything that has its settings already.

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
from collections.abc import Iterator
from typing import TextIO, cast

from app.agent import nvml as nvml_port
from app.agent.agent import Agent
from app.agent.settings import AgentSettings, load_agent_settings
from app.config.errors import ConfigError
from app.config.settings import LogSettings
from app.obs import logs

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


def run(args: argparse.Namespace) -> int:
    """`sickbay agent`: settings from the environment and the flags, then the agent; the exit code."""
    flags = {name: value for name, value in vars(args).items() if name in AgentSettings.model_fields}
    try:
        settings = load_agent_settings(**flags)
    except ConfigError as exc:
        print(f"sickbay agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not logging.getLogger().handlers:
        # The service's text format: pod names and driver messages are escaped, one record one line.
        logs.setup(LogSettings(), level=settings.log_level)
    return asyncio.run(run_agent(settings))
