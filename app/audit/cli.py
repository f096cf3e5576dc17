"""`sickbay audit`: read, check, report. Exit codes in `app.audit.commands`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

import aiohttp
from rich.console import Console

from app.audit import checks, report, snapshot
from app.kube.client import connect
from app.kube.errors import KubeError


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    config = checks.AuditConfig(
        min_grace_s=args.min_grace_seconds,
        low_priority_below=args.low_priority_below,
        pool_label=args.pool_label,
        max_owned_s=args.max_owned_hours * 3600.0,
    )
    try:
        async with await connect(kubeconfig=args.kubeconfig, context=args.context) as client:
            snap = await snapshot.read_cluster(client, now=now)
        if args.prometheus:
            exported = await snapshot.exported_fields(args.prometheus)
            snap = snapshot.with_fields(snap, exported, snapshot.needed_fields())
    except (KubeError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
        print(f"sickbay audit: cannot read: {error}", file=sys.stderr)
        return report.EXIT_UNREADABLE
    findings = checks.audit(snap, config)
    if args.format == "json":
        print(json.dumps(report.as_json(findings, now=now, prometheus=bool(args.prometheus)), indent=2))
    else:
        report.print_table(findings, Console(), prometheus=bool(args.prometheus))
    return report.exit_code(findings)
