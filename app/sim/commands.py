"""`sickbay simulate`'s arguments: the simulated parts of a GPU cluster, for demos, datasets and tests.

    sickbay simulate --out DIR --nodes 50 --days 2     # datasets + ground truth + OpenMetrics
    sickbay simulate serve --nodes 32 --port 9400       # a live fleet of dcgm-exporters, with fault injection
    sickbay simulate kube-api --seed cluster.yaml       # a simulated Kubernetes API on loopback
    sickbay simulate backfill --dataset DIR --tsdb DIR  # a dataset's history into a Prometheus TSDB

Arguments only: `app.sim.fleet.cli` and `app.sim.kubeapi.cli` run them and are imported when their part
runs, so production commands never load the simulator (`python -m app.sim.fleet` is the same tree).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.sim import personality_names


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = sub.add_parser(
        "simulate",
        help="simulated GPU fleet and Kubernetes API (demos, datasets, tests)",
        description="Write a simulated fleet's dataset (time series, ground truth, OpenMetrics), or run "
        "one of the simulated parts of a GPU cluster.",
    )
    _add_dataset_arguments(simulate)
    simulate.set_defaults(handler="app.sim.fleet.cli:run_simulate")
    parts = simulate.add_subparsers(metavar="PART")
    serve = parts.add_parser(
        "serve",
        help="serve a live fleet of dcgm-exporters with fault injection",
        description="Serve every node's dcgm-exporter metrics and a control API (fault injection).",
    )
    _add_serve_arguments(serve)
    serve.set_defaults(handler="app.sim.fleet.cli:run_serve")
    kube_api = parts.add_parser(
        "kube-api",
        help="serve a simulated Kubernetes API on loopback",
        description="Serve a simulated Kubernetes API on loopback, seeded with nodes, pods and PDBs.",
    )
    _add_kube_api_arguments(kube_api)
    kube_api.set_defaults(handler="app.sim.kubeapi.cli:run_kube_api")
    backfill = parts.add_parser(
        "backfill",
        help="write a dataset's predictor metrics into a Prometheus TSDB (promtool)",
        description="Write a dataset's predictor metrics into a Prometheus TSDB (promtool).",
    )
    _add_backfill_arguments(backfill)
    backfill.set_defaults(handler="app.sim.fleet.cli:run_backfill")


def _add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=50, help="number of nodes (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--personality",
        choices=personality_names.NAMES,
        default="classic",
        metavar="NAME",
        help="the fleet's personality: "
        + ", ".join(personality_names.NAMES)
        + " (default classic, the original "
        "simulator; random and stress-10x are drawn from --seed)",
    )
    parser.add_argument(
        "--rate-multiplier", type=float, default=1.0, help="scale the published GPU failure rate (default 1)"
    )
    parser.add_argument(
        "--hostname-label",
        choices=("Hostname", "hostname", "node", "kubernetes_node", "none"),
        default=None,
        help="host label spelling: released exporters (Hostname), newest (hostname), relabelled (node, "
        "kubernetes_node), or none (default: the personality's; classic: Hostname)",
    )
    parser.add_argument(
        "--no-auto-repair",
        action="store_true",
        help="leave faulted nodes faulted until something repairs them",
    )


def _add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    _add_fleet_arguments(parser)
    # Required for datasets only; checked in run_simulate so `simulate serve|kube-api` need not give it.
    parser.add_argument("--out", type=Path, help="output directory (required for datasets)")
    parser.add_argument("--days", type=float, default=2.0, help="simulated days (default 2)")
    parser.add_argument("--step", type=float, default=60.0, help="sampling step in seconds (default 60)")
    parser.add_argument(
        "--format",
        action="append",
        choices=("csv", "parquet", "openmetrics"),
        help="outputs besides the ground truth (repeatable; default csv). parquet needs pyarrow",
    )
    parser.add_argument(
        "--om-families",
        choices=("all", "rules"),
        default="all",
        help="OpenMetrics: every family or the rules' only",
    )
    parser.add_argument("--counter-style", choices=("unknown", "counter", "suffixed"), default="unknown")
    parser.add_argument("--grouping", choices=("time", "series"), default="time")


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    _add_fleet_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--time-mode", choices=("manual", "realtime"), default="realtime")
    parser.add_argument("--tick", type=float, default=1.0, help="real seconds between steps (realtime)")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    parser.add_argument(
        "--prometheus-dir", type=Path, help="write prometheus.yml and file_sd target files here"
    )
    parser.add_argument("--node-label", action="store_true", help="add a `node` target label (relabelled)")
    parser.add_argument(
        "--start",
        default="now",
        help="simulated start time: ISO-8601 or `now` (default; ground truth then lines up with Prometheus)",
    )


def _add_kube_api_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=Path, help="YAML of nodes, pods, owners and PDBs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig-out", type=Path, help="write a kubeconfig for kubectl and sickbay here")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every request")
    parser.add_argument("--error-rate", type=float, default=0.0, help="share of requests answered 429/500")
    parser.add_argument(
        "--grace-scale",
        type=float,
        default=0.0,
        help="a deleted pod stays Terminating for its grace period times this (1: real time; 0, the "
        "default: it goes at once)",
    )


def _add_backfill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="dataset directory (`simulate --out`)")
    parser.add_argument(
        "--tsdb", type=Path, required=True, help="TSDB directory to add blocks to (Prometheus' storage path)"
    )
    parser.add_argument(
        "--keep-om",
        type=Path,
        nargs="?",
        const=True,
        help="keep the OpenMetrics files, in DIR (default DATASET/backfill-om)",
        metavar="DIR",
    )
    parser.add_argument(
        "--host-label",
        choices=("Hostname", "hostname", "node", "kubernetes_node", "none"),
        default=None,
        help="the label that names the node (default: the dataset's personality's; Hostname, as released "
        "dcgm-exporters, for a dataset without one; none: `instance` only)",
    )
    parser.add_argument(
        "--target-labels", action="store_true", help="add `instance` and `job` (about 40 more bytes/sample)"
    )
    parser.add_argument("--promtool", type=Path, help="promtool binary (default: on PATH)")
    parser.add_argument("--jobs", type=int, default=2, help="promtool runs at once (default 2)")
