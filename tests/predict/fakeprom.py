"""A fake Prometheus range API over a dataset frame: what `prometheus.Reader` would get from a real one.

`FrameClient` implements the `prometheus.RangeClient` protocol in memory: each query (a metric name, or
`{__name__=~"OLD|NEW"}`) answers one series per GPU with the samples in [start, end] on the step grid, as
Prometheus' `query_range` matrix result does (missing samples left out, dcgm-exporter's `Hostname`/`gpu`/
`UUID` labels). Values are numbers, not the strings Prometheus sends: the reader's `float()` takes both
(tests/predict/test_prometheus.py covers strings over real HTTP), and formatting millions of samples would
dominate these tests. Answers are cached per query, so a second read of the same range costs only the
reader's parsing. `DownClient` fails every query like an unreachable server.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd


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
        self._columns = {c: data[c].to_numpy(dtype=np.float64) for c in data.columns if c.startswith("DCGM_")}
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
        matched = re.fullmatch(r'\{__name__=~"([^"]+)"\}', query)
        names = matched.group(1).split("|") if matched else [query]
        out: list[dict[str, Any]] = []
        for name in names:
            column = self._columns.get(name)
            if column is None:
                continue
            for node, gpu, uuid, s, e in self._gpus:
                t, v = self._t[s:e], column[s:e]
                keep = (t >= lo) & (t <= hi) & ~np.isnan(v) & (np.remainder(t - lo, step_s) == 0)
                if not keep.any():
                    continue
                values = np.column_stack([t[keep], v[keep]]).tolist()
                labels = {"__name__": name, "Hostname": node, "gpu": gpu, "UUID": uuid}
                out.append({"metric": labels, "values": values})
        return out


class DownClient:
    """Every query fails as if Prometheus were unreachable."""

    def __init__(self) -> None:
        self.queries: list[str] = []

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
        raise ConnectionError("[Errno 111] Connection refused")
