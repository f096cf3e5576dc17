"""No recording rule's evaluation loads more than Prometheus' default `--query.max-samples` at fleet size.

The bound is read from each rule's text: a selector evaluated under subqueries of n1, n2, ... points (a
subquery `[R:S]` has at most R/S + 1 points: the step's multiples within the range, both ends included in
Prometheus 2.x) holds up to n1 x n2 x ... samples per series, a range `[R]` over a record (written once
per group interval of 5 min) up to R/5m + 1 more, and the rule's bound is the sum over its
selectors (an upper bound: the engine frees an operand once used). A metric read under its old and its
DCGM 4.6 name counts once (a GPU exports one of them): the larger of its names' sums. Every metric has one
series per GPU: 80,000 at 10,000 nodes x 8 GPUs. Flag documented at
https://prometheus.io/docs/prometheus/latest/command-line/prometheus/ (`--query.max-samples`, default
50000000: "Maximum number of samples a single query can load into memory").
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from app.predict import features
from app.predict import recorded_rules as rr

MAX_SAMPLES = 50_000_000
GPUS = 10_000 * 8
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SUBQUERY = re.compile(r"\[(\w+):(\w+)\]")
_SELECTOR = re.compile(r'(?<!["\w:])(DCGM_\w+|gpu:[\w:]+)(?![\w(])')
_RANGE = re.compile(r"\[(\w+)\]")  # a plain range (no `:step`): over a record, one sample per group interval


def seconds(duration: str) -> float:
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _operand_start(expr: str, bracket: int) -> int:
    """Where the expression a subquery applies to starts: its `(`, or its metric name."""
    if expr[bracket - 1] == ")":
        depth = 0
        for i in range(bracket - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(expr[i], 0)
            if depth == 0:
                return i
    match = re.search(r"[\w:]+$", expr[:bracket])
    assert match is not None, expr
    return match.start()


def samples_per_series(expr: str) -> dict[str, float]:
    """Per metric (aliases merged), the samples per series the rule's selectors hold at most."""
    subqueries = [
        (_operand_start(expr, m.start()), m.start(), seconds(m.group(1)) // seconds(m.group(2)) + 1)
        for m in _SUBQUERY.finditer(expr)
    ]
    by_name: dict[str, float] = defaultdict(float)
    for m in _SELECTOR.finditer(expr):
        points = 1.0
        for start, end, n in subqueries:
            if start <= m.start() < end:
                points *= n
        plain = _RANGE.match(expr, m.end())
        if plain:  # the group writes a record once per interval: at most R / interval + 1 samples in R
            points *= seconds(plain.group(1)) // rr.STEP_S + 1
        by_name[m.group(1)] += points
    merged: dict[str, float] = defaultdict(float)
    for name, points in by_name.items():
        canonical = features.ALIASES.get(name, name)
        merged[canonical] = max(merged[canonical], points)
    return dict(merged)


def bound(expr: str) -> float:
    return sum(samples_per_series(expr).values()) * GPUS


def test_the_bound_reads_subqueries_and_aliases() -> None:
    # Arithmetic by hand: 12 hourly points x 2 of a nested [5m:5m] = 24 per series; either name once.
    expr = "sum_over_time((increase(A[5m:5m]) or increase(DCGM_FI_DEV_XID_ERROR[5m:5m]))[59m59s999ms:5m])"
    assert samples_per_series(expr.replace("A[", "DCGM_FI_DEV_XID_ERRORS[")) == {"DCGM_FI_DEV_XID_ERRORS": 24}
    assert samples_per_series("gpu:x:a1h + gpu:x:a1h offset 1h") == {"gpu:x:a1h": 2}
    # A range over a record: one sample per 5-minute round, ends included.
    assert samples_per_series("sum_over_time(gpu:x:a5m[23h59m59s999ms])") == {"gpu:x:a5m": 288}
    assert samples_per_series("last_over_time(gpu:x:a1h[4m59s999ms] offset 1h)") == {"gpu:x:a1h": 1}


def test_raw_ranges_read_records_only() -> None:
    # An exporter series' samples in a range depend on the scrape interval: the exporter's series are read
    # through subqueries on the grid. A plain range reads a record, which the group writes once a round.
    for rule in rr.rules():
        for m in _SELECTOR.finditer(rule.expr):
            plain = _RANGE.match(rule.expr, m.end())
            assert plain is None or m.group(1).startswith("gpu:"), rule.record
        ranges = re.findall(r"\[([^\]]*)\]", rule.expr)
        assert all(":" in r or r in (rr.DAY_RANGE, rr.HOUR_RANGE, rr.ROW_RANGE) for r in ranges), rule.record


@pytest.mark.parametrize("rule", rr.rules(), ids=lambda r: r.record)
def test_every_rule_loads_under_the_default_max_samples_at_80k_gpus(rule: rr.Rule) -> None:
    assert samples_per_series(rule.expr), rule.record  # the rule reads something
    assert bound(rule.expr) <= MAX_SAMPLES, (rule.record, bound(rule.expr) / 1e6)


def test_the_documented_worst_cases() -> None:
    by_record = {r.record: bound(r.expr) for r in rr.rules()}
    worst = max(by_record, key=by_record.__getitem__)
    # The daily level: the 288 rows of the day, one range selector (every daily rule alike).
    assert by_record[worst] == 288 * GPUS < MAX_SAMPLES
    assert worst == rr.PRESENCE.name("24h")
    # Of the rows, CRC persistence's: `increase(m[1h:5m])`, 13 points, for each of its two fields.
    rows = {r.record: bound(r.expr) for r in rr.rules() if f"[{rr.ROW_RANGE}:" in r.expr}
    crc = rr.record(features.NVLINK_CRC_FLIT, "active1h_sum_over_time5m")
    assert max(rows.values()) == by_record[crc] == 2 * 13 * GPUS
    # A row reads the exporter at one grid point: an increment is 2 samples, an XID change 3 (the gauge,
    # the row before, the gauge again for `!= 0`), whatever the XID's class.
    assert by_record[rr.record(features.SBE_AGG, "increase5m")] == 2 * GPUS
    assert by_record[rr.XID_CHANGE_SUM.name("5m")] == 3 * GPUS
    # The weekly level reads one round's daily sample per offset: 7 samples per series.
    assert by_record[rr.SAMPLES] == 7 * GPUS
    # The first version's `[7d:5m]` subquery: 2,016 + 1 points per series, over the limit at 80k GPUs;
    # the second's hourly XID "workload" rule, one `== bool` per code under a 12-point subquery: 36.5M.
    assert bound("count_over_time(DCGM_FI_DEV_GPU_TEMP[10075m:5m])") == 2016 * GPUS > MAX_SAMPLES
    workload = " + ".join(f"(DCGM_FI_DEV_XID_ERRORS == bool {c})" for c in range(38))
    assert bound(f"sum_over_time(({workload})[59m59s999ms:5m])") == 38 * 12 * GPUS


def test_the_short_windows_sums_are_hourly_and_small() -> None:
    # The 1 h and 6 h windows read hourly sums only (scoring adds six of them up): no daily or weekly level.
    short = {r.record: bound(r.expr) for r in rr.short_rules()}
    assert short
    assert all(name.endswith(("5m", "1h")) for name in short)
    assert set(rr.READ_HOURLY) | set(rr.READ_HOUR) <= set(rr.RECORDS)
    # Hourly sums only where the short windows read them: each one the group's 12 rows of the hour.
    hourly = {r.record for r in rr.rules() if r.record.endswith("1h")}
    assert hourly == rr.HOURLY_READ
    assert all(bound(r.expr) == 12 * GPUS for r in rr.rules() if r.record in hourly)
    # Hardware throttling's row: one selector per bit (0x8, 0x40, 0x80; either DCGM name once) at 1 point.
    assert short[rr.THROTTLED["hardware"].name("5m")] == 3 * GPUS
    # PCIe increments squared: the [5m:5m] increase's 2 points.
    assert short[rr.PCIE_SQUARES.name("5m")] == 2 * GPUS
