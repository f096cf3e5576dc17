"""The sums the recording rules write, one series per GPU: each per-row quantity with its levels (the
5-minute row from the exporter, the hourly sum where the short windows read it, daily, weekly), the PromQL
helpers they are built from, and the record names the features read them by.

Why the levels, what an evaluation loads and what a missed round does: `recorded_rules`' docstring, which
puts these sums in the group's order. The hourly records the 1 h and 6 h windows read are listed here,
beside the sums they name, because they decide which sums get an hourly level (`Sum.rules`). Pure data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app import dcgm_fields
from app.predict import features
from app.predict.features import fields as f

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
# What scoring reads of each line: the temperature's mean, and the line fitted to the moments above
# (`features.thermal.line_residual`'s slope, and its value at zero utilisation), 3 records where the moments
# are 6: at 80,000 GPUs a dense read costs Prometheus ~0.8 s of CPU and Sickbay ~0.3 s (docs/benchmarks.md).
LINE = ("mean", "slope", "intercept")
_METRIC = {"gpu": f.GPU_TEMP, "mem": f.MEMORY_TEMP, "gap": f"{f.MEMORY_TEMP}_minus_{f.GPU_TEMP}"}
_MEANS = {  # stat -> (the mean's record op, the sum's op)
    "util": ("util_pairs_avg_over_time7d", "util_pairs_sum_over_time{w}"),
    "temp": ("avg_over_time7d_util_pairs", "sum_over_time{w}_util_pairs"),
    "util_sq": ("util_sq_pairs_avg_over_time7d", "util_sq_pairs_sum_over_time{w}"),
    "util_temp": ("util_product_avg_over_time7d", "util_product_sum_over_time{w}"),
}


def thermal(temperature: str, stat: str) -> str:
    if stat == "mean":
        return record(_METRIC[temperature], "avg_over_time7d")
    if stat in ("slope", "intercept"):
        return record(_METRIC[temperature], f"util_line_{stat}7d")
    return record(_METRIC[temperature], _MEANS[stat][0])


def _line(name: str) -> list[Rule]:
    """The 7-day line of a temperature against utilisation, from the moments' records, as
    `features.thermal.line_residual` fits it: the slope `cov / var_u` where `var_u > 1`, else 0 (flat),
    and the line's value at zero utilisation (`temp - slope * util`); none where no row had both."""
    u, t = thermal(name, "util"), thermal(name, "temp")
    var_u = f"({thermal(name, 'util_sq')} - {u} * {u})"
    cov = f"({thermal(name, 'util_temp')} - {u} * {t})"
    slope = thermal(name, "slope")
    return [
        # The variance filtered before the division (a comparison with a number is no join): each
        # vector-to-vector operation costs Prometheus ~0.6 s of CPU at 80,000 GPUs (docs/benchmarks.md).
        Rule(slope, f"{cov} / ({var_u} > 1) or {u} * 0"),
        Rule(thermal(name, "intercept"), f"{t} - {slope} * {u}"),
    ]


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
        out.extend(_line(name))
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


def long_rules() -> list[Rule]:
    """The long windows' rules, each after those it reads: the sums, persistence's ratios, the thermal line."""
    out: list[Rule] = []
    for one in (PRESENCE, RESET_SUM, *_INCREASE_SUMS, *_ACTIVE_SUMS, _EPISODE_SUM, XID_CHANGE_SUM):
        out.extend(one.rules())
    out.extend(Rule(persistence(s.metric), f"{s.name('24h')} / {DAY_ROWS}") for s in _ACTIVE_SUMS)
    out.extend(_thermal())
    return out


# The hourly records the 1 h windows read at the scoring instants (their hour only).
READ_HOUR: tuple[str, ...] = (
    UTIL_SUM.name("1h"),
    UTIL_COUNT.name("1h"),
    THROTTLED["hardware"].name("1h"),
    *(hourly(m, "increase{w}") for m in (f.THERMAL_VIOLATION, f.POWER_VIOLATION)),
    *(thermal_hourly(t, stat) for t in ("gpu", "gap") for stat in ("sum", "count", "util", "pairs")),
)
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
