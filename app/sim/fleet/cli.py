"""What `sickbay simulate` runs for the fleet: `run_simulate` (a dataset), `run_serve` (live exporters) and
`run_backfill` (a dataset's history into a Prometheus TSDB). `app.sim.commands` declares the arguments.
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


def run_backfill(args: argparse.Namespace) -> int:
    om_dir: Path | None = args.dataset / "backfill-om" if args.keep_om is True else args.keep_om
    host_label, needs_instance = backfill.dataset_host_label(args.dataset)
    if args.host_label is not None:
        host_label = None if args.host_label == "none" else cast(backfill.HostLabel, args.host_label)
        needs_instance = host_label is None
    try:
        stats = backfill.backfill(
            args.dataset,
            args.tsdb,
            promtool=backfill.find_promtool(args.promtool),
            om_dir=om_dir,
            host_label=host_label,
            target_labels=args.target_labels or needs_instance,
            jobs=args.jobs,
        )
    except backfill.BackfillError as exc:
        print(f"sickbay simulate backfill: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(stats.as_dict(), indent=2))
    return 0
