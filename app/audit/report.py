"""The audit's findings as a table, as JSON, as counts per kind, and as an exit code for CI."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.audit.checks import Finding, Kind, Severity

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2


def exit_code(findings: Sequence[Finding]) -> int:
    return EXIT_FINDINGS if any(f.severity is Severity.WARNING for f in findings) else EXIT_CLEAN


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    """Findings per kind, every kind present (zero included): bounded, so fit for metric labels."""
    seen = Counter(f.kind for f in findings)
    return {kind.value: seen.get(kind, 0) for kind in Kind}


def as_json(findings: Sequence[Finding], *, now: datetime, prometheus: bool) -> dict[str, Any]:
    return {
        "at": now.isoformat(),
        "prometheus_checked": prometheus,
        "findings": [
            {"kind": f.kind.value, "severity": f.severity.value, "object": f.object, "detail": f.detail}
            for f in findings
        ],
        "counts": {k: v for k, v in counts(findings).items() if v},
        "exit_code": exit_code(findings),
    }


def print_table(findings: Sequence[Finding], console: Console, *, prometheus: bool) -> None:
    if not findings:
        console.print("[green]No findings.[/green]")
    else:
        table = Table(title=f"sickbay audit: {len(findings)} findings", title_justify="left")
        for column in ("kind", "severity", "object", "detail"):
            table.add_column(column, overflow="fold")
        for f in findings:
            style = "yellow" if f.severity is Severity.WARNING else "dim"
            table.add_row(
                escape(f.kind.value), f.severity.value, escape(f.object), escape(f.detail), style=style
            )
        console.print(table)
    if not prometheus:
        console.print("[dim]dcgm-exporter counters not checked (give --prometheus URL).[/dim]")
