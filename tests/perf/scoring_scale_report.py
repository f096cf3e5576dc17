"""The scale benchmark's tables (`bench_scoring_scale`): Sickbay's cycle, Prometheus' rule cost, the data.

Ratios are against figures of the same run: each size against the first of its kind, and the recorded path
against the raw path at the same size. A figure marked `~` was not measured: it is the raw-path sizes'
per-GPU cost (a least-squares line through them) carried to that size, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line; through the origin's slope with one point."""
    if len(xs) < 2:
        return 0.0, ys[0] / xs[0]
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(intercept), float(slope)


def _eval(row: dict[str, Any]) -> tuple[int, float, float, int, int]:
    """(rules evaluated, seconds for all of them, slowest, samples, peak samples)."""
    costs = row.get("prometheus", {}).get("rules", [])
    if not costs:
        return 0, 0.0, 0.0, 0, 0
    return (
        len(costs),
        sum(c["eval_s"] for c in costs),
        max(c["eval_s"] for c in costs),
        sum(c["samples"] for c in costs),
        max(c["peak_samples"] for c in costs),
    )


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.2f}x" if base else ""


def render(report: dict[str, Any], *, out: Path) -> Group:
    rows: list[dict[str, Any]] = report["rows"]
    raw_rows = [r for r in rows if "raw" in r]
    copied = [r for r in rows if "raw" not in r]
    cycle = Table(
        title=f"Scoring cycle, 7 d look-back at 5 min steps, shipped model, 1 thread, {os.cpu_count()} CPUs"
    )
    for column in (
        "nodes",
        "GPUs",
        "path",
        "cold s",
        "warm s",
        "peak MiB",
        "samples read (cold)",
        "queries",
        "cold vs first",
        "peak vs first",
        "recorded/raw cold",
        "recorded/raw peak",
    ):
        cycle.add_column(column, justify="right")
    fits = {}
    if raw_rows:
        xs = [r["gpus"] for r in raw_rows]
        for key in ("seconds", "peak_mib"):
            fits[key] = _line(
                xs, [r["raw"]["cold"][key] if key == "seconds" else r["raw"]["warm"][key] for r in raw_rows]
            )
    first_raw = raw_rows[0]["raw"] if raw_rows else None
    first_rec = copied[0]["recorded"] if copied else None
    for row in rows:
        raw = row.get("raw")
        if raw is not None:
            cycle.add_row(*_cycle_cells(row, raw, "raw", first_raw), "", "")
        offset = row.get("recorded_promtool")
        if offset is not None and raw is not None:
            label = f"recorded, promtool's series ({offset['cold']['raw_hosts']} hosts raw)"
            cycle.add_row(
                *_cycle_cells(row, offset, label, None),
                _ratio(offset["cold"]["seconds"], raw["cold"]["seconds"]),
                _ratio(offset["warm"]["peak_mib"], raw["warm"]["peak_mib"]),
            )
        rec = row.get("recorded")
        if rec is None:
            continue
        base = first_rec if raw is None else None
        cells = _cycle_cells(row, rec, rec["cold"]["path"], base)
        if raw is not None:
            cells += [
                _ratio(rec["cold"]["seconds"], raw["cold"]["seconds"]),
                _ratio(rec["warm"]["peak_mib"], raw["warm"]["peak_mib"]),
            ]
        else:
            cold = fits["seconds"][0] + fits["seconds"][1] * row["gpus"] if fits else 0.0
            peak = fits["peak_mib"][0] + fits["peak_mib"][1] * row["gpus"] if fits else 0.0
            cells += [f"~{_ratio(rec['cold']['seconds'], cold)}", f"~{_ratio(rec['warm']['peak_mib'], peak)}"]
        cycle.add_row(*cells)
        if raw is None and fits:
            cycle.add_row(
                f"{row['nodes']:,}",
                f"{row['gpus']:,}",
                "raw (~ not run)",
                f"~{cold:.0f}",
                "",
                f"~{peak:,.0f}",
                f"~{row['gpus'] * 24 * 2016:,}",
                "",
                "",
                "",
                "",
                "",
                style="dim",
            )
    prom = Table(title="Prometheus: every rule's expression as an instant query at `now` (stats=all)")
    for column in (
        "nodes",
        "rules evaluated",
        "eval s (all rules)",
        "slowest rule s",
        "samples",
        "peak samples",
        "eval s / 1k GPUs",
        "not evaluated",
        "Prometheus RSS MiB",
        "recording s",
    ):
        prom.add_column(column, justify="right")
    for row in rows:
        n, total, slowest, samples, peak = _eval(row)
        skipped = row.get("prometheus", {}).get("not_evaluated", {})
        why = sorted(set(skipped.values()))
        prom.add_row(
            f"{row['nodes']:,}",
            f"{n}",
            f"{total:.2f}" if n else "",
            f"{slowest:.2f}" if n else "",
            f"{samples:,}" if n else "",
            f"{peak:,}" if n else "",
            f"{1000 * total / row['gpus']:.3f}" if n else "",
            f"{len(skipped)} ({'; '.join(why)[:60]})" if skipped else "0",
            f"{row.get('prometheus_rss_mib', 0):,.0f}",
            f"{row['grid_rules_s']:.1f}" if "grid_rules_s" in row else "",
        )
    data = Table(title="What Prometheus held")
    for column in (
        "nodes",
        "made as",
        "raw samples",
        "recorded samples",
        "backfill s",
        "raw samples/s",
        "B/sample",
        "verified points",
        "differing",
        "settled s",
    ):
        data.add_column(column, justify="right")
    for row in rows:
        fill, check = row["backfill"], row.get("verify", {})
        data.add_row(
            f"{row['nodes']:,}",
            row["kind"],
            f"{fill['samples']:,}",
            f"{fill.get('recorded_samples', 0):,}",
            f"{fill['seconds'] + fill.get('recorded_s', 0):.0f}",
            f"{fill['samples'] / fill['seconds']:,.0f}",
            f"{fill['bytes_per_sample']:.0f}",
            f"{check['points']:,}" if check else "",
            f"{check['differ']}" if check else "",
            f"{row['settle_s']:.0f}" if "settle_s" in row else "",
        )
    notes = [
        Text(
            "raw week: the whole week raw in Prometheus, Sickbay on the raw path, then on the recorded path once "
            "promtool has backfilled the rules. copies: N renamed copies of the largest raw-week fleet; Prometheus "
            "holds the exporter's fields and the recorded series over the instants read (no raw window), the latter copied from "
            "the base's promtool evaluation (the rules are per GPU), not evaluated at that size."
        ),
        Text(
            "cold: a fresh process, first cycle; warm: the next one a step later. peak: the Sickbay process' max "
            "RSS over both. ~: not measured; the raw-week sizes' least-squares line per GPU carried to that size."
        ),
        Text(
            "settled: seconds waited, before a copied size's cycles, for Prometheus to compact the blocks "
            "backfilled (they overlap in time), as a running Prometheus holds its history."
        ),
    ]
    for miss in report.get("not_run", []):
        notes.append(
            Text(f"not run: {miss['kind']} at {miss['nodes']:,} nodes: {miss['why'][:300]}", style="yellow")
        )
    load = report.get("machine", {}).get("load_average_at_start")
    notes.append(
        Text(
            f"load average at start {load}, at end {report.get('load_at_end')}; written to {out}", style="dim"
        )
    )
    return Group(cycle, prom, data, *notes)


def _cycle_cells(row: dict[str, Any], m: dict[str, Any], path: str, base: dict[str, Any] | None) -> list[str]:
    cold, warm = m["cold"], m["warm"]
    return [
        f"{row['nodes']:,}",
        f"{row['gpus']:,}",
        path,
        f"{cold['seconds']:.1f}",
        f"{warm['seconds']:.1f}",
        f"{warm['peak_mib']:,.0f}",
        f"{cold['window_samples']:,}",
        f"{cold['queries']}",
        _ratio(cold["seconds"], base["cold"]["seconds"]) if base else "",
        _ratio(warm["peak_mib"], base["warm"]["peak_mib"]) if base else "",
    ]
