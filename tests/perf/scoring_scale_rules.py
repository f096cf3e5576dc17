"""The predictor's recording rules as the scale benchmark handles them: levels, reach, promtool, cost.

The rules come from `app.predict.recorded_rules` (its groups, never a name written here). A rule that reads
another rule's series is a level above it; promtool's rule backfiller cannot see the series of rules it is
backfilling in the same run ("Rules in the same group cannot see the results of previous rules ... A
workaround is to backfill multiple times and create the dependent data first", prometheus/prometheus
docs/storage.md, "Backfilling for Recording Rules"), so `backfill_level` runs once per level and the caller
loads each level's blocks before the next.

A rule's *reach* is how far back its expression reads: its longest range selector, plus its longest
subquery range, plus its longest offset (an upper bound, enough to say what history must be held).
The cost of a rule is that of its expression as an instant query with `stats=all` (`/api/v1/query`): the
engine's evaluation time and its samples (total and peak), what the rule manager pays per evaluation.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.predict import features
from app.predict import recorded_rules as rr

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = r"(?:\d+(?:ms|[smhdwy]))+"
_RANGE = re.compile(rf"\[({_DURATION})(:(?:{_DURATION})?)?\]")
_OFFSET = re.compile(rf"\boffset\s+({_DURATION})")
SOURCE_NAMES: tuple[str, ...] = tuple(
    sorted({name for metric in features.SOURCE_METRICS for name in rr.names(metric)})
)


def duration_s(text: str) -> float:
    """Seconds in a PromQL duration (`7d`, `10075m`, `1h30m`)."""
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)(ms|[smhdwy])", text))


def reach_s(expr: str) -> float:
    """How far back `expr` reads (see the module docstring)."""
    plain, sub = [0.0], [0.0]
    for window, subquery in _RANGE.findall(expr):
        (sub if subquery else plain).append(duration_s(window))
    offsets = [duration_s(o) for o in _OFFSET.findall(expr)] or [0.0]
    return max(plain) + max(sub) + max(offsets)


def _mentions(expr: str, name: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr) is not None


@dataclass(frozen=True, slots=True)
class RuleSpec:
    group: str
    interval_s: float
    record: str
    expr: str
    level: int  # 0: reads raw series only; n: reads a level n-1 rule's series
    reach_s: float
    raw: bool  # reads exporter series
    deps: tuple[str, ...]  # the records it reads


def groups() -> list[dict[str, Any]]:
    """The rule groups the project ships (`rule_groups()` where the module has it, else its one group)."""
    many = getattr(rr, "rule_groups", None)
    return list(many()) if callable(many) else [rr.rule_group()]


def specs(rule_groups: Sequence[Mapping[str, Any]] | None = None) -> list[RuleSpec]:
    """Every recording rule with its level, reach and inputs."""
    found = [
        (str(g["name"]), duration_s(str(g.get("interval", rr.INTERVAL))), r)
        for g in (groups() if rule_groups is None else rule_groups)
        for r in g["rules"]
        if "record" in r
    ]
    records = [str(r["record"]) for _, _, r in found]
    deps = {str(r["record"]): tuple(n for n in records if _mentions(str(r["expr"]), n)) for _, _, r in found}
    levels: dict[str, int] = {}

    def level(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in levels:
            if name in seen:
                raise ValueError(f"recording rules read each other in a cycle: {sorted(seen)}")
            levels[name] = 1 + max((level(d, seen | {name}) for d in deps[name]), default=-1)
        return levels[name]

    return [
        RuleSpec(
            group=group,
            interval_s=interval,
            record=str(r["record"]),
            expr=str(r["expr"]),
            level=level(str(r["record"])),
            reach_s=reach_s(str(r["expr"])),
            raw=any(_mentions(str(r["expr"]), n) for n in SOURCE_NAMES),
            deps=deps[str(r["record"])],
        )
        for group, interval, r in found
    ]


RAW = "<raw>"


def needed_starts(rules: Sequence[RuleSpec], *, read: Mapping[str, float]) -> dict[str, float]:
    """From when each record's series (and, under `RAW`, the exporter's) must be held so that the records
    in `read` (record -> first instant read) and every rule feeding them can be evaluated."""
    by_name = {r.record: r for r in rules}
    start = dict(read)
    for rule in sorted(rules, key=lambda r: -r.level):
        if rule.record not in start:
            continue
        reach_from = start[rule.record] - rule.reach_s - rule.interval_s
        for dep in rule.deps:
            start[dep] = min(start.get(dep, reach_from), reach_from)
        if rule.raw:
            start[RAW] = min(start.get(RAW, reach_from), reach_from)
    return {name: t for name, t in start.items() if name in by_name or name == RAW}


def rule_file(rules: Sequence[RuleSpec], path: Path) -> Path:
    """A rule file with `rules`, in their groups (each group keeps its interval)."""
    out: dict[str, dict[str, Any]] = {}
    for rule in rules:
        group = out.setdefault(
            rule.group, {"name": rule.group, "interval": f"{rule.interval_s:g}s", "rules": []}
        )
        group["rules"].append({"record": rule.record, "expr": rule.expr})
    path.write_text(yaml.safe_dump({"groups": list(out.values())}, sort_keys=False, width=10_000))
    return path


def backfill_level(
    promtool: Path, *, url: str, rules_path: Path, start: float, end: float, out_dir: Path
) -> float:
    """`promtool tsdb create-blocks-from rules` over [start, end] against `url`; the seconds it took."""
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        str(promtool),
        "tsdb",
        "create-blocks-from",
        "rules",
        f"--url={url}",
        f"--start={int(start)}",
        f"--end={int(end)}",
        f"--output-dir={out_dir}",
        str(rules_path),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"promtool rules backfill failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class RuleCost:
    record: str
    level: int
    wall_s: float
    eval_s: float  # the engine's evalTotalTime
    samples: int  # totalQueryableSamples
    peak_samples: int
    series: int


def evaluate(url: str, rule: RuleSpec, *, at: float, timeout_s: float = 900.0) -> RuleCost:
    """The rule's expression as an instant query at `at`, with the engine's stats."""
    params = urllib.parse.urlencode({"query": rule.expr, "time": f"{at:.3f}", "stats": "all"}).encode()
    started = time.perf_counter()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=params, timeout=timeout_s) as response:
        body = json.load(response)
    wall = time.perf_counter() - started
    if body.get("status") != "success":
        raise RuntimeError(f"{rule.record}: {body}")
    stats = body["data"].get("stats", {})
    samples = stats.get("samples", {})
    return RuleCost(
        record=rule.record,
        level=rule.level,
        wall_s=wall,
        eval_s=float(stats.get("timings", {}).get("evalTotalTime", wall)),
        samples=int(samples.get("totalQueryableSamples", 0)),
        peak_samples=int(samples.get("peakSamples", 0)),
        series=len(body["data"]["result"]),
    )
