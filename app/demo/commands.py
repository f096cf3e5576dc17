"""`sickbay demo`'s arguments. `app.demo.main.run` runs it and is imported only then: the simulator,
the stack and the live view load for the demo alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "out" / "demo"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="the whole loop on a simulated cluster, with a live timeline",
        description="Run the whole pipeline on loopback against scripted GPU faults.",
    )
    parser.add_argument(
        "--nodes", type=int, default=32, help="simulated GPU nodes, 8 GPUs each (default 32, at least 11)"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the simulated fleet and its workloads")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"report and working files (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the cluster running after the scenario, until Ctrl-C"
    )
    parser.set_defaults(handler="app.demo.main:run")
