"""Scoring's reads when the recording rules are installed: recorded series and instant vectors only.

Each cycle asks Prometheus whether the rules' series exist (`count(gpu:…:count_over_time7d)`):

- yes (the *recorded* path): at the two instants scoring reads (the last grid instant the rules have
  recorded, up to a step or two before now as their group's phase has it, and `sustain_s` before), the
  rules' long windows (`recorded_rules.READ`), their hourly sums at those instants and at each of the five
  hours before (`READ_HOURLY`, summed here into 6 h windows), the GPU temperature (every GPU, new ones
  too) and the few fields read for their values (`recorded_reads`, `recorded_presence`): one range query
  per series for the whole fleet, a few points each, no raw window. Records that count events and the
  value fields are read sparse (their non-zero values, and per field a read of the GPUs with it), since a
  series answered costs the same whatever it holds. The records of fields no series is named after (the
  label-values API), and of the volatile ECC counters where the aggregate ones are exported, are not read:
  no feature reads them.
  Memory grows with the GPUs times the features, not with GPUs x look-back. The features of regular GPUs
  come from those values (`recorded_features`). Hosts with a GPU that is not regular (less than a full week
  of samples, a counter reset within it, no recorded values) are read raw over the look-back, in batches
  of hosts: their windows stop at a first row or a reset, which an instant vector cannot show;
- no (the *raw* path, the fallback): the whole look-back raw, as before the rules existed.

The path in use is logged when it changes (WARNING for raw: it is the path that does not scale) and is the
gauge `sickbay_predict_read_path{path=…}`; the hosts read raw on the recorded path are
`sickbay_predict_raw_hosts`. The backtest replays old history, where no rule ever ran: it reads raw.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Gauge

from app.predict import (
    allocator,
    features,
    range_answers,
    recent_window,
    recorded_features,
    recorded_reads,
    recorded_rows,
    recorded_xid,
    score,
)
from app.predict import recorded_lacking as lacking_reads
from app.predict import recorded_presence as presence
from app.predict import recorded_rules as rr
from app.predict.prometheus import Reader, ReaderSettings
from app.predict.promql import HostRef

log = logging.getLogger(__name__)

RECORDED, RAW = "recorded", "raw"
HOUR_S = recorded_reads.HOUR_S
HOST_BATCH = 200  # hosts per raw read of the irregular ones: one query per metric per batch


@dataclass(frozen=True, slots=True)
class FeatureRead:
    """One cycle's read: the exporter's samples it saw (for the fields the fleet lacks; on the recorded
    path the fields not read for their values hold `recorded_presence.PRESENT`) and the features table."""

    path: str
    frame: pd.DataFrame
    table: pd.DataFrame
    raw_hosts: int = 0
    points: int = 0  # the samples the recorded path's reads returned (0 on the raw path)


@dataclass(frozen=True, slots=True)
class PathMetrics:
    read_path: Gauge
    raw_hosts: Gauge

    @classmethod
    def create(cls, registry_: CollectorRegistry) -> PathMetrics:
        return cls(
            read_path=Gauge(
                "sickbay_predict_read_path",
                "1 for the way scoring reads history: recorded (rules installed) or raw (the whole look-back)",
                ["path"],
                registry=registry_,
            ),
            raw_hosts=Gauge(
                "sickbay_predict_raw_hosts",
                "Hosts read raw over the look-back on the recorded path (new, reset or gappy GPUs)",
                registry=registry_,
            ),
        )


@dataclass(slots=True)
class FeatureReader:
    """Picks the path each cycle and reads the features scoring needs (`read(now, tail_s)`)."""

    reader: Reader
    metrics: PathMetrics | None = None
    _raw: recent_window.RecentWindow | None = None
    _path: str | None = None
    _refs: dict[str, HostRef] = field(default_factory=dict)
    _stale: tuple[str, ...] = ()  # the records an older rule bundle lacks (it is read raw meanwhile)

    def read(self, now: datetime, tail_s: float) -> FeatureRead:
        path = RECORDED if self._rules_installed(now) else RAW
        if path != self._path:
            self._say(path)
        out = self._recorded(now, tail_s) if path == RECORDED else self._raw_read(now, tail_s)
        if self.metrics is not None:
            for name in (RECORDED, RAW):
                self.metrics.read_path.labels(path=name).set(1 if name == path else 0)
            self.metrics.raw_hosts.set(out.raw_hosts)
        return out

    def _say(self, path: str) -> None:
        self._path = path
        if path == RECORDED:
            self._raw = None  # its week of samples is not needed any more
            log.info(
                "risk scoring reads the recording rules' long windows and hourly sums, and the "
                "exporter's fields, at the instants it scores: no raw window"
            )
        elif self._stale:
            log.warning(
                "risk scoring reads %.0f h of raw samples per cycle: the recording rules installed (group "
                "%s) are older than this Sickbay and lack %s; install this version's "
                "rules/prometheus/sickbay-rules.yaml (or its PrometheusRule) to read the recorded windows",
                self.reader.settings.lookback_s / 3600.0,
                rr.GROUP,
                ", ".join(self._stale),
            )
        else:
            log.warning(
                "risk scoring reads %.0f h of raw samples per cycle: the recording rules (group %s in "
                "rules/prometheus/sickbay-rules.yaml) are not installed, so memory grows with GPUs x look-back",
                self.reader.settings.lookback_s / 3600.0,
                rr.GROUP,
            )

    def _rules_installed(self, now: datetime) -> bool:
        if self.reader.settings.step_s != rr.STEP_S:
            return False  # the rules sum a 5-minute grid; another grid's features would differ
        at = _utc(now.timestamp())
        answer = self.reader.query_range(f"count({rr.SAMPLES})", at, at)
        if not any(one.get("values") for one in answer if isinstance(one, Mapping)):
            return False
        # An older bundle lacks the records added since: the features would read them as missing.
        names = self.reader.metric_names(_utc(now.timestamp() - 3 * rr.STEP_S), at, match=rr.SUCCESSORS_MATCH)
        stale = rr.stale_records(names) if names is not None else ()
        if stale != self._stale:
            self._stale = stale
            self._path = None  # said again, with the reason
        return not stale

    def _raw_read(self, now: datetime, tail_s: float) -> FeatureRead:
        reach = _reach_s(self.reader.settings, tail_s)
        if self._raw is None or self._raw.reader.settings.lookback_s != reach:
            self._raw = recent_window.RecentWindow(Reader(replace(self.reader.settings, lookback_s=reach)))
        frame = self._raw.refresh(now)
        table = features.compute_features(score.current_boards(frame), tail_s=tail_s)
        return FeatureRead(RAW, frame, table)

    def _recorded(self, now: datetime, tail_s: float) -> FeatureRead:
        settings = self.reader.settings
        step = settings.step_s
        last = min(math.floor(now.timestamp() / step) * step, self._recorded_until(now))
        instants = sorted({last - math.floor(tail_s / step) * step, last})
        reads = recorded_reads.InstantReads(self.reader, refs=self._refs)
        # The answers and the arrays made of them: where a cycle peaks (the raw hosts' features, below,
        # are computed outside, among temporaries glibc would otherwise mmap afresh each time).
        with allocator.lowered(settings.mmap_threshold_bytes):
            values = _read_values(reads, instants)
            n = len(reads.gpus)
            keys = _keys(reads.gpus, instants)
            flat = {name: recorded_reads.pad(v, n).reshape(-1) for name, v in values.items()}
            frame = _instant_frame(keys, flat)
            if frame.empty:
                return FeatureRead(RECORDED, frame, features.compute_features(frame))
            irregular = _irregular(frame, flat)
            regular = ~keys["node"].isin(irregular).to_numpy()
            lookback_start = math.ceil((now.timestamp() - _reach_s(settings, tail_s)) / step) * step
            chosen = flat if regular.all() else {name: v[regular] for name, v in flat.items()}
            rows = recorded_rows.rows(keys[regular], chosen)
            table = recorded_features.combine(rows, lookback_start=lookback_start)
            xid = recorded_xid.read(self.reader, instants, nodes=set(table["node"].astype(str)))
        parts = [recorded_xid.merged(table, xid)]
        parts.extend(self._raw_hosts(sorted(irregular), now, tail_s, instants))
        table = pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)
        return FeatureRead(RECORDED, frame, table, raw_hosts=len(irregular), points=reads.points)

    def _recorded_until(self, now: datetime) -> float:
        """The last grid instant the rules have recorded: the one before their latest evaluation."""
        answer = self.reader.query_range(f"max(timestamp({rr.SAMPLES}))", now, now)
        times = [float(v[1]) for one in answer if isinstance(one, Mapping) for v in one.get("values", [])]
        step = self.reader.settings.step_s
        return math.floor(max(times) / step) * step if times else math.inf  # none: now's grid instant

    def _raw_hosts(
        self, nodes: Sequence[str], now: datetime, tail_s: float, instants: Sequence[float]
    ) -> list[pd.DataFrame]:
        """The features of these hosts from their raw look-back, in batches of hosts."""
        if not nodes:
            return []
        settings = self.reader.settings
        refs = [self._refs.get(node) for node in nodes]
        if any(ref is None for ref in refs):
            start = _utc(now.timestamp() - tail_s - rr.SHORT_HOURS * HOUR_S)
            self._refs.update({ref.node: ref for ref in self.reader.hosts(start, now)})
        known = [self._refs[node] for node in nodes if node in self._refs]
        out: list[pd.DataFrame] = []
        for lo in range(0, len(known), HOST_BATCH):
            frame = self.reader.read(
                _utc(now.timestamp() - _reach_s(settings, tail_s)), now, hosts=known[lo : lo + HOST_BATCH]
            )
            table = features.compute_features(score.current_boards(frame), tail_s=tail_s)
            out.append(table[table["timestamp"].isin(instants)])
        return out


def _read_values(
    reads: recorded_reads.InstantReads, instants: Sequence[float]
) -> dict[str, recorded_reads.Array]:
    """Every value `recorded_features` reads, by name, a row per GPU and a column per instant: the
    exporter's fields at the instants (`presence`: the temperature, the value fields, the others'
    presence), `rr.READ` and the XID event count at the instants, `rr.READ_HOURLY` there and summed
    over 6 h. Event counts are read sparse, and one read per field says which GPUs have it."""
    step = reads.reader.settings.step_s
    hours = sorted({t - k * HOUR_S for t in instants for k in range(rr.SHORT_HOURS)})
    column = {t: i for i, t in enumerate(hours)}
    names = reads.reader.metric_names(
        _utc(instants[0] - step), _utc(instants[-1]), match=presence.NAMES_MATCH
    )
    exported = presence.exported(names)
    unused = _unused_fields(exported)
    records = [
        recorded_reads.recorded(name, times, step_s=step, sparse=presence.sparse(name))
        for names_, times in (((*rr.READ, rr.XID_EVENTS), instants), (rr.READ_HOURLY, hours))
        for name in names_
        if _read_needed(name, unused)
    ]
    records, probes = _with_presence(records, instants, step_s=step)
    value_fields = [m for m in presence.VALUE_FIELDS if m not in unused]
    wanted = [
        recorded_reads.raw(features.GPU_TEMP, instants),  # first: every GPU, new ones too
        *(recorded_reads.raw(m, instants, sparse=True) for m in value_fields),
        # The largest answers (dense, an hour's value at each of 12 hours) while little else is held yet.
        *sorted(records, key=lambda read: (read.sparse, len(read.times) <= len(instants))),
    ]
    got = reads.run(wanted, remember=features.GPU_TEMP)
    by_name = {read.name: read for read in wanted}
    lacking = lacking_reads.lacking(reads, got[features.GPU_TEMP], value_fields, instants)
    # A GPU with a recorded week (its samples' record) but no value of the field's dense read lacks the field.
    recorded_week = ~np.isnan(got[rr.SAMPLES])
    for field_, name in probes.items():
        lacking[field_] = recorded_week & np.isnan(_at(by_name[name], got[name], instants))
    # Each read's array is taken from `got` (and masked in place) as it is used: held once at a time.
    values: dict[str, recorded_reads.Array] = {features.GPU_TEMP: got.pop(features.GPU_TEMP)}
    for metric in value_fields:
        values[metric] = got.pop(metric)
        values[metric][lacking[metric][: len(values[metric])]] = np.nan
    for read in records:
        value = got.pop(read.name)
        if read.name.startswith(recorded_reads.HAS):
            continue
        of = presence.field_of(read.name)
        if of in lacking:  # a field a GPU lacks at an instant is missing, never the sparse read's 0
            value[lacking[of].any(axis=1)] = np.nan
        if read.times != tuple(instants):  # an hourly record, read at the hours
            values[read.name] = _at(read, value, instants)
            # The 6 h window: the instant's hour and the five before it (NaN where one is missing).
            windows = [[column[t - k * HOUR_S] for k in range(rr.SHORT_HOURS)] for t in instants]
            values[recorded_rows.six(read.name)] = np.stack(
                [value[:, w].sum(axis=1) for w in windows], axis=1
            )
        else:
            values[read.name] = value
    seen = ~np.isnan(values[features.GPU_TEMP])
    for metric in features.SOURCE_METRICS:
        if metric not in values:
            values[metric] = presence.frame_values(
                metric, values, seen=seen, lacking=lacking.get(metric), exported=metric in exported
            )
    return values


def _with_presence(
    records: Sequence[recorded_reads.Read], instants: Sequence[float], *, step_s: float
) -> tuple[list[recorded_reads.Read], dict[str, str]]:
    """The records to read, and for each field read sparse the read that says which GPUs have it.

    A sparse read cannot tell a GPU whose count is 0 from one without the field, so each such field has
    one read that is dense (every GPU with the record answers): one of its records already read dense,
    else its first record at the instants, now read dense (a dense read of a count costs Prometheus ~0.1 s
    more than a sparse one at 80,000 GPUs, and Sickbay ~0.4 s to parse), else (a field with hourly records
    only) its first record read dense at the instants, apart (`HAS`). It replaces a join per field
    (`(samples * 0 + 1) unless on (BY) record`: twice a record's reads, 1.5 s of Prometheus' CPU each at
    80,000 GPUs, 12 of them a cycle, docs/benchmarks.md)."""
    times = tuple(instants)
    counted = [f_ for read in records if read.sparse and (f_ := presence.field_of(read.name)) is not None]
    probes = {
        f_: read.name
        for read in reversed(records)
        if not read.sparse and (f_ := presence.field_of(read.name)) in counted
    }
    out = list(records)
    for i, read in enumerate(records):
        field_ = presence.field_of(read.name)
        if field_ in counted and field_ not in probes and read.times == times:
            out[i] = recorded_reads.recorded(read.name, times, step_s=step_s)
            probes[field_] = read.name
    for field_ in dict.fromkeys(counted):
        if field_ not in probes:
            first = next(read.name for read in records if presence.field_of(read.name) == field_)
            out.append(recorded_reads.recorded(first, times, step_s=step_s, name=recorded_reads.HAS + field_))
            probes[field_] = recorded_reads.HAS + field_
    return out, probes


def _at(
    read: recorded_reads.Read, value: recorded_reads.Array, instants: Sequence[float]
) -> recorded_reads.Array:
    """A read's columns at the instants (an hourly read has one per hour)."""
    column = {round(t, 3): i for i, t in enumerate(read.times)}
    return value[:, [column[round(t, 3)] for t in instants]]


def _unused_fields(exported: frozenset[str]) -> frozenset[str]:
    """The source fields whose records no feature reads this cycle: those no series is named after
    (their features are NaN), and the volatile ECC counters where the aggregate ones are exported
    (`Rows.either`)."""
    unused = set(features.SOURCE_METRICS) - exported
    unused |= {
        vol
        for agg, vol in ((features.SBE_AGG, features.SBE_VOL), (features.DBE_AGG, features.DBE_VOL))
        if agg in exported
    }
    return frozenset(unused)


def _read_needed(record: str, unused: frozenset[str]) -> bool:
    """Whether a record is read: not one of an unused field's (`gpu:<field>:<op>`); the presence and
    reset records always are (they decide which hosts are regular)."""
    return record in (rr.SAMPLES, rr.RESETS) or record.split(":")[1] not in unused


def _keys(gpus: Mapping[recorded_reads.Identity, int], instants: Sequence[float]) -> pd.DataFrame:
    """`KEY_COLUMNS` of a row per GPU (in `gpus`' order) per instant."""
    identities = sorted(gpus, key=gpus.__getitem__)
    n = len(instants)
    return pd.DataFrame(
        {
            "node": np.repeat(np.array([g[0] for g in identities], dtype=object), n),
            "gpu": np.repeat(np.array([g[1] for g in identities], dtype=np.int64), n),
            "uuid": np.repeat(np.array([g[2] for g in identities], dtype=object), n),
            "timestamp": np.tile(np.asarray(instants, dtype=np.float64), len(identities)),
        }
    )


def _instant_frame(keys: pd.DataFrame, flat: Mapping[str, recorded_reads.Array]) -> pd.DataFrame:
    """The exporter's fields at the instants, as the raw path's frame has them (`present` included)."""
    names = list(features.SOURCE_METRICS)
    values = np.vstack([flat[m] for m in names]) if len(keys) else np.zeros((len(names), 0))
    present = np.asarray((~np.isnan(values)).any(axis=0), dtype=np.int64)
    columns = {k: keys[k].to_numpy() for k in ("node", "gpu", "uuid")}
    timestamps = keys["timestamp"].to_numpy(dtype=np.float64)
    return range_answers.grid_frame(columns, timestamps, names=names, values=values, present=present)


def _reach_s(settings: ReaderSettings, tail_s: float) -> float:
    """How far back the raw path reads: the look-back from the earliest row scored (`tail_s` before now),
    so that row's 7-day windows run a full week, as the rules' do at every instant."""
    return settings.lookback_s + math.ceil(tail_s / settings.step_s) * settings.step_s


def _irregular(frame: pd.DataFrame, flat: Mapping[str, recorded_reads.Array]) -> set[str]:
    """Hosts with a (current) GPU lacking a full recorded week without resets at an instant."""
    # Exactly a week of rows: more means a grid instant written twice (the group moved its phase, when
    # renamed: `recorded_rules`), whose sums hold a row twice; read raw until that week has passed.
    full = flat[rr.SAMPLES] == rr.FULL_WEEK
    calm = np.nan_to_num(flat[rr.RESETS], nan=0.0) == 0
    current = frame.index.isin(score.current_boards(frame).index)
    return set(frame.loc[current & ~(full & calm), "node"].astype(str))


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
