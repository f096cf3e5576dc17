"""`sickbay audit`'s arguments. `app.audit.cli` runs it, imported only when it runs.

    sickbay audit --kubeconfig K [--prometheus URL] [--format table|json]

Exit codes (for CI): 0 no findings, 1 findings (warnings; info alone passes), 2 the cluster or
Prometheus cannot be read.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit",
        help="check GPU-node hygiene against the Kubernetes guidance on GPU failures (read-only)",
        description="Read the cluster (and Prometheus with --prometheus) and report, naming the offending "
        "objects, what the Kubernetes guidance on GPU failures advises against. Exit 0: no findings, "
        "1: findings, 2: cannot read.",
    )
    audit.add_argument("--kubeconfig", help="the cluster's kubeconfig (default: the usual one)")
    audit.add_argument("--context", help="a context of the kubeconfig")
    audit.add_argument("--prometheus", help="Prometheus base URL: also check the dcgm-exporter counters")
    audit.add_argument("--format", choices=("table", "json"), default="table")
    audit.add_argument(
        "--min-grace-seconds",
        type=int,
        default=30,
        help="a GPU pod's termination grace period below this is too short to checkpoint (default 30)",
    )
    audit.add_argument(
        "--low-priority-below",
        type=int,
        default=0,
        help="a pod on a GPU node with a priority below this is low-priority (default 0)",
    )
    audit.add_argument("--pool-label", default="sickbay.io/pool", help="the node label naming a pool")
    audit.add_argument(
        "--max-owned-hours",
        type=float,
        default=24.0,
        help="a node Sickbay holds longer than this is a warning, not info (default 24)",
    )
    audit.set_defaults(handler="app.audit.cli:run")
