"""`sickbay simulate …`: the simulated parts of a GPU cluster, for demos, datasets and tests.

    sickbay simulate --out DIR --nodes 50 --days 2     # datasets + ground truth + OpenMetrics
    sickbay simulate serve --nodes 32 --port 9400       # a live fleet of dcgm-exporters, with fault injection
    sickbay simulate kube-api --seed cluster.yaml       # a simulated Kubernetes API on loopback

`app.cli` hands the rest of the command line here only for `simulate`, so production commands never load
the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from app.sim import kubeapi
from app.sim.fleet import cli as fleet_cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sickbay simulate", description=__doc__.split("\n\n")[0])
    fleet_cli.add_simulate_arguments(parser)
    parser.set_defaults(run=fleet_cli.run_simulate)
    sub = parser.add_subparsers(metavar="PART")
    serve = sub.add_parser("serve", help="serve a live fleet of dcgm-exporters with fault injection")
    fleet_cli.add_serve_arguments(serve)
    serve.set_defaults(run=fleet_cli.run_serve)
    kube_api = sub.add_parser("kube-api", help="serve a simulated Kubernetes API on loopback")
    kube_api.add_argument("--seed", type=Path, help="YAML of nodes, pods, owners and PDBs")
    kube_api.add_argument("--port", type=int, default=0)
    kube_api.add_argument(
        "--kubeconfig-out", type=Path, help="write a kubeconfig for kubectl and sickbay here"
    )
    kube_api.add_argument("--latency-ms", type=float, default=0.0, help="added to every request")
    kube_api.add_argument("--error-rate", type=float, default=0.0, help="share of requests answered 429/500")
    kube_api.add_argument(
        "--grace-scale",
        type=float,
        default=0.0,
        help="a deleted pod stays Terminating for its grace period times this (1: real time; 0, the "
        "default: it goes at once)",
    )
    kube_api.set_defaults(run=_kube_api)
    return parser


def main_simulate(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    code: int = args.run(args)
    return code


def _kube_api(args: argparse.Namespace) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faults = kubeapi.FaultConfig(error_rate=args.error_rate, latency_ms=args.latency_ms)

    def ready(server: kubeapi.KubeApiServer) -> None:
        where = f" (kubeconfig: {args.kubeconfig_out})" if args.kubeconfig_out else ""
        print(f"simulated Kubernetes API at {server.url}{where}", flush=True)

    try:
        asyncio.run(
            kubeapi.run(
                args.seed,
                port=args.port,
                faults=faults,
                kubeconfig_path=args.kubeconfig_out,
                grace_scale=args.grace_scale,
                on_ready=ready,
            )
        )
    except kubeapi.SeedError as exc:
        print(f"sickbay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0
