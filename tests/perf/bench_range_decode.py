"""A range answer's body into columns: `range_json.decode` against the plain way it replaced (`json.loads`,
then `range_answers.samples`), both in this run, on the answers a 10,000-node scoring cycle receives.

Each answer is Prometheus' JSON for 80,000 GPUs (dcgm-exporter's `Hostname`, `gpu`, `UUID`, and the
record's `__name__`; values as Prometheus writes them, 1% "NaN" and 0.1% "+Inf"), at 2 points (a dense
read of a record at two instants) and 12 (an hourly read). Time is the best of `--repeat` with the garbage
collector paused as in a cycle (`range_answers.collector_paused`); memory is `tracemalloc`'s peak over one
decode, the body aside. Then each decoded answer is slotted (`range_answers.parse`) with the cycle's
label-set cache already warm, as every answer after a cycle's first is: the plain way's labels are dicts
(the record's name taken out, a tuple made), the decoded ones the GPU's names (`range_answers.GpuNames`).

    python -m tests.perf range_decode
    python -m tests.perf range_decode -- --series 8000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from app.predict import range_answers, range_json
from tests.perf import machine

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "range_decode.json"
SERIES = 80_000
POINTS = (2, 12)
T0 = 1_736_298_000


def answer(series: int, points: int, *, seed: int = 0) -> bytes:
    """Prometheus' answer to a range query over `series` GPUs (8 to a node) at `points` hourly points."""
    rng = random.Random(seed)

    def value() -> str:
        roll = rng.random()
        return "NaN" if roll < 0.01 else "+Inf" if roll < 0.011 else repr(round(rng.uniform(0, 100), 6))

    result = [
        {
            "metric": {
                "__name__": "gpu:DCGM_FI_DEV_GPU_TEMP:max1h",
                "Hostname": f"gpu-node-{i // 8:05d}",
                "UUID": f"GPU-{i:08x}-6a1e-4c3b-9f0d-{rng.getrandbits(48):012x}",
                "gpu": str(i % 8),
            },
            "values": [[T0 + 3600 * k, value()] for k in range(points)],
        }
        for i in range(series)
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def plain(body: bytes) -> range_answers.Samples:
    return range_answers.samples(json.loads(body)["data"]["result"])


def _best(run: Callable[[], Any], repeat: int) -> float:
    times = []
    with range_answers.collector_paused():
        for _ in range(repeat):
            started = time.perf_counter()
            out = run()
            times.append(time.perf_counter() - started)
            del out
    return min(times)


def _peak_mb(run: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        out = run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del out
    return peak / 1e6


def _slot_s(answer: range_answers.Samples, points: int, repeat: int) -> float:
    """Slotting an answer with the cycle's cache warm. Slotting takes a record's name out of a dict of
    labels, so each run has its own copy of them, made before it is timed."""
    gpus: dict[tuple[str, int, str], int] = {}
    cache: dict[range_answers.LabelKey, int] = {}
    copies = [
        replace(answer, labels=[dict(x) if isinstance(x, dict) else x for x in answer.labels])
        for _ in range(repeat + 1)
    ]
    times = []
    with range_answers.collector_paused():
        for copy in copies:
            started = time.perf_counter()
            range_answers.parse(copy, gpus, grid_start=T0, step=3600.0, n_times=points, identities=cache)
            times.append(time.perf_counter() - started)
    return min(times[1:])  # the first run fills the cache


def measure(series: int, points: int, repeat: int) -> dict[str, Any]:
    body = answer(series, points)
    got, want = range_json.decode(body), plain(body)
    if got.counts.tolist() != want.counts.tolist() or got.values.tobytes() != want.values.tobytes():
        raise AssertionError("range_json.decode and the plain way disagree")
    out: dict[str, Any] = {"series": series, "points": points, "body_mb": len(body) / 1e6}
    for name, run in (("plain", lambda: plain(body)), ("decode", lambda: range_json.decode(body))):
        out[f"{name}_s"] = _best(run, repeat)
        out[f"{name}_peak_mb"] = _peak_mb(run)
    out["plain_slot_s"] = _slot_s(want, points, repeat)
    out["slot_s"] = _slot_s(got, points, repeat)
    out["time_ratio"] = out["decode_s"] / out["plain_s"]
    out["peak_ratio"] = out["decode_peak_mb"] / out["plain_peak_mb"]
    return out


def main(argv: Sequence[str] | None = None) -> Table:
    parser = argparse.ArgumentParser(prog="bench_range_decode", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--series", type=int, default=SERIES)
    parser.add_argument("--points", type=int, action="append", help="points per series (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(list(argv or []))
    load = os.getloadavg()
    rows = [measure(args.series, points, args.repeat) for points in args.points or POINTS]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"answers": rows, "machine": machine.describe(load)}, indent=2))
    table = Table(title=f"A range answer's body into columns, {args.series:,} series (same run)")
    for column in (
        "points",
        "body",
        "plain",
        "decode",
        "decode / plain",
        "peak plain",
        "peak decode",
        "ratio",
    ):
        table.add_column(column, justify="right")
    table.add_column("slot plain / decoded", justify="right")
    for row in rows:
        table.add_row(
            str(row["points"]),
            f"{row['body_mb']:.1f} MB",
            f"{row['plain_s']:.3f} s",
            f"{row['decode_s']:.3f} s",
            f"{row['time_ratio']:.2f}x",
            f"{row['plain_peak_mb']:.0f} MB",
            f"{row['decode_peak_mb']:.0f} MB",
            f"{row['peak_ratio']:.2f}x",
            f"{row['plain_slot_s']:.3f} / {row['slot_s']:.3f} s",
        )
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
