"""A fake Prometheus range API over a dataset frame: what `prometheus.Reader` would get from a real one.

`FrameClient` implements the `prometheus.RangeClient` protocol in memory over a dataset frame (columns
node, gpu, uuid, timestamp, optionally present, DCGM_*). It answers what the reader asks:

- a metric, by name or as `{__name__=~"OLD|NEW"}`: one series per GPU with the samples in [start, end] on
  the step grid, as Prometheus' `query_range` matrix result does (missing samples, and rows with
  `present == 0`, left out; dcgm-exporter's `Hostname`/`gpu`/`UUID` labels);
- the same with label matchers (`Hostname=~"a|b"`), several selectors joined with `or`, as a batched read
  of some hosts sends them;
- `group by (...) (last_over_time(SELECTOR[Ns]))`, the query `Reader.hosts` finds the hosts with: one
  series per host with a sample of that metric in the range.

Values are numbers, not the strings Prometheus sends: the reader's `float()` takes both
(tests/predict/test_prometheus.py covers strings over real HTTP), and formatting millions of samples would
dominate these tests. Answers are cached per query, so a second read of the same range costs only the
reader's parsing; `queries` lists every query asked. `DownClient` fails every query like an unreachable
server.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

HOST_LABEL = "Hostname"

_GROUP = re.compile(r"group by \(([^)]*)\) \(last_over_time\((.+)\[([^\]]+)s\]\)\)")
_NAMES = re.compile(r'__name__=~"([^"]+)"')
_MATCHER = re.compile(r'(\w+)=~"((?:[^"\\]|\\.)*)"')


class FrameClient:
    def __init__(self, frame: pd.DataFrame) -> None:
        data = frame.sort_values(["node", "gpu", "uuid", "timestamp"], kind="stable").reset_index(drop=True)
        self.queries: list[str] = []
        self._t = data["timestamp"].to_numpy(dtype=np.float64)
        codes = [pd.factorize(data[c])[0] for c in ("node", "gpu", "uuid")]
        change = np.zeros(max(len(data) - 1, 0), dtype=bool)
        for code in codes:
            change |= code[1:] != code[:-1]
        edges = np.flatnonzero(change) + 1
        starts, ends = np.r_[0, edges], np.r_[edges, len(data)]
        node, gpu, uuid = (data[c].astype(str).to_numpy() for c in ("node", "gpu", "uuid"))
        self._gpus = [
            (str(node[s]), str(gpu[s]), str(uuid[s]), int(s), int(e))
            for s, e in zip(starts, ends, strict=True)
        ]
        present = data["present"].to_numpy() > 0 if "present" in data.columns else np.ones(len(data), bool)
        self._columns = {
            c: np.where(present, data[c].to_numpy(dtype=np.float64), np.nan)
            for c in data.columns
            if c.startswith("DCGM_")
        }
        self._cache: dict[tuple[str, float, float, float], list[dict[str, Any]]] = {}

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        *,
        params: dict[str, Any] | None = None,
        timeout: int | None = None,
    ) -> list[dict[str, Any]]:
        self.queries.append(query)
        step_s = float(step.rstrip("s"))
        key = (query, start_time.timestamp(), end_time.timestamp(), step_s)
        if key not in self._cache:
            self._cache[key] = self._answer(query, *key[1:])
        return self._cache[key]

    def _answer(self, query: str, lo: float, hi: float, step_s: float) -> list[dict[str, Any]]:
        grouped = _GROUP.fullmatch(query)
        if grouped:
            return self._hosts(grouped.group(2), lo, hi, step_s)
        out: list[dict[str, Any]] = []
        for part in query.split(" or "):
            out += self._select(part, lo, hi, step_s)
        return out

    def _select(self, selector: str, lo: float, hi: float, step_s: float) -> list[dict[str, Any]]:
        names, matchers = _parse(selector)
        out: list[dict[str, Any]] = []
        for name in names:
            column = self._columns.get(name)
            if column is None:
                continue
            for node, gpu, uuid, s, e in self._gpus:
                labels = {"__name__": name, HOST_LABEL: node, "gpu": gpu, "UUID": uuid}
                if not _matches(labels, matchers):
                    continue
                t, v = self._t[s:e], column[s:e]
                keep = (t >= lo) & (t <= hi) & ~np.isnan(v) & (np.remainder(t - lo, step_s) == 0)
                if keep.any():
                    out.append({"metric": labels, "values": np.column_stack([t[keep], v[keep]]).tolist()})
        return out

    def _hosts(self, selector: str, lo: float, hi: float, step_s: float) -> list[dict[str, Any]]:
        names, _ = _parse(selector)
        column = next((self._columns[n] for n in names if n in self._columns), None)
        if column is None:
            return []
        found: dict[str, dict[str, Any]] = {}
        for node, _gpu, _uuid, s, e in self._gpus:
            t = self._t[s:e]
            if node not in found and ((t >= lo - step_s) & (t <= hi) & ~np.isnan(column[s:e])).any():
                found[node] = {"metric": {HOST_LABEL: node}, "values": [[lo, "1"]]}
        return list(found.values())


def _parse(selector: str) -> tuple[list[str], dict[str, re.Pattern[str]]]:
    """The metric names and the label regex matchers of one selector."""
    names_match = _NAMES.search(selector)
    names = names_match.group(1).split("|") if names_match else [selector.split("{", maxsplit=1)[0]]
    matchers = {
        label: re.compile(value.replace("\\\\", "\\"))
        for label, value in _MATCHER.findall(selector)
        if label != "__name__"
    }
    return names, matchers


def _matches(labels: dict[str, str], matchers: dict[str, re.Pattern[str]]) -> bool:
    return all(label in labels and pattern.fullmatch(labels[label]) for label, pattern in matchers.items())


class DownClient:
    """Every query fails as if Prometheus were unreachable."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def custom_query_range(self, query: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.queries.append(query)
        raise ConnectionError("[Errno 111] Connection refused")
