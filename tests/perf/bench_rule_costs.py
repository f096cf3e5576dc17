"""The recording rules' cost per evaluation at fleet size: the shipped group against a baseline group.

What one round of the group costs Prometheus, rule by rule: each expression as an instant query at a grid
instant with `stats=all` (`scoring_scale_rules.evaluate`: the engine's evaluation time and the samples it
loaded), on a real Prometheus holding a synthetic fleet (`bench_scoring.synthesise`, no gaps) of the last
3 hours, the longest reach of a rule that reads the exporter. Every rule that reads the exporter's series
is evaluated, for the shipped group (`recorded_rules`) and, with `--baseline FILE`, the group of the same
name in that rule file (an earlier version: `git show main:rules/prometheus/sickbay-rules.yaml`), in the
same run, on the same data.

The levels above read recorded series a week back, which a 3-hour history does not hold: they are
measured on stand-ins for the presence count (its rows at the last 12 rounds, its hourly values at the 24
whole hours, its daily values at the 7 days before `now`, as the group would have written them), the one
rule of each level, whose siblings read the same number of samples per GPU (the rule text says so:
tests/predict/test_recorded_rules_samples.py). The group's series per GPU are its records (each keeps the
exporter's labels: one series per GPU).

    python -m tests.perf.bench_rule_costs --nodes 1000 --nodes 2000 --baseline /tmp/main-rules.yaml
    python -m tests.perf rule_costs -- --nodes 10    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from app.predict import features
from app.predict import recorded_rules as rr
from app.sim.fleet import backfill
from tests.perf import bench_scoring, machine
from tests.perf import scoring_scale_rules as rules
from tests.prom import EMPTY_CONFIG, instant_query, lookback_delta, openmetrics, running_prometheus

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "rule_costs.json"
PROMETHEUS = Path("/usr/bin/prometheus")
STEP_S = bench_scoring.STEP_S
STEPS = 3 * 3600 // int(STEP_S) + 1
SIZES = (1000, 2000)


def _group(path: Path) -> dict[str, Any]:
    groups = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return next(g for g in groups if g["name"] == rr.GROUP)


def _stand_ins(url: str, now: float, path: Path) -> int:
    """The presence count's rows, hourly and daily values where the levels above read them; samples."""
    gpus = [one["metric"] for one in instant_query(url, features.GPU_TEMP, at=now)]
    levels = (
        (rr.PRESENCE.name(rr.STEP), 1.0, [now - k * STEP_S for k in range(rr.DAY_ROWS)]),
        (rr.PRESENCE.name("1h"), float(rr.HOUR_ROWS), [now - k * 3600.0 for k in range(24)]),
        (rr.PRESENCE.name("24h"), float(rr.DAY_ROWS), [now - k * 86400.0 for k in range(7)]),
    )
    text = []
    for name, value, times in levels:
        matrix = [
            {
                "metric": {k: v for k, v in labels.items() if k != "__name__"},
                "values": [(t, value) for t in sorted(times)],
            }
            for labels in gpus
        ]
        text.append(openmetrics(name, matrix))
    path.write_text("".join(text) + "# EOF\n")
    return len(gpus) * sum(len(times) for _, _, times in levels)


def _kind(expr: str) -> str:
    """What a rule that does not read the exporter sums: a day (of rows, or of 24 hourly sums), a week (of 7
    daily sums), or neither (a ratio of weekly sums, not measured: 2 selectors)."""
    if "offset 6d" in expr:
        return "week"
    if "offset 23h" in expr or f"[{rr.DAY_RANGE}]" in expr:
        return "day"
    return "ratio"


def _costs(url: str, group: Mapping[str, Any], now: float) -> dict[str, Any]:
    """Every rule of `group` that reads the exporter, its presence rules above the rows, and how many
    rules of each kind the presence rule stands for."""
    upper = {rr.PRESENCE.name(w) for w in ("1h", "24h", "7d")}
    out: dict[str, Any] = {"rules": [], "counts": {}}
    for spec in rules.specs([group]):
        kind = "raw" if spec.raw else _kind(spec.expr)
        out["counts"][kind] = out["counts"].get(kind, 0) + 1
        if spec.raw or spec.record in upper:
            cost = asdict(rules.evaluate(url, spec, at=now))
            out["rules"].append({**cost, "raw": spec.raw, "kind": kind})
    return out


def group_s(costs: Mapping[str, Any]) -> float:
    """One evaluation of the group but its ratios: the exporter's rules, and each day or week rule at its
    presence rule's cost."""
    measured = {str(c["kind"]): float(c["eval_s"]) for c in costs["rules"] if not c["raw"]}
    raw = sum(float(c["eval_s"]) for c in costs["rules"] if c["raw"])
    counts = {str(k): int(v) for k, v in costs["counts"].items()}
    return raw + sum(counts.get(kind, 0) * measured.get(kind, 0.0) for kind in ("day", "week"))


def run_size(nodes: int, groups: Mapping[str, Mapping[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sickbay-bench-rules-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        bench_scoring.synthesise(work / "dataset", nodes=nodes, steps=STEPS, seed=0, gap_share=0.0)
        fill = backfill.backfill(work / "dataset", work / "tsdb", promtool=args.promtool)
        now = bench_scoring.START + STEP_S * (STEPS - 1)
        config = work / "prometheus.yml"
        config.write_text(EMPTY_CONFIG)
        port = bench_scoring.free_port()
        flags = (f"--query.lookback-delta={lookback_delta(STEP_S)}", "--storage.tsdb.max-block-duration=2h")

        def served() -> Any:
            return running_prometheus(
                args.prometheus, data=work / "tsdb", config=config, port=port, extra=flags
            )

        with served() as url:
            stand_ins = _stand_ins(url, now, work / "stand-ins.om")
        block = f"--max-block-duration={int(backfill.BLOCK_BASE_S * 3**5)}s"
        command = ["tsdb", "create-blocks-from", "openmetrics", "--quiet", block]
        subprocess.run(
            [str(args.promtool), *command, str(work / "stand-ins.om"), str(work / "tsdb")], check=True
        )
        prepared = time.perf_counter() - started
        row: dict[str, Any] = {"nodes": nodes, "gpus": nodes * bench_scoring.GPUS_PER_NODE}
        row["data"] = {"samples": fill.samples, "stand_in_samples": stand_ins, "prepare_s": prepared}
        with served() as url:
            deadline = time.monotonic() + 60
            while not instant_query(url, f"count({features.GPU_TEMP})", at=now):
                if time.monotonic() > deadline:
                    raise TimeoutError("the backfilled blocks never became queryable")
                time.sleep(0.2)
            row["groups"] = {name: _costs(url, group, now) for name, group in groups.items()}
    return row


def _summary(rows: Sequence[Mapping[str, Any]], series: Mapping[str, int]) -> Table:
    table = Table(
        title="Recording rules: one evaluation of the rules that read the exporter (engine time, samples)"
    )
    for column in (
        "group",
        "nodes",
        "GPUs",
        "raw rules",
        "eval s",
        "samples (M)",
        "largest rule",
        "peak (M)",
        "series/GPU",
        "presence day, week s (x rules)",
        "group s (no ratios)",
    ):
        table.add_column(column, justify="left" if column in ("group", "largest rule") else "right")
    for row in rows:
        for name, costs in row["groups"].items():
            raw = [c for c in costs["rules"] if c["raw"]]
            worst = max(raw, key=lambda c: c["eval_s"])
            upper = ", ".join(f"{c['kind']} {c['eval_s']:.2f}" for c in costs["rules"] if not c["raw"])
            table.add_row(
                name,
                f"{row['nodes']:,}",
                f"{row['gpus']:,}",
                str(len(raw)),
                f"{sum(c['eval_s'] for c in raw):.1f}",
                f"{sum(c['samples'] for c in raw) / 1e6:.1f}",
                f"{worst['record'].split(':', 1)[1]} {worst['eval_s']:.1f} s",
                f"{max(c['peak_samples'] for c in raw) / 1e6:.2f}",
                str(series[name]),
                f"{upper} (x {costs['counts'].get('day', 0)}, {costs['counts'].get('week', 0)})",
                f"{group_s(costs):.1f}",
            )
    return table


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_rule_costs", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, action="append", help="fleet size (repeatable)")
    parser.add_argument("--baseline", type=Path, help="a rule file holding an earlier version of the group")
    parser.add_argument("--prometheus", type=Path, default=PROMETHEUS)
    parser.add_argument("--promtool", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(list(argv))
    args.nodes = sorted(args.nodes or SIZES)
    args.promtool = backfill.find_promtool(args.promtool)
    return args


def main(argv: Sequence[str] | None = None) -> Table:
    args = parse_args(argv or [])
    if not args.prometheus.exists():
        raise SystemExit(f"{args.prometheus} is missing (Debian package `prometheus`)")
    groups = {"shipped": rr.rule_group()}
    if args.baseline is not None:
        groups["baseline"] = _group(args.baseline)
    series = {name: sum(1 for r in g["rules"] if "record" in r) for name, g in groups.items()}
    report: dict[str, Any] = {
        "benchmark": "rule_costs",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(os.getloadavg()),
        "series_per_gpu": series,
        "rows": [],
    }
    for nodes in args.nodes:
        report["rows"].append(run_size(nodes, groups, args))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    report["load_at_end"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return _summary(report["rows"], series)


if __name__ == "__main__":
    from rich.console import Console

    Console(width=200).print(main(__import__("sys").argv[1:]))
