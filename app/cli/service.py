"""What `sickbay serve` and `sickbay explain` run (`app.cli.commands` declares their arguments).

Both load settings and call into `runtime` (serve) or the pure code (explain); imported only when one of
them runs, so the other commands never load the service, aiohttp's server or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from datetime import UTC, datetime

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.classify.classifier import Rules
from app.config.settings import Settings, load_settings
from app.domain import Signal
from app.ingest import signals
from app.kube import client as kube_client
from app.obs import logs
from app.service import explain as explaining
from app.service import runtime
from app.service.runtime import listener


def serve(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.host:
        overrides["listen_host"] = args.host
    if args.port is not None:
        overrides["listen_port"] = args.port
    if args.dry_run:
        overrides["dry_run"] = True
    settings = load_settings(args.config, **overrides)
    if args.kubeconfig:
        kube = settings.kube.model_copy(update={"enabled": True, "kubeconfig": args.kubeconfig})
        settings = settings.model_copy(update={"kube": kube})
    if args.db:
        settings = settings.model_copy(update={"inbox": settings.inbox.model_copy(update={"path": args.db})})
    logs.setup(settings.log, level=settings.log_level)
    app = runtime.build_app(settings)
    # Refuses (ConfigError, exit 2) auth.mode none on a public bind, and a TLS pair that does not load.
    listener.serve(app, settings, say=lambda msg: logging.getLogger("sickbay").info("%s", msg))
    return 0


def explain(args: argparse.Namespace) -> int:
    # explain serves nothing, so webhook credentials are irrelevant to it.
    settings = load_settings(args.config, auth={"mode": "none"})
    rules = runtime.load_rules(settings)
    try:
        raw = args.payload.read_bytes()
    except OSError as exc:
        print(f"sickbay: cannot read {args.payload}: {exc.strerror}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    try:
        batch = explaining.parse_payload(raw, keys=signals.NodeKeys.of(settings), now=now)
    except explaining.ExplainError as exc:
        print(f"sickbay: {args.payload}: {exc}", file=sys.stderr)
        return 2
    items = asyncio.run(
        _explain_with_cluster(batch, rules=rules, now=now, kubeconfig=args.kubeconfig, settings=settings)
    )
    if args.format == "json":
        print(explaining.to_json(items))
        return 0
    _print_table(items)
    return 0


async def _explain_with_cluster(
    batch: list[Signal], *, rules: Rules, now: datetime, kubeconfig: str | None, settings: Settings
) -> list[explaining.Explained]:
    if kubeconfig is None:
        return await explaining.explain(batch, rules=rules, now=now)
    # The same client settings as serve, so the same pods count as GPU pods in both.
    kube = await kube_client.connect(
        kubeconfig=kubeconfig, context=settings.kube.context, gpu_resources=settings.kube.gpu_resources
    )
    try:
        return await explaining.explain(batch, rules=rules, now=now, kube=kube)
    finally:
        await kube.close()


def _print_table(items: list[explaining.Explained]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = Table(title="What Sickbay would do", show_lines=True, expand=True)
    for column in ("alert", "node", "gpu", "class", "why", "plan"):
        table.add_column(column, overflow="fold")
    for item in items:
        fault, plan = item.fault, item.plan
        signal = fault.signal
        name = signal.name + (f"\nXID {signal.xid}" if signal.xid is not None else "")
        name += "" if signal.firing else "\n(resolved)"
        steps = "\n".join(
            f"[{a.track.value}] {a.kind.value}" + (f" {a.pod}" if a.pod else "") for a in plan.actions
        )
        # Everything here can come from alert labels: escape it so it is shown, never interpreted.
        cells = (
            name,
            signal.node or "-",
            "-" if signal.gpu is None else str(signal.gpu),
            fault.fault_class.value,
            fault.reason,
            f"{plan.summary}\n{steps}",
        )
        table.add_row(*(escape(cell) for cell in cells))
    console.print(table)
