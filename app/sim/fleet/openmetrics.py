"""OpenMetrics text with timestamps, for `promtool tsdb create-blocks-from openmetrics` (backfill).

Series keep the live exporter's names, so the rule bundle runs unchanged over backfilled blocks, and each
sample carries the `instance`/`job` labels a scrape would have added (plus an `up` series per exporter and
kube-state-metrics' GPU capacity), so rules that join on `instance` or read `up` work too.

Counters and OpenMetrics' `_total` rule: a counter family's samples must be named `<family>_total`, and
dcgm-exporter's counter names do not end in `_total` (`..._COUNT_TOTAL` is upper case). `counter_style`:
- "unknown" (default): counters are typed `unknown`; names unchanged; valid strict OpenMetrics.
- "counter": typed `counter` with the bare names; Prometheus' parser (and so promtool) accepts it, strict
  OpenMetrics parsers do not.
- "suffixed": typed `counter`, samples renamed `<name>_total`; strictly valid, but the series no longer
  match the exporter's names (the rule bundle would not see them).

`families` restricts the output to those family names (`metrics.RULE_FAMILIES`: what the rule bundle
reads); a sample costs about 370 bytes of text, so a full fleet-day is large.

Grouping: "time" (default) streams one block of families per instant — constant memory and disk, and
promtool accepts it — but a strict parser wants each series' points contiguous; "series" spools each
family to a temporary file and writes it series by series at `close` (memory: one family's samples).
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from app.sim.fleet import exposition, fieldsets, metrics
from app.sim.fleet.exposition import HostnameLabel, Sample
from app.sim.fleet.frames import Frame
from app.sim.fleet.params import ExporterView

CounterStyle = Literal["unknown", "counter", "suffixed"]
Grouping = Literal["time", "series"]
_UP = ("up", "1 if the target's scrape succeeded.")


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    om_type: str
    help: str
    sample_name: str
    samples: list[Sample]


def format_timestamp(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else f"{t:.3f}"


class OpenMetricsWriter:
    """Writes frames as OpenMetrics text; `close` appends `# EOF` (and, when grouping by series, the data)."""

    def __init__(
        self,
        path: Path,
        *,
        hostname_label: HostnameLabel = "Hostname",
        counter_style: CounterStyle = "unknown",
        grouping: Grouping = "time",
        target_labels: bool = True,
        families: Collection[str] | None = None,
        view: ExporterView | None = None,
    ) -> None:
        self.path = path
        self.hostname_label = hostname_label
        self.counter_style = counter_style
        self.grouping = grouping
        self.target_labels = target_labels
        self.families = frozenset(families) if families is not None else None
        self.view = view or exposition.CLASSIC_VIEW
        if self.families is not None and self.view.metric_names == "4.6":
            self.families |= {fieldsets.exported_name(name, dcgm_4_6=True) for name in self.families}
        self.samples = 0
        self._out: IO[str] = path.open("w", encoding="utf-8")
        self._spool_dir: tempfile.TemporaryDirectory[str] | None = None
        self._spools: dict[str, tuple[str, str, IO[str]]] = {}
        if grouping == "series":
            self._spool_dir = tempfile.TemporaryDirectory(prefix="sickbay-om-", dir=path.parent)

    def _family(self, spec_name: str, prom_type: str) -> tuple[str, str, str]:
        """(family name, OpenMetrics type, sample name) under the counter style."""
        if prom_type != "counter":
            return spec_name, prom_type, spec_name
        if self.counter_style == "unknown":
            return spec_name, "unknown", spec_name
        if self.counter_style == "counter":
            return spec_name, "counter", spec_name
        return spec_name, "counter", f"{spec_name}_total"

    def write(self, frame: Frame) -> None:
        ts = format_timestamp(frame.time_s)
        for family in self._families(frame):
            if self.families is None or family.name in self.families:
                self._emit(family, ts)

    def _families(self, frame: Frame) -> Iterable[_Family]:
        for spec, samples in exposition.family_samples(
            frame.nodes, hostname_label=self.hostname_label, target_labels=self.target_labels, view=self.view
        ):
            name, om_type, sample_name = self._family(spec.name, spec.kind)
            yield _Family(name, om_type, spec.help, sample_name, samples)
        if not self.target_labels:
            return
        up = [
            (
                f'instance="{exposition.exporter_instance(node.node)}",job="{exposition.EXPORTER_JOB}"',
                "1" if node.exporter_up else "0",
            )
            for node in frame.nodes
        ]
        yield _Family(_UP[0], "gauge", _UP[1], _UP[0], up)
        for name, help_text, samples in exposition.kube_state_samples(frame.capacities, target_labels=True):
            yield _Family(name, "gauge", help_text, name, samples)

    def _emit(self, family: _Family, ts: str) -> None:
        self.samples += len(family.samples)
        if self.grouping == "time":
            out = self._out
            out.write(f"# TYPE {family.name} {family.om_type}\n# HELP {family.name} {family.help}\n")
            out.writelines(
                f"{family.sample_name}{{{labels}}} {value} {ts}\n" for labels, value in family.samples
            )
            return
        spool = self._spool(family)
        spool.writelines(
            f"{family.sample_name}{{{labels}}}\t{value} {ts}\n" for labels, value in family.samples
        )

    def _spool(self, family: _Family) -> IO[str]:
        if family.name not in self._spools:
            assert self._spool_dir is not None
            path = Path(self._spool_dir.name) / f"{len(self._spools):03d}.om"
            self._spools[family.name] = (family.om_type, family.help, path.open("w+", encoding="utf-8"))
        return self._spools[family.name][2]

    def close(self) -> None:
        out = self._out
        for name, (om_type, help_text, spool) in self._spools.items():
            spool.seek(0)
            lines = spool.readlines()
            spool.close()
            lines.sort(key=lambda line: line.split("\t", 1)[0])  # stable: time order kept per series
            out.write(f"# TYPE {name} {om_type}\n# HELP {name} {help_text}\n")
            out.writelines(line.replace("\t", " ", 1) for line in lines)
        out.write("# EOF\n")
        out.close()
        if self._spool_dir is not None:
            self._spool_dir.cleanup()


def family_names(counter_style: CounterStyle = "unknown") -> tuple[str, ...]:
    """The sample names a backfill will create, for tests and queries."""
    suffix = "_total" if counter_style == "suffixed" else ""
    counters = (spec.name + (suffix if spec.kind == "counter" else "") for spec in metrics.SPECS)
    return (*counters, metrics.XID_SPEC.name, metrics.HEALTH_SPEC.name)
