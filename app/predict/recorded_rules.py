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
- daily: 288 row samples (23M, the largest); weekly: 7 one-sample selectors (0.6M); the ratios: 2 (0.16M).

`tests/predict/test_recorded_rules_samples.py` recomputes these bounds from the rule text. Names follow
Prometheus' `level:metric:operations` (https://prometheus.io/docs/practices/rules/): level `gpu` (no
aggregation: every label of the exporter's series is kept, both host spellings, `Hostname` and
`hostname`, and `gpu`/`UUID` as the exporter wrote them); a row is its sum's name with the window `5m`.
A field DCGM 4.6 renamed is read under both names,
old first (`f(OLD) or f(NEW)`); sums of several fields tag each with `sickbay_field`, aggregated away.

Pure data: `rule_group()` is the group in `rules/prometheus/sickbay-rules.yaml` (a test holds them equal;
`python -m app.predict.recorded_rules` prints it). This module is the one list of the rules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app import dcgm_fields
from app.predict import features
from app.predict.features import fields as f

GROUP = "sickbay-predict-long-windows"
# Evaluated on the grid's period: each round records the window ending at the latest grid instant.
INTERVAL = "5m"
STEP_S = 300
STEP = "5m"
ROW_RANGE = "4m59s999ms"  # 5 min less 1 ms: the one grid instant g at or before the evaluation, at any phase
HOUR_RANGE = "59m59s999ms"  # 1 h less 1 ms: the 12 rows the group wrote for (g - 1h, g]
DAY_RANGE = "23h59m59s999ms"  # 1 d less 1 ms: the 288 rows the group wrote for (g - 24h, g]
DAY_MIN, WEEK_MIN = 24 * 60, 7 * 24 * 60
HOUR_ROWS = 3600 // STEP_S
DAY_ROWS = DAY_MIN * 60 // STEP_S
FULL_WEEK = WEEK_MIN * 60 // STEP_S  # grid rows in a week: a regular GPU's sample count
BLANK = f"{features.DCGM_BLANK_MIN:.0e}".replace("+", "")  # DCGM's blank sentinels are missing values


@dataclass(frozen=True, slots=True)
class Rule:
    record: str
    expr: str


def names(metric: str) -> tuple[str, ...]:
    """The metric and its DCGM 4.6 name, if it has one (old name first)."""
    return (metric, *(new for new, old in features.ALIASES.items() if old == metric))


def either(metric: str, template: Callable[[str], str]) -> str:
    """`template` over the metric under each of its names, joined with `or`."""
    parts = [template(name) for name in names(metric)]
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def summed(metrics: Sequence[str], template: Callable[[str], str]) -> str:
    """The sum over several fields of `template`, per GPU: each field tagged so none hides another."""
    if len(metrics) == 1:
        return f"({either(metrics[0], template)})"
    tagged = " or ".join(
        f'label_replace({either(m, template)}, "sickbay_field", "{m}", "", "")' for m in metrics
    )
    return f"sum without (sickbay_field) ({tagged})"


def record(metric: str, operation: str) -> str:
    return f"gpu:{metric}:{operation}"


@dataclass(frozen=True, slots=True)
class Sum:
    """A per-row quantity, its sums over 1 h (where read), 24 h and 7 d: records `gpu:<metric>:<op with {w}>`,
    {w} 5m, 1h, 24h, 7d."""

    metric: str
    op: str  # with `{w}` where the window goes: "increase{w}"
    row: str  # PromQL of the per-row quantity, evaluated at grid instants
    week: bool = True  # whether the 7-day sum is needed (the 24 h one always is: it builds the week)

    def name(self, window: str) -> str:
        return record(self.metric, self.op.format(w=window))

    def rules(self) -> list[Rule]:
        row, hour, day, week = (self.name(w) for w in (STEP, "1h", "24h", "7d"))
        out = [Rule(row, f"sum_over_time(({self.row})[{ROW_RANGE}:{STEP}])")]
        if hour in HOURLY_READ:  # the short windows read it: only those, each is a series per GPU
            out.append(Rule(hour, f"sum_over_time({row}[{HOUR_RANGE}])"))
        out.append(Rule(day, f"sum_over_time({row}[{DAY_RANGE}])"))
        if self.week:
            out.append(Rule(week, _offsets(day, 7, "d")))
        return out


def _offsets(name: str, n: int, unit: str) -> str:
    """`name` now and k units before, k < n, each the sample of that very round: an instant selector would
    take the round before in its place when that round was missed (its look-back, 5 min by default, holds
    a sample exactly 5 min old in Prometheus 2.x), adding a window shifted by a row in silence."""
    one = f"last_over_time({name}[{ROW_RANGE}]"
    return " + ".join(f"{one})" if k == 0 else f"{one} offset {k}{unit})" for k in range(n))


def _increment(m: str) -> str:
    return f"increase({m}[{STEP}:{STEP}])"


# -- the sums, by kind ------------------------------------------------------------------------------------

# GPU_TEMP stands for the GPU's presence: every exporter field list has it.
PRESENCE = Sum(f.GPU_TEMP, "count_over_time{w}", either(f.GPU_TEMP, lambda m: f"{m} * 0 + 1"))
SAMPLES = PRESENCE.name("7d")
RESET_SUM = Sum(
    "DCGM_FI_DEV_VOLATILE_COUNTERS",
    "resets{w}",
    summed(features.VOLATILE_COUNTERS, lambda m: f"resets({m}[{STEP}:{STEP}])"),
)
RESETS = RESET_SUM.name("7d")

# (metric, windows in minutes) whose increase the features read over a long window.
INCREASES: tuple[tuple[str, tuple[int, ...]], ...] = (
    (f.SBE_AGG, (DAY_MIN, WEEK_MIN)),
    (f.SBE_VOL, (DAY_MIN, WEEK_MIN)),
    (f.DBE_AGG, (DAY_MIN,)),
    (f.DBE_VOL, (DAY_MIN,)),
    (f.ROWS_CORRECTABLE, (DAY_MIN,)),
    (f.ROWS_UNCORRECTABLE, (DAY_MIN,)),
    (f.PCIE_REPLAY, (WEEK_MIN,)),
    (f.NVLINK_CRC_FLIT, (DAY_MIN, WEEK_MIN)),
    (f.NVLINK_CRC_DATA, (DAY_MIN, WEEK_MIN)),
    (f.NVLINK_RECOVERY, (DAY_MIN,)),
)
_INCREASE_SUMS = tuple(Sum(m, "increase{w}", either(m, _increment), week=WEEK_MIN in w) for m, w in INCREASES)


def increase(metric: str, minutes: int) -> str:
    return record(metric, "increase7d" if minutes == WEEK_MIN else "increase24h")


# Persistence: the share of the last 24 h's grid rows whose trailing hour saw the counter rise.
PERSISTENT: tuple[tuple[str, tuple[str, ...]], ...] = (
    (f.SBE_AGG, (f.SBE_AGG,)),
    (f.SBE_VOL, (f.SBE_VOL,)),
    (f.PCIE_REPLAY, (f.PCIE_REPLAY,)),
    (f.NVLINK_CRC_FLIT, (f.NVLINK_CRC_FLIT, f.NVLINK_CRC_DATA)),  # the CRC features sum both fields
)
_ACTIVE_SUMS = tuple(
    Sum(
        m,
        "active1h_sum_over_time{w}",
        f"{summed(fields, lambda x: f'increase({x}[1h:{STEP}])')} > bool 0",
        week=False,
    )
    for m, fields in PERSISTENT
)


def persistence(metric: str) -> str:
    return record(metric, "active1h_avg_over_time24h")


def _rising(m: str, offset: int) -> str:
    """1 where the counter rose over the grid step ending `offset` steps ago (0 where it did not)."""
    step_m = STEP_S // 60
    now = f"{m} offset {offset * step_m}m" if offset else m
    before = f"{m} offset {(offset + 1) * step_m}m"
    return f"(({now} > bool 0) * ({now} != bool {before}))"


# An episode starts on a step that rose after one that did not (`links.episodes`).
_EPISODE_SUM = Sum(
    f.PCIE_REPLAY,
    "episodes_sum_over_time{w}",
    either(f.PCIE_REPLAY, lambda m: f"{_rising(m, 0)} * (1 - {_rising(m, 1)})"),
    week=False,
)
EPISODES = _EPISODE_SUM.name("24h")

# XID events: rows where the last-XID gauge changed to a non-zero value, whatever the code. Classifying
# them here took one `== bool code` per code (38 for "workload"): the costliest rules of the group. A GPU
# with an event in its week is rare, so `recorded_xid` reads those GPUs' raw gauge and classifies as the
# raw path does; the 7-day count says which GPUs they are.
XID_CHANGE_SUM = Sum(
    f.XID,
    "changes_sum_over_time{w}",
    either(f.XID, lambda m: f"({m} != bool {m} offset {STEP}) * ({m} != bool 0)"),
)
XID_EVENTS = XID_CHANGE_SUM.name("7d")


# The thermal residuals' 7-day line: for each temperature, means over the rows where it and the
# utilisation are both valid (count, utilisation, temperature, their square and product), and the
# temperature's own mean over its valid rows: weekly sums, then their ratios.
TEMPERATURES = ("gpu", "mem", "gap")
STATS = ("count", "util", "temp", "util_sq", "util_temp", "mean")
_METRIC = {"gpu": f.GPU_TEMP, "mem": f.MEMORY_TEMP, "gap": f"{f.MEMORY_TEMP}_minus_{f.GPU_TEMP}"}
_MEANS = {  # stat -> (the mean's record op, the sum's op)
    "util": ("util_pairs_avg_over_time7d", "util_pairs_sum_over_time{w}"),
    "temp": ("avg_over_time7d_util_pairs", "sum_over_time{w}_util_pairs"),
    "util_sq": ("util_sq_pairs_avg_over_time7d", "util_sq_pairs_sum_over_time{w}"),
    "util_temp": ("util_product_avg_over_time7d", "util_product_sum_over_time{w}"),
}


def thermal(temperature: str, stat: str) -> str:
    if stat == "count":
        return record(_METRIC[temperature], "util_pairs_count_over_time7d")
    if stat == "mean":
        return record(_METRIC[temperature], "avg_over_time7d")
    return record(_METRIC[temperature], _MEANS[stat][0])


def _valid(metric: str) -> str:
    return "(" + either(metric, lambda m: f"{m} < {BLANK}") + ")"


def _thermal() -> list[Rule]:
    util = _valid(f.GPU_UTIL)
    temps = {
        "gpu": _valid(f.GPU_TEMP),
        "mem": _valid(f.MEMORY_TEMP),
        "gap": f"({_valid(f.MEMORY_TEMP)} - {_valid(f.GPU_TEMP)})",
    }
    out: list[Rule] = []
    for name, temp in temps.items():
        metric = _METRIC[name]
        pairs = Sum(metric, "util_pairs_count_over_time{w}", f"{temp} * 0 + {util} * 0 + 1")
        valid = Sum(metric, "valid_count_over_time{w}", f"{temp} * 0 + 1")
        rows = {
            "util": f"{util} and {temp}",
            "temp": f"{temp} and {util}",
            "util_sq": f"{util} * {util} and {temp}",
            "util_temp": f"{temp} * {util}",
        }
        sums = {stat: Sum(metric, _MEANS[stat][1], row) for stat, row in rows.items()}
        mean = Sum(metric, "sum_over_time{w}", temp)
        for one in (pairs, *sums.values(), valid, mean):
            out.extend(one.rules())
        count = pairs.name("7d")
        out.extend(Rule(thermal(name, stat), f"{s.name('7d')} / ({count} > 0)") for stat, s in sums.items())
        out.append(Rule(thermal(name, "mean"), f"{mean.name('7d')} / ({valid.name('7d')} > 0)"))
    return out


# -- the short windows (1 h, 6 h): hourly sums only --------------------------------------------------------
#
# The 1 h and 6 h windows are read as hourly values at hourly instants (`recorded_reader`: the hour ending
# at an instant, and the five before it, summed by the reader), so these quantities need no daily level.
# The hourly sums of the counters in `INCREASES`, of persistence's active rows and of the temperatures
# above serve the short windows too.


@dataclass(frozen=True, slots=True)
class HourSum(Sum):
    """A per-row quantity summed over 1 h only: `Sum`'s rules without its daily and weekly levels."""

    week: bool = False

    def rules(self) -> list[Rule]:
        longer = {self.name("24h"), self.name("7d")}
        return [r for r in Sum.rules(self) if r.record not in longer]


def _bits(metric: str, mask: int) -> str:
    """1 where any of `mask`'s bits is set in the (valid) bitmask, else 0. PromQL has no bitwise AND on
    values: bit `k` of `x` is `floor(x / 2^k) % 2`. The throttle field is a bitmap of clock-event reasons,
    one bit per reason, a 1:1 map of NVML's (NVIDIA/DCGM testing/python3/dcgm_fields.py,
    `DCGM_CLOCKS_EVENT_REASON_*`; https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/
    group__dcgmFieldConstants.html); the bit values are `app.dcgm_fields`'."""
    values = _valid(metric)
    bits = [1 << k for k in range(mask.bit_length()) if mask >> k & 1]
    return "((" + " + ".join(f"floor({values} / {b}) % 2" for b in bits) + ") > bool 0)"


def _count_valid(metric: str) -> str:
    return f"{_valid(metric)} * 0 + 1"


UTIL_SUM = HourSum(f.GPU_UTIL, "sum_over_time{w}", _valid(f.GPU_UTIL))
UTIL_COUNT = HourSum(f.GPU_UTIL, "valid_count_over_time{w}", _count_valid(f.GPU_UTIL))
THROTTLE_COUNT = HourSum(f.THROTTLE, "valid_count_over_time{w}", _count_valid(f.THROTTLE))
# The throttle classes `features.thermal.throttle` counts, by their bits.
THROTTLE_CLASSES: dict[str, int] = {
    "thermal": dcgm_fields.THROTTLE_SW_THERMAL | dcgm_fields.THROTTLE_HW_THERMAL,
    "hardware": (
        dcgm_fields.THROTTLE_HW_SLOWDOWN
        | dcgm_fields.THROTTLE_HW_THERMAL
        | dcgm_fields.THROTTLE_HW_POWER_BRAKE
    ),
    "power": dcgm_fields.THROTTLE_SW_POWER_CAP,
}
THROTTLED = {
    cls: HourSum(f.THROTTLE, f"{cls}_count_over_time{{w}}", _bits(f.THROTTLE, mask))
    for cls, mask in THROTTLE_CLASSES.items()
}
# Counters whose increase only the short windows read (the others' hourly sums are `INCREASES`').
SHORT_INCREASES: tuple[str, ...] = (f.THERMAL_VIOLATION, f.POWER_VIOLATION, f.NVLINK_REPLAY)
_SHORT_INCREASE_SUMS = tuple(HourSum(m, "increase{w}", either(m, _increment)) for m in SHORT_INCREASES)
# PCIe burstiness: the increments' squares and the rows with a valid value.
PCIE_SQUARES = HourSum(
    f.PCIE_REPLAY, "increase_sq_sum_over_time{w}", either(f.PCIE_REPLAY, lambda m: f"{_increment(m)} ^ 2")
)
PCIE_COUNT = HourSum(f.PCIE_REPLAY, "valid_count_over_time{w}", _count_valid(f.PCIE_REPLAY))
SHORT_SUMS: tuple[Sum, ...] = (
    UTIL_SUM,
    UTIL_COUNT,
    THROTTLE_COUNT,
    *THROTTLED.values(),
    *_SHORT_INCREASE_SUMS,
    PCIE_SQUARES,
    PCIE_COUNT,
)


def hourly(metric: str, op: str) -> str:
    """The hourly record of a per-row quantity (`op` with `{w}`), e.g. `hourly(PCIE_REPLAY, "increase{w}")`."""
    return record(metric, op.format(w="1h"))


def thermal_hourly(temperature: str, stat: str) -> str:
    """The hourly sums a window's temperature means read: `sum`, `count` (valid rows), `util` and
    `pairs` (utilisation summed and rows counted where both are valid)."""
    op = {
        "sum": "sum_over_time{w}",
        "count": "valid_count_over_time{w}",
        "util": _MEANS["util"][1],
        "pairs": "util_pairs_count_over_time{w}",
    }[stat]
    return hourly(_METRIC[temperature], op)


def short_rules() -> list[Rule]:
    return [r for one in SHORT_SUMS for r in one.rules()]


def rules() -> tuple[Rule, ...]:
    out: list[Rule] = []
    for one in (PRESENCE, RESET_SUM, *_INCREASE_SUMS, *_ACTIVE_SUMS, _EPISODE_SUM, XID_CHANGE_SUM):
        out.extend(one.rules())
    out.extend(Rule(persistence(s.metric), f"{s.name('24h')} / {DAY_ROWS}") for s in _ACTIVE_SUMS)
    out.extend(_thermal())
    out.extend(short_rules())
    return tuple(out)


# The records `recorded_features` reads (the others are the levels below them).
READ: tuple[str, ...] = (
    SAMPLES,
    RESETS,
    *(increase(m, w) for m, windows in INCREASES for w in windows),
    *(persistence(m) for m, _ in PERSISTENT),
    EPISODES,
    *(thermal(t, stat) for t in TEMPERATURES for stat in STATS),
)
# The hourly records the 1 h windows read at the scoring instants (their hour only).
READ_HOUR: tuple[str, ...] = (
    UTIL_SUM.name("1h"),
    UTIL_COUNT.name("1h"),
    THROTTLED["hardware"].name("1h"),
    *(hourly(m, "increase{w}") for m in (f.THERMAL_VIOLATION, f.POWER_VIOLATION)),
    *(thermal_hourly(t, stat) for t in ("gpu", "gap") for stat in ("sum", "count", "util", "pairs")),
)
READ = (*READ, *READ_HOUR)
# The hourly records the 6 h windows read, at the scoring instants and each of the 5 hours before them
# (`recorded_reader` sums the six; the instant's own hour is the 1 h window).
READ_HOURLY: tuple[str, ...] = (
    *(hourly(m, "increase{w}") for m in (f.SBE_AGG, f.SBE_VOL, f.PCIE_REPLAY, f.NVLINK_CRC_FLIT)),
    *(hourly(m, "increase{w}") for m in (f.NVLINK_CRC_DATA, f.NVLINK_REPLAY)),
    hourly(f.PCIE_REPLAY, "active1h_sum_over_time{w}"),
    PCIE_SQUARES.name("1h"),
    PCIE_COUNT.name("1h"),
    THROTTLE_COUNT.name("1h"),
    THROTTLED["thermal"].name("1h"),
    THROTTLED["power"].name("1h"),
    *(thermal_hourly("mem", stat) for stat in ("sum", "count", "util", "pairs")),
)
SHORT_HOURS = 6  # the longest short window, in hours
# The hourly records the group writes: only those the short windows read.
HOURLY_READ: frozenset[str] = frozenset((*READ_HOUR, *READ_HOURLY))
RECORDS: tuple[str, ...] = tuple(r.record for r in rules())


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
