"""What `sickbay simulate kube-api` runs: the simulated Kubernetes API on loopback, until Ctrl-C.

`app.sim.commands` declares the arguments. Exit codes: 0 stopped, 2 an unusable seed file.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from app.sim import kubeapi


def run_kube_api(args: argparse.Namespace) -> int:
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
