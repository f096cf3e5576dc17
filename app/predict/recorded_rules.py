"""The recording rules that keep the features' long windows (24 h, 7 d) in Prometheus, one series per GPU.

Every rule here reads the exporter's series on the features' 5-minute grid — a subquery at the grid's
step, `[W:5m]`, whose points are the samples the raw reader would read at the same instants — so a rule
sums exactly what `features` sums over the same rows (see `recorded_features`). Windows of a sum or a
count are `(t - W, t]` as the features have them: `W - 5m` in the subquery, whose first point is the
first multiple of the step at or after its start (Prometheus 2.x includes both ends of a range). An
increase keeps the whole `[W:5m]`: its first point is the sample before the window, from which the
window's first increment counts, so Prometheus finds samples at both ends and extrapolates nothing.

Names follow Prometheus' `level:metric:operations` (https://prometheus.io/docs/practices/rules/):
level `gpu` (no aggregation: every label of the exporter's series is kept, so both host spellings,
`Hostname` and `hostname`, and `gpu`/`UUID` pass through as the exporter wrote them), the metric name
unchanged, then the operations. A field DCGM 4.6 renamed is read under both names, the old one first
(`f(OLD) or f(NEW)`: one series per GPU, never a duplicate label set). Sums of several fields carry a
`sickbay_field` label inside the expression only, aggregated away with `without`.

Pure data: `rule_group()` is the group in `rules/prometheus/sickbay-rules.yaml` (a test holds them equal;
`python -m app.predict.recorded_rules` prints it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.predict import features
from app.predict.features import fields as f

GROUP = "sickbay-predict-long-windows"
# The rules are costly (subqueries over a week for every GPU) and the reader reads the latest value
# within `READ_WINDOW`, so they are evaluated every 5 minutes, like the grid.
INTERVAL = "5m"
READ_WINDOW = "10m"
STEP_S = 300
STEP = "5m"
DAY_MIN, WEEK_MIN = 24 * 60, 7 * 24 * 60
BLANK = f"{features.DCGM_BLANK_MIN:.0e}".replace("+", "")  # DCGM's blank sentinels are missing values
# A full week on the grid: the number of grid instants in (t - 7d, t].
FULL_WEEK = WEEK_MIN * 60 // STEP_S


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


def _open(minutes: int) -> str:
    """A subquery range whose points are the grid instants of (t - W, t]."""
    return f"[{minutes - STEP_S // 60}m:{STEP}]"


def _closed(minutes: int) -> str:
    """A subquery range whose points are the grid instants of [t - W, t]."""
    return f"[{minutes}m:{STEP}]"


def _window(minutes: int) -> str:
    return "7d" if minutes == WEEK_MIN else f"{minutes // 60}h"


def record(metric: str, operation: str) -> str:
    return f"gpu:{metric}:{operation}"


# -- the rules, by kind ----------------------------------------------------------------------------------

SAMPLES = record(f.GPU_TEMP, "count_over_time7d")
RESETS = record("DCGM_FI_DEV_VOLATILE_COUNTERS", "resets7d")


def _presence() -> list[Rule]:
    # GPU_TEMP stands for the GPU's presence: every exporter field list has it.
    return [
        Rule(SAMPLES, either(f.GPU_TEMP, lambda m: f"count_over_time({m}{_open(WEEK_MIN)})")),
        Rule(RESETS, _summed(features.VOLATILE_COUNTERS, lambda m: f"resets({m}{_closed(WEEK_MIN)})")),
    ]


def _summed(metrics: tuple[str, ...], template: Callable[[str], str]) -> str:
    """The sum over several fields of `template`, per GPU: each field tagged so none hides another."""
    tagged = " or ".join(
        f'label_replace({either(m, template)}, "sickbay_field", "{m}", "", "")' for m in metrics
    )
    return f"sum without (sickbay_field) ({tagged})"


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


def increase(metric: str, minutes: int) -> str:
    return record(metric, f"increase{_window(minutes)}")


def _increases() -> list[Rule]:
    def over(minutes: int) -> Callable[[str], str]:
        return lambda m: f"increase({m}{_closed(minutes)})"

    return [Rule(increase(m, w), either(m, over(w))) for m, windows in INCREASES for w in windows]


# Persistence: the share of the last 24 h's grid rows whose trailing hour saw the counter rise.
PERSISTENT: tuple[tuple[str, tuple[str, ...]], ...] = (
    (f.SBE_AGG, (f.SBE_AGG,)),
    (f.SBE_VOL, (f.SBE_VOL,)),
    (f.PCIE_REPLAY, (f.PCIE_REPLAY,)),
    (f.NVLINK_CRC_FLIT, (f.NVLINK_CRC_FLIT, f.NVLINK_CRC_DATA)),  # the CRC features sum both fields
)


def persistence(metric: str) -> str:
    return record(metric, "active1h_avg_over_time24h")


def _persistence() -> list[Rule]:
    out = []
    for metric, summed in PERSISTENT:
        active = (
            f"({either(metric, lambda m: f'increase({m}[1h])')})"
            if len(summed) == 1
            else _summed(summed, lambda m: f"increase({m}[1h])")
        )
        out.append(Rule(persistence(metric), f"avg_over_time(({active} > bool 0){_open(DAY_MIN)})"))
    return out


EPISODES = record(f.PCIE_REPLAY, "episodes_sum_over_time24h")


def _rising(m: str, offset: int) -> str:
    """1 where the counter rose over the grid step ending `offset` steps ago (0 where it did not)."""
    step_m = STEP_S // 60
    now = f"{m} offset {offset * step_m}m" if offset else m
    before = f"{m} offset {(offset + 1) * step_m}m"
    return f"(({now} > bool 0) * ({now} != bool {before}))"


def _episodes() -> list[Rule]:
    # An episode starts on a step that rose after one that did not (`links.episodes`).
    def starts(m: str) -> str:
        return f"sum_over_time(({_rising(m, 0)} * (1 - {_rising(m, 1)})){_open(DAY_MIN)})"

    return [Rule(EPISODES, either(f.PCIE_REPLAY, starts))]


XID_CLASSES: tuple[tuple[str, int], ...] = (
    ("ignore", DAY_MIN),
    ("workload", DAY_MIN),
    ("hardware", WEEK_MIN),
)


def xid_events(cls: str) -> str:
    minutes = dict(XID_CLASSES)[cls]
    return record(f.XID, f"{cls}_changes_sum_over_time{_window(minutes)}")


def _member(m: str, codes: frozenset[int]) -> str:
    return "(" + " + ".join(f"({m} == bool {c})" for c in sorted(codes)) + ")"


def _xids() -> list[Rule]:
    def changes(cls: str, minutes: int) -> Callable[[str], str]:
        def expr(m: str) -> str:
            changed = f"({m} != bool {m} offset {STEP}) * ({m} != bool 0)"
            ignore, hardware = _member(m, features.XID_IGNORE), _member(m, features.XID_HARDWARE)
            member = {"ignore": ignore, "hardware": hardware}.get(cls, f"(1 - {ignore} - {hardware})")
            return f"sum_over_time(({changed} * {member}){_open(minutes)})"

        return expr

    return [Rule(xid_events(cls), either(f.XID, changes(cls, w))) for cls, w in XID_CLASSES]


# The thermal residuals' 7-day line: for each temperature, means over the rows where it and the
# utilisation are both valid (count, utilisation, temperature, their square and product), and the
# temperature's own mean over its valid rows.
TEMPERATURES = ("gpu", "mem", "gap")
STATS = ("count", "util", "temp", "util_sq", "util_temp", "mean")


def thermal(temperature: str, stat: str) -> str:
    metric = {"gpu": f.GPU_TEMP, "mem": f.MEMORY_TEMP, "gap": f"{f.MEMORY_TEMP}_minus_{f.GPU_TEMP}"}
    op = {
        "count": "util_pairs_count_over_time7d",
        "util": "util_pairs_avg_over_time7d",
        "temp": "avg_over_time7d_util_pairs",
        "util_sq": "util_sq_pairs_avg_over_time7d",
        "util_temp": "util_product_avg_over_time7d",
        "mean": "avg_over_time7d",
    }
    return record(metric[temperature], op[stat])


def _valid(metric: str) -> str:
    return "(" + either(metric, lambda m: f"{m} < {BLANK}") + ")"


def _thermal() -> list[Rule]:
    util = _valid(f.GPU_UTIL)
    temps = {
        "gpu": _valid(f.GPU_TEMP),
        "mem": _valid(f.MEMORY_TEMP),
        "gap": f"({_valid(f.MEMORY_TEMP)} - {_valid(f.GPU_TEMP)})",
    }
    week = _open(WEEK_MIN)
    out: list[Rule] = []
    for name, temp in temps.items():
        exprs = {
            "count": f"count_over_time(({temp} * {util}){week})",
            "util": f"avg_over_time(({util} and {temp}){week})",
            "temp": f"avg_over_time(({temp} and {util}){week})",
            "util_sq": f"avg_over_time(({util} * {util} and {temp}){week})",
            "util_temp": f"avg_over_time(({temp} * {util}){week})",
            "mean": f"avg_over_time({temp}{week})",
        }
        out.extend(Rule(thermal(name, stat), exprs[stat]) for stat in STATS)
    return out


def rules() -> tuple[Rule, ...]:
    return (*_presence(), *_increases(), *_persistence(), *_episodes(), *_xids(), *_thermal())


RECORDS: tuple[str, ...] = tuple(r.record for r in rules())


def rule_group() -> dict[str, Any]:
    """The rule group as it stands in `rules/prometheus/sickbay-rules.yaml`."""
    return {
        "name": GROUP,
        "interval": INTERVAL,
        "rules": [{"record": r.record, "expr": r.expr} for r in rules()],
    }


def main() -> int:
    import yaml  # noqa: PLC0415 - only to print the group

    sys.stdout.write(yaml.safe_dump({"groups": [rule_group()]}, sort_keys=False, width=10_000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
