"""Command-line entry points for the fleet simulator: `simulate` (datasets), `serve` (live exporters) and
`backfill` (a dataset's history into a Prometheus TSDB).

`app.sim.cli` wires these as `sickbay simulate` and `sickbay simulate serve`;
`python -m app.sim.fleet simulate|serve|backfill ...` works on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from app.sim.fleet import backfill, datasets, metrics, personality
from app.sim.fleet.exposition import HostnameLabel
from app.sim.fleet.fleet import FleetSim
from app.sim.fleet.openmetrics import CounterStyle, Grouping
from app.sim.fleet.params import SimConfig
from app.sim.fleet.server import FleetServer, ServerSettings, TimeMode


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=50, help="number of nodes (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--personality",
        choices=personality.NAMES,
        default="classic",
        metavar="NAME",
        help="the fleet's personality: " + ", ".join(personality.NAMES) + " (default classic, the original "
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


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
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


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
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


def _config(args: argparse.Namespace) -> SimConfig:
    config = personality.named(args.personality, seed=args.seed).config()
    config = dataclasses.replace(
        config, rates=dataclasses.replace(config.rates, rate_multiplier=args.rate_multiplier)
    )
    if args.no_auto_repair:
        config = dataclasses.replace(config, ops=dataclasses.replace(config.ops, auto_repair_after_s=None))
    return config


def _hostname_label(args: argparse.Namespace, config: SimConfig) -> HostnameLabel:
    if args.hostname_label is None:
        return config.exporter.host_label
    return None if args.hostname_label == "none" else cast(HostnameLabel, args.hostname_label)


def run_simulate(args: argparse.Namespace) -> int:
    if args.out is None:
        print("sickbay simulate: --out DIR is required to write a dataset", file=sys.stderr)
        return 2
    formats = tuple(args.format or ["csv"])
    config = _config(args)
    report = datasets.write_dataset(
        args.out,
        nodes=args.nodes,
        duration_s=args.days * 86400.0,
        step_s=args.step,
        seed=args.seed,
        config=config,
        formats=cast(Sequence[datasets.Format], formats),
        hostname_label=_hostname_label(args, config),
        counter_style=cast(CounterStyle, args.counter_style),
        grouping=cast(Grouping, args.grouping),
        om_families=metrics.RULE_FAMILIES if args.om_families == "rules" else None,
    )
    print(json.dumps(datasets.report_dict(report), indent=2))
    return 0


def _start(text: str) -> datetime:
    if text == "now":
        return datetime.now(UTC)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def run_serve(args: argparse.Namespace) -> int:
    config = _config(args)
    sim = FleetSim(nodes=args.nodes, seed=args.seed, config=config, start=_start(args.start))
    settings = ServerSettings(
        time_mode=cast(TimeMode, args.time_mode),
        tick_s=args.tick,
        speed=args.speed,
        hostname_label=_hostname_label(args, config),
    )

    async def serve() -> None:
        async with FleetServer(sim, host=args.host, port=args.port, settings=settings) as server:
            if args.prometheus_dir:
                path = server.write_prometheus_config(args.prometheus_dir, node_label=args.node_label)
                print(f"prometheus config: {path}", file=sys.stderr)
            print(f"simulated fleet of {args.nodes} nodes on {server.url}", file=sys.stderr)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0


def add_backfill_arguments(parser: argparse.ArgumentParser) -> None:
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
        choices=("Hostname", "hostname", "node", "kubernetes_node"),
        default="Hostname",
        help="the label that names the node (default Hostname, as released dcgm-exporters)",
    )
    parser.add_argument(
        "--target-labels", action="store_true", help="add `instance` and `job` (about 40 more bytes/sample)"
    )
    parser.add_argument("--promtool", type=Path, help="promtool binary (default: on PATH)")
    parser.add_argument("--jobs", type=int, default=2, help="promtool runs at once (default 2)")


def run_backfill(args: argparse.Namespace) -> int:
    om_dir: Path | None = args.dataset / "backfill-om" if args.keep_om is True else args.keep_om
    try:
        stats = backfill.backfill(
            args.dataset,
            args.tsdb,
            promtool=backfill.find_promtool(args.promtool),
            om_dir=om_dir,
            host_label=cast(backfill.HostLabel, args.host_label),
            target_labels=args.target_labels,
            jobs=args.jobs,
        )
    except backfill.BackfillError as exc:
        print(f"sickbay backfill: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(stats.as_dict(), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.sim.fleet", description="simulated GPU fleet")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    simulate = sub.add_parser("simulate", help="write a dataset (time series, ground truth, OpenMetrics)")
    add_simulate_arguments(simulate)
    simulate.set_defaults(run=run_simulate)
    serve = sub.add_parser("serve", help="serve every node's dcgm-exporter metrics and a control API")
    add_serve_arguments(serve)
    serve.set_defaults(run=run_serve)
    fill = sub.add_parser(
        "backfill", help="write a dataset's predictor metrics into a Prometheus TSDB (promtool)"
    )
    add_backfill_arguments(fill)
    fill.set_defaults(run=run_backfill)
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code
