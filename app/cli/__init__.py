"""The `sickbay` command: one argparse tree, and the only place that reads argv.

Each package declares its commands' arguments in a light module of its own — `app.cli.commands` (serve,
explain, breaker, model), `app.agent.commands`, `app.audit.commands`, `app.predict.commands`,
`app.demo.commands`, `app.sim.commands` — and names the function that runs each as `"module:function"`. That module is
imported only when its command runs, so parsing a command line loads neither scikit-learn nor the
simulator, the demo or the service: `sickbay agent` starts the collector and nothing else.

Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error; a command may add its own
(3 and up), and its module says which.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from app.agent import commands as agent_commands
from app.audit import commands as audit_commands
from app.cli import commands
from app.config.errors import ConfigError
from app.demo import commands as demo_commands
from app.predict import commands as predict_commands
from app.sim import commands as sim_commands

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    run = handler(args.handler)
    try:
        return run(args)
    except ConfigError as exc:
        print(f"sickbay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The whole tree: every command and sub-command with its arguments, no handler imported."""
    parser = argparse.ArgumentParser(prog="sickbay", description="GPU fault remediation for Kubernetes")
    parser.add_argument("--config", type=Path, help="YAML settings file (default: $SICKBAY_CONFIG)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    commands.add_serve(sub)
    agent_commands.register(sub)
    predict_commands.register(sub)
    demo_commands.register(sub)
    sim_commands.register(sub)
    commands.add_operator_commands(sub)
    audit_commands.register(sub)
    return parser


def handler(name: str) -> Handler:
    """The function `"module:function"` names, its module imported now."""
    module, _, function = name.partition(":")
    return cast(Handler, getattr(importlib.import_module(module), function))
