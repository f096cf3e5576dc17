"""The recording rules that keep the features' windows (1 h, 24 h, 7 d) in Prometheus, one series per GPU.

Every long window the features read is a sum over the 5-minute grid's rows in `(g - W, g]` of a per-row
quantity `q` (a counter's increment, a reset, an XID change, a valid temperature, ...), `g` the grid instant
the rule stands for. The rules build each sum in three levels, so that no evaluation holds a week of
samples per GPU (the first version's `[7d:5m]` subqueries held GPUs x 2,016 points, over Prometheus'
default `--query.max-samples` of 50,000,000 from ~24,800 GPUs on) and each evaluation reads the exporter's
series for its one new row only (the second version's hourly subqueries re-read 12 rows a round):

0. the row, from the exporter's series: `sum_over_time((q)[4m59s999ms:5m])`, a subquery of one point. A
   subquery's points are the multiples of its step within its range, ends included (Prometheus 2.x),
   whatever instant the group is evaluated at (groups run at a phase of their interval derived from a
   hash, not on the grid); a range of 5 min less 1 ms holds exactly `g`, the last grid instant at or
   before the evaluation, at every millisecond phase. Inside the subquery `q` is evaluated at `g`, so
   `m offset 5m` is the row before and `increase(m[5m:5m])` the row's increment (its two points lie on
   the range's ends: nothing extrapolated, a reset counted as Prometheus counts it);
1. daily, from the rows: `sum_over_time(R[23h59m59s999ms])`, the 288 row samples the group wrote in the
   last day (one a round, each standing for its own grid instant): the rows of `(g - 24h, g]`. One
   range selector: ~17x cheaper per evaluation than 24 `offset` selectors over hourly sums (0.093 s
   against 1.56 s at 8,000 GPUs, docs/benchmarks.md), and no hourly series to keep;
1h. hourly, from the rows, for the sums the short windows read only (`HOURLY_READ`: the 1 h and 6 h
   windows are read as hourly sums at hourly instants, so scoring reads no raw window):
   `sum_over_time(R[59m59s999ms])`, the 12 rows of `(g - 1h, g]`;
2. weekly, from the daily series: `D + D offset 1d + ... + D offset 6d`, 7 selectors, each
   `last_over_time(D[4m59s999ms] offset k d)`: the sample of the round k days before, or none.

A group evaluates its rules in order at one timestamp per round (docs: "rules within a group are run
sequentially at a regular interval, with the same evaluation time",
https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/), each rule's samples committed
before the next rule is evaluated (`Group.Eval`, prometheus/prometheus rules/group.go: `app.Commit()` per
rule; with `--enable-feature=concurrent-rule-eval` only rules no other rule reads run concurrently,
`buildDependencyMap` there). So the daily rule sees the row its group wrote a moment before, and an
`offset k d` selector finds the sample the same rule wrote k days earlier, at the same phase: the
evaluation timestamps are `interval` apart exactly (`Group.EvalTimestamp`, "consistently slotted").

A round that does not run writes nothing, at any level. Prometheus skips the slots a slow round overran
("missed": `evalTimestamp.Add((missed + 1) * g.interval)`, counted in
`prometheus_rule_group_iterations_missed_total`, rules/group.go `Group.run`) and evaluates none of the
slots it was down for. For a week after such a slot every weekly sum lacks its row: the daily sums over
it hold 287 rows, and a weekly sum that would read the missed round's own daily sample has none, so `+`
drops the GPU there (an instant selector would have read the round before instead, exactly 5 min old,
inside Prometheus 2.x's default look-back: hence the one-round ranges). The presence count is then below
`FULL_WEEK` or absent, and `recorded_reader` reads the GPU raw (as it reads every GPU in the rules'
first week): a missed round costs a week of raw reads, never a wrong feature
(tests/predict/test_recorded_missed_round.py). A GPU missing for a whole day of the week has no daily
sample there, so `+` drops it from the weekly sums: not regular either. Renaming the group or its file
moves its phase (the hash): a first new round in the slot of the last old one writes a second row for
that grid instant, a presence count one over `FULL_WEEK` for a week, and `recorded_reader` (regular at
exactly `FULL_WEEK`) reads the GPU raw for that week.

Samples one evaluation loads, at 80,000 GPU series per metric (10,000 nodes x 8 GPUs); `query.max-samples`
counts the samples a query holds at once (https://prometheus.io/docs/prometheus/latest/command-line/
prometheus/: "Maximum number of samples a single query can load into memory"), and a subquery's inner
expression is evaluated at each of its points, so a selector under subqueries of n1, n2 points holds up
to n1 x n2 samples per series, and a range of R over a record written every 5 min up to R / 5m + 1.
Summing that over every selector of a rule bounds it from above (the engine frees an operand once used):

- rows, one point x selectors: presence 1 (0.08M), increases 2 (0.16M), XID changes 3 (0.24M), thermal
  <= 4 (0.32M), episodes 6 (0.48M), resets 2 x 8 fields (1.3M), persistence 13 per field (1M; 2.1M for
  the CRC's two fields), the short windows' rows (`SHORT_SUMS`) at most 3 (0.24M, hardware throttling); the second version's hourly subqueries held 12 times these, and 38
  `== bool code` selectors for the XID "workload" class (36.5M);
- hourly (only the sums the short windows read, `HOURLY_READ`): 12 row samples (0.96M);
- daily: 288 row samples (23M, the largest); weekly: 7 one-sample selectors (0.6M); the ratios: 2 (0.16M);
  the thermal line (`recorded_sums._line`, from the ratios): at most 7 (0.56M).

`tests/predict/test_recorded_rules_samples.py` recomputes these bounds from the rule text. Names follow
Prometheus' `level:metric:operations` (https://prometheus.io/docs/practices/rules/): level `gpu` (no
aggregation: every label of the exporter's series is kept, both host spellings, `Hostname` and
`hostname`, and `gpu`/`UUID` as the exporter wrote them); a row is its sum's name with the window `5m`.
A field DCGM 4.6 renamed is read under both names,
old first (`f(OLD) or f(NEW)`); sums of several fields tag each with `sickbay_field`, aggregated away.

Pure data: `rule_group()` is the group in `rules/prometheus/sickbay-rules.yaml` (a test holds them equal;
`python -m app.predict.recorded_rules` prints it). This module is the one list of the rules, in the group's
order, and of the records the features read; the sums and their levels are built in `recorded_sums`, whose
names it re-exports.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from app.predict.recorded_sums import (
    BLANK,
    DAY_MIN,
    DAY_RANGE,
    DAY_ROWS,
    EPISODES,
    FULL_WEEK,
    HOUR_RANGE,
    HOUR_ROWS,
    HOURLY_READ,
    INCREASES,
    LINE,
    PCIE_COUNT,
    PCIE_SQUARES,
    PERSISTENT,
    PRESENCE,
    READ_HOUR,
    READ_HOURLY,
    RESET_SUM,
    RESETS,
    ROW_RANGE,
    SAMPLES,
    SHORT_HOURS,
    SHORT_INCREASES,
    SHORT_SUMS,
    STEP,
    STEP_S,
    TEMPERATURES,
    THROTTLE_CLASSES,
    THROTTLE_COUNT,
    THROTTLED,
    UTIL_COUNT,
    UTIL_SUM,
    WEEK_MIN,
    XID_CHANGE_SUM,
    XID_EVENTS,
    HourSum,
    Rule,
    Sum,
    either,
    hourly,
    increase,
    long_rules,
    names,
    persistence,
    record,
    short_rules,
    summed,
    thermal,
    thermal_hourly,
)

__all__ = [  # the sums' names too: readers and tests know the rules by this module's name
    "BLANK",
    "DAY_MIN",
    "DAY_RANGE",
    "DAY_ROWS",
    "EPISODES",
    "FULL_WEEK",
    "GROUP",
    "HOURLY_READ",
    "HOUR_RANGE",
    "HOUR_ROWS",
    "INCREASES",
    "INTERVAL",
    "LINE",
    "PCIE_COUNT",
    "PCIE_SQUARES",
    "PERSISTENT",
    "PRESENCE",
    "READ",
    "READ_HOUR",
    "READ_HOURLY",
    "RECORDS",
    "RESETS",
    "RESET_SUM",
    "ROW_RANGE",
    "SAMPLES",
    "SHORT_HOURS",
    "SHORT_INCREASES",
    "SHORT_SUMS",
    "STEP",
    "STEP_S",
    "SUCCESSORS",
    "SUCCESSORS_MATCH",
    "TEMPERATURES",
    "THROTTLED",
    "THROTTLE_CLASSES",
    "THROTTLE_COUNT",
    "UTIL_COUNT",
    "UTIL_SUM",
    "WEEK_MIN",
    "XID_CHANGE_SUM",
    "XID_EVENTS",
    "HourSum",
    "Rule",
    "Sum",
    "either",
    "hourly",
    "increase",
    "long_rules",
    "main",
    "names",
    "persistence",
    "record",
    "rule_group",
    "rules",
    "short_rules",
    "stale_records",
    "summed",
    "thermal",
    "thermal_hourly",
]

GROUP = "sickbay-predict-long-windows"
# Evaluated on the grid's period: each round records the window ending at the latest grid instant.
INTERVAL = "5m"


def rules() -> tuple[Rule, ...]:
    return (*long_rules(), *short_rules())


# The records `recorded_features` reads (the others are the levels below them).
READ: tuple[str, ...] = (
    SAMPLES,
    RESETS,
    *(increase(m, w) for m, windows in INCREASES for w in windows),
    *(persistence(m) for m, _ in PERSISTENT),
    EPISODES,
    *(thermal(t, stat) for t in TEMPERATURES for stat in LINE),
    *READ_HOUR,  # the hourly records the 1 h windows read (`recorded_sums`)
)
RECORDS: tuple[str, ...] = tuple(r.record for r in rules())
# Records added to the bundle after a sibling a GPU has whenever it has them: where a Prometheus holds the
# sibling and not them, its rules are an older bundle's (`stale_records`), and scoring reads raw.
SUCCESSORS: dict[str, tuple[str, ...]] = {
    thermal(t, "util"): (thermal(t, "slope"), thermal(t, "intercept")) for t in TEMPERATURES
}
_SUCCESSION = "|".join(sorted({*SUCCESSORS, *(n for names in SUCCESSORS.values() for n in names)}))
SUCCESSORS_MATCH = f'{{__name__=~"{_SUCCESSION}"}}'


def stale_records(names: frozenset[str]) -> tuple[str, ...]:
    """The successors missing beside their sibling among these record names (none: the bundle is current)."""
    return tuple(
        n for sibling, later in SUCCESSORS.items() if sibling in names for n in later if n not in names
    )


def rule_group() -> dict[str, Any]:
    """The rule group as it stands in `rules/prometheus/sickbay-rules.yaml`."""
    return {
        "name": GROUP,
        "interval": INTERVAL,
        "rules": [{"record": r.record, "expr": r.expr} for r in rules()],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the group as the bundle indents it (`--operator`: as the PrometheusRule does)."""
    operator = "--operator" in (sys.argv[1:] if argv is None else argv)
    pad = "" if operator else "  "
    lines = [f"  - name: {GROUP}", f"    interval: {INTERVAL}", "    rules:"]
    for r in rules():
        lines += [f"    {pad}- record: {r.record}", f"    {pad}  expr: |", f"    {pad}    {r.expr}"]
        if not operator:
            lines.append("")
    sys.stdout.write("\n".join(lines).rstrip("\n") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
