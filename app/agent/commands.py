"""`sickbay agent`'s arguments. `app.agent.main.run` runs it and is imported only then, so a command line
is parsed without the collector's HTTP server or the NVML binding.

Every flag is an `AgentSettings` field (`app.agent.settings`) by its `dest`; the environment
(`SICKBAY_AGENT_<NAME>`) sets the same fields, and a flag given wins.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "agent",
        help="run the node-local NVML collector (DaemonSet)",
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
    parser.set_defaults(handler="app.agent.main:run")
