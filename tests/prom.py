"""Real Prometheus for tests and benchmarks: start one on loopback, or one over a backfilled dataset.

`running_prometheus` starts the binary on a data directory and always stops it. `backfilled_prometheus`
backfills a dataset (`app.sim.fleet.backfill`: the predictor's source metrics, lean labels) into a fresh
TSDB under `tmp_dir` and serves it, so `app.predict.prometheus.Reader` reads back what the dataset holds.

A backfill has no staleness markers, and Prometheus 2.x finds a sample up to (and including) the
look-back delta before the query time: with the default 5 min and data every 5 min, the sample before a
one-step gap would fill it. So the backfilled server runs with a look-back delta one second shorter than
the data's step (at least 1 s): each query instant sees only a sample at that instant, and a gap stays a
gap, as the staleness markers of a live scrape would make it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.sim.fleet import backfill

EMPTY_CONFIG = "global:\n  scrape_interval: 1m\nscrape_configs: []\n"


@contextmanager
def running_prometheus(
    prometheus: Path, *, data: Path, config: Path, port: int, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """A real Prometheus on loopback; yields its base URL once it is ready."""
    log = data.parent / f"prometheus-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(prometheus),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=100y",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"prometheus exited:\n{log.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(log.read_text()[-3000:])
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def instant_query(url: str, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
    """The result vector of an instant query (asserts success)."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    return _result(f"{url}/api/v1/query", params, timeout=30)


def _result(endpoint: str, params: dict[str, str], *, timeout: float) -> list[dict[str, Any]]:
    """The `data.result` of a query API answer (asserts success)."""
    with urllib.request.urlopen(f"{endpoint}?{urllib.parse.urlencode(params)}", timeout=timeout) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def lookback_delta(step_s: float | None) -> str:
    """A query look-back delta one second under the data's step (see the module docstring)."""
    if step_s is None:
        return "5m"
    return f"{max(1, round(step_s) - 1)}s"


@contextmanager
def backfilled_prometheus(
    dataset_dir: Path,
    tmp_dir: Path,
    *,
    prometheus: Path,
    promtool: Path,
    port: int,
    host_label: backfill.HostLabel = "Hostname",
    extra: tuple[str, ...] = (),
    stats: list[backfill.BackfillStats] | None = None,
) -> Iterator[str]:
    """Backfill `dataset_dir` into `tmp_dir/tsdb`, start Prometheus on it and yield its URL once the
    history answers queries. `stats`, when given, receives the backfill's figures. Compaction is off
    (`--storage.tsdb.max-block-duration=2h`: the backfilled blocks are larger already), so no background
    work competes with the queries."""
    data = tmp_dir / "tsdb"
    result = backfill.backfill(dataset_dir, data, promtool=promtool, host_label=host_label)
    if stats is not None:
        stats.append(result)
    config = tmp_dir / "prometheus.yml"
    config.write_text(EMPTY_CONFIG)
    flags = (
        f"--query.lookback-delta={lookback_delta(result.step_s)}",
        "--storage.tsdb.max-block-duration=2h",
        *extra,
    )
    with running_prometheus(prometheus, data=data, config=config, port=port, extra=flags) as url:
        probe = f"count({{__name__=~{json.dumps('|'.join(result.families))}}})"
        # Prometheus opens the backfilled blocks at start-up; on 2 busy cores (the suite runs three
        # workers) that has taken over 30 s. A bound, not a wait: it returns as soon as they answer.
        deadline = time.monotonic() + 120
        while not instant_query(url, probe, at=result.end):
            if time.monotonic() > deadline:
                raise TimeoutError("the backfilled blocks never became queryable")
            time.sleep(0.2)
        yield url


def range_query(url: str, promql: str, *, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
    """The result matrix of a range query (asserts success)."""
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}s"}
    return _result(f"{url}/api/v1/query_range", params, timeout=120)


def openmetrics(name: str, matrix: list[dict[str, Any]]) -> str:
    """One family of OpenMetrics text (no `# EOF`) holding a range query's answer under `name`."""
    lines = [f"# TYPE {name} unknown"]
    for one in matrix:
        labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in sorted(one["metric"].items()) if k != "__name__")
        lines.extend(f"{name}{{{labels}}} {value} {float(t):.3f}" for t, value in one["values"])
    return "\n".join(lines) + "\n"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
