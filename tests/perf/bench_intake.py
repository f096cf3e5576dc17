"""Intake throughput and latency: `sickbay serve` with its durable inbox vs a do-nothing aiohttp server.

Both servers are real processes on loopback, measured one after the other in the same run with the same
load: 64 keep-alive connections, each sending Alertmanager webhook requests of 10 alerts back to back
(every alert has a fresh fingerprint, so every one is committed, none is a cheap duplicate). The load
generator runs in its own process and speaks HTTP/1.1 directly on asyncio streams with pre-rendered
requests, so it stays cheaper than either server; its CPU use is reported to show it was not the limit.

Targets (from the issue): >= 5,000 alerts/s and sickbay / do-nothing >= 0.5 on 2 cores. Results are also
written to out/bench/intake.json.

    python -m tests.perf intake                    # via the runner, like `make bench`
    python -m tests.perf.bench_intake --seconds 5  # alone, with options
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from app.demo.processes import free_port
from tests.perf import machine

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "intake.json"
TOKEN = "bench-token"  # a throwaway credential for a loopback benchmark
TARGET_ALERTS_PER_S = 5000.0
TARGET_RATIO = 0.5
ALERTS_PER_REQUEST = 10
FLEET_NODES = 5000  # alerts spread over this many nodes x 8 GPUs, as a real fleet's would be
XIDS = (79, 13, 64, 94, 31, 119, 62, 8, 43, 95)
CLASSES = {
    79: "reboot-node",
    13: "restart-workload",
    64: "reset-gpu",
    94: "restart-workload",
    31: "restart-workload",
    119: "reset-gpu",
    62: "reset-gpu",
    8: "restart-workload",
    43: "ignore",
    95: "reset-gpu",
}


# ---------------------------------------------------------------------------------------------- payload


def request_template(host: str, port: int, *, starts_at: str) -> tuple[bytes, bytes, int]:
    """An HTTP request whose body has two fixed-width slots per alert: its node number, its request number.

    Returns (head, body template, body length); every rendered body has the same length.
    """
    alerts = []
    for k in range(ALERTS_PER_REQUEST):
        xid = XIDS[k % len(XIDS)]
        alerts.append(
            {
                "status": "firing",
                "labels": {
                    "alertname": "GpuXidError",
                    "node": "gpu-node-NODE",
                    "gpu": str(k % 8),
                    "UUID": f"GPU-6b2c8e1a-4f0d-4b6e-9d1c-2a9f1e3c5d{k:02d}",
                    "xid": str(xid),
                    "sickbay_class": CLASSES[xid],
                    "severity": "critical",
                    "job": "dcgm-exporter",
                    "namespace": "gpu-operator",
                    "instance": "10.0.0.1:9400",
                },
                "annotations": {"summary": f"XID {xid} on a GPU", "runbook_url": "https://runbooks/xid"},
                "startsAt": starts_at,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
                "fingerprint": f"REQ-{k:02d}",
            }
        )
    payload = {
        "version": "4",
        "groupKey": '{}/{sickbay_class=~".+"}:{alertname="GpuXidError"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "sickbay",
        "groupLabels": {"alertname": "GpuXidError"},
        "commonLabels": {"alertname": "GpuXidError", "severity": "critical"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }
    text = json.dumps(payload, separators=(",", ":"))
    assert "%" not in text
    # Fixed-width slots: fingerprints carry the request number, nodes a fleet node number.
    text = text.replace('"REQ-', '"b%012x-')
    text = text.replace("gpu-node-NODE", "gpu-node-%05d")
    body_template = text.encode()
    length = len(render_body(body_template, 0))
    head = (
        f"POST /api/v1/alerts HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    return head, body_template, length


def render_body(template: bytes, number: int) -> bytes:
    values: list[int] = []
    for k in range(ALERTS_PER_REQUEST):
        node = (number * ALERTS_PER_REQUEST + k) % FLEET_NODES
        values += [node, number]  # the order of the slots in the text
    return template % tuple(values)


# ------------------------------------------------------------------------------------------- load side


@dataclass
class LoadResult:
    requests: int = 0  # completed inside the measured window
    errors: int = 0
    total_requests: int = 0  # all completed, warm-up included
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    first_error: str = ""


async def _connection(
    host: str,
    port: int,
    head: bytes,
    template: bytes,
    numbers: Iterator[int],
    *,
    measure_from: float,
    measure_to: float,
    result: LoadResult,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            started = time.perf_counter()
            if started >= measure_to:
                return
            writer.write(head + render_body(template, next(numbers)))
            response_head = await reader.readuntil(b"\r\n\r\n")
            status = int(response_head[9:12])
            length = -1
            for line in response_head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length < 0:
                raise RuntimeError(f"response without Content-Length: {response_head!r}")
            body = await reader.readexactly(length)
            finished = time.perf_counter()
            result.total_requests += 1
            if status != 200:
                result.errors += 1
                result.first_error = result.first_error or f"HTTP {status}: {body[:200]!r}"
            if started >= measure_from and finished <= measure_to:
                result.requests += 1
                result.latencies_ms.append((finished - started) * 1000.0)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _load(
    host: str, port: int, *, connections: int, warmup: float, seconds: float, first: int
) -> LoadResult:
    head, template, _ = request_template(
        host, port, starts_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    result = LoadResult(seconds=seconds)
    numbers = iter(range(first, first + 10**9))
    now = time.perf_counter()
    measure_from, measure_to = now + warmup, now + warmup + seconds
    tasks = [
        _connection(
            host,
            port,
            head,
            template,
            numbers,
            measure_from=measure_from,
            measure_to=measure_to,
            result=result,
        )
        for _ in range(connections)
    ]
    cpu_before = time.process_time()
    await asyncio.gather(*tasks)
    result.client_cpu_s = time.process_time() - cpu_before
    return result


def _load_child(
    conn: Any, host: str, port: int, connections: int, warmup: float, seconds: float, first: int
) -> None:
    try:
        result = asyncio.run(
            _load(host, port, connections=connections, warmup=warmup, seconds=seconds, first=first)
        )
        conn.send(("ok", asdict(result)))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_load(
    host: str, port: int, *, connections: int, warmup: float, seconds: float, first: int
) -> LoadResult:
    """Drive the load from a separate process, so the servers and the generator do not share a GIL."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_load_child, args=(child, host, port, connections, warmup, seconds, first), daemon=True
    )
    proc.start()
    child.close()
    try:
        if not parent.poll(warmup + seconds + 120):
            raise TimeoutError("load generator did not report back")
        kind, data = parent.recv()
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if kind != "ok":
        raise RuntimeError(f"load generator failed: {data}")
    return LoadResult(**data)


# ----------------------------------------------------------------------------------------- server side


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    ready_path: str

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.ready_path}", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@contextlib.contextmanager
def serve(
    name: str, command: list[str], *, tmp: Path, env: dict[str, str], ready_path: str
) -> Iterator[Server]:
    """Start a server process on a free port, wait until it is ready, and always stop it."""
    for attempt in range(3):  # a port picked free can be taken before the child binds it: retry
        port = free_port()
        log = tmp / f"{name}-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*command, "--port", str(port)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        server = Server(name=name, proc=proc, port=port, log=log, ready_path=ready_path)
        try:
            server.wait_ready()
        except RuntimeError:
            server.stop()
            if "address already in use" in server.log_tail().lower() and attempt < 2:
                continue
            raise
        except BaseException:
            server.stop()
            raise
        try:
            yield server
        finally:
            server.stop()
        return


def sickbay_command(db: Path) -> list[str]:
    script = Path(sys.executable).with_name("sickbay")
    base = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
    )
    return [*base, "serve", "--host", "127.0.0.1", "--db", str(db)]


def null_server_main(port: int) -> None:
    """The do-nothing baseline: aiohttp reads the body and answers 200 with a small JSON document."""

    async def alerts(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"accepted": ALERTS_PER_REQUEST, "duplicates": 0})

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    app = web.Application(client_max_size=2 * 1024 * 1024)
    app.router.add_post("/api/v1/alerts", alerts)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# ------------------------------------------------------------------------------------------ the runs


@dataclass
class Figures:
    target: str
    alerts_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    first_error: str
    server_cpu_pct: float
    client_cpu_pct: float
    extra: dict[str, Any] = field(default_factory=dict)


def figures(target: str, load: LoadResult, *, server_cpu_s: float, wall_s: float) -> Figures:
    lat = sorted(load.latencies_ms)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    return Figures(
        target=target,
        alerts_per_s=load.requests * ALERTS_PER_REQUEST / load.seconds,
        requests_per_s=load.requests / load.seconds,
        p50_ms=statistics.median(lat) if lat else float("nan"),
        p99_ms=pct(0.99),
        max_ms=lat[-1] if lat else float("nan"),
        errors=load.errors,
        first_error=load.first_error,
        server_cpu_pct=100.0 * server_cpu_s / wall_s,
        client_cpu_pct=100.0 * load.client_cpu_s / wall_s,
    )


def measure(server: Server, args: argparse.Namespace, *, first: int) -> tuple[LoadResult, Figures]:
    cpu_before, wall_before = cpu_seconds(server.proc.pid), time.perf_counter()
    load = run_load(
        "127.0.0.1",
        server.port,
        connections=args.connections,
        warmup=args.warmup,
        seconds=args.seconds,
        first=first,
    )
    wall = time.perf_counter() - wall_before
    cpu = cpu_seconds(server.proc.pid) - cpu_before
    # CPU shares are over the whole load-process lifetime (spawn + warm-up + measurement), an upper
    # bound on wall time, so they read a little low; the client's is over its run only.
    fig = figures(server.name, load, server_cpu_s=cpu, wall_s=wall)
    fig.client_cpu_pct = 100.0 * load.client_cpu_s / (args.warmup + args.seconds)
    return load, fig


def sqlite_counts(db: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        rows = dict(conn.execute("SELECT state, count(*) FROM inbox GROUP BY state").fetchall())
        (faults,) = conn.execute("SELECT count(*) FROM faults").fetchone()
    return {
        "inbox_rows": sum(rows.values()),
        "done": rows.get("done", 0),
        "pending": rows.get("pending", 0),
        "faults": faults,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_intake", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per server")
    parser.add_argument("--warmup", type=float, default=1.5, help="load before the measured window")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--log-level", default="INFO", help="sickbay's log level (INFO is the shipped default)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=15.0,
        help="how long to watch the pipeline drain the backlog after the load",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--null-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> Group:
    args = parse_args(argv or [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
    env |= {"SICKBAY_AUTH__TOKEN": TOKEN, "SICKBAY_LOG_LEVEL": args.log_level}
    with tempfile.TemporaryDirectory(prefix="sickbay-bench-") as tmpdir:
        tmp = Path(tmpdir)
        null_cmd = [sys.executable, "-m", "tests.perf.bench_intake", "--null-server"]
        with serve("do-nothing", null_cmd, tmp=tmp, env=env, ready_path="/readyz") as null:
            _, null_fig = measure(null, args, first=0)
        db = tmp / "bench.db"
        with serve("sickbay", sickbay_command(db), tmp=tmp, env=env, ready_path="/readyz") as sb:
            load, sb_fig = measure(sb, args, first=10**8)
            at_end = sqlite_counts(db)
            drain_started = time.perf_counter()
            while time.perf_counter() - drain_started < args.drain_timeout:
                counts = sqlite_counts(db)
                if counts["pending"] == 0 and counts["faults"] == counts["inbox_rows"]:
                    break
                time.sleep(0.25)
            drain_s = time.perf_counter() - drain_started
            drained = sqlite_counts(db)
        expected_rows = load.total_requests * ALERTS_PER_REQUEST
        sb_fig.extra = {
            "inbox_rows_at_end_of_load": at_end["inbox_rows"],
            "expected_rows": expected_rows,
            "processed_at_end_of_load": at_end["done"],
            "pending_at_end_of_load": at_end["pending"],
            "drain_seconds": round(drain_s, 2),
            "drained": drained["pending"] == 0,
            "processed_after_drain": drained["done"],
            "pipeline_rows_per_s_after_load": round((drained["done"] - at_end["done"]) / drain_s, 1),
            "log_level": args.log_level,
        }
    ratio = sb_fig.alerts_per_s / null_fig.alerts_per_s if null_fig.alerts_per_s else 0.0
    report = {
        "benchmark": "intake",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "config": {
            "connections": args.connections,
            "alerts_per_request": ALERTS_PER_REQUEST,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "sickbay_log_level": args.log_level,
        },
        "results": {"do_nothing": asdict(null_fig), "sickbay": asdict(sb_fig)},
        "ratio": round(ratio, 3),
        "targets": {"alerts_per_s": TARGET_ALERTS_PER_S, "ratio": TARGET_RATIO},
        "met": {
            "alerts_per_s": sb_fig.alerts_per_s >= TARGET_ALERTS_PER_S,
            "ratio": ratio >= TARGET_RATIO,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return render(report, null_fig, sb_fig, args.out)


def render(report: dict[str, Any], null_fig: Figures, sb_fig: Figures, out: Path) -> Group:
    cfg = report["config"]
    table = Table(
        title=(
            f"Intake: {cfg['connections']} connections x {cfg['alerts_per_request']} alerts/request, "
            f"{cfg['seconds']:.0f}s each, {report['machine']['cpus']} CPUs"
        )
    )
    for column in (
        "server",
        "alerts/s",
        "req/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors",
        "server CPU",
        "load CPU",
    ):
        table.add_column(column, justify="left" if column == "server" else "right")
    for fig in (null_fig, sb_fig):
        table.add_row(
            fig.target,
            f"{fig.alerts_per_s:,.0f}",
            f"{fig.requests_per_s:,.0f}",
            f"{fig.p50_ms:.1f}",
            f"{fig.p99_ms:.1f}",
            f"{fig.max_ms:.1f}",
            str(fig.errors),
            f"{fig.server_cpu_pct:.0f}%",
            f"{fig.client_cpu_pct:.0f}%",
        )
    met, targets = report["met"], report["targets"]

    def verdict(ok: bool) -> str:
        return "[green]met[/]" if ok else "[red]missed[/]"

    extra = sb_fig.extra
    lines = [
        Text.from_markup(
            f"ratio sickbay / do-nothing: [bold]{report['ratio']:.2f}[/] (target >= {targets['ratio']}: "
            f"{verdict(met['ratio'])}); sickbay {sb_fig.alerts_per_s:,.0f} alerts/s (target >= "
            f"{targets['alerts_per_s']:,.0f}: {verdict(met['alerts_per_s'])})"
        ),
        Text(
            f"inbox at end of load: {extra['inbox_rows_at_end_of_load']:,} rows (expected "
            f"{extra['expected_rows']:,}), {extra['processed_at_end_of_load']:,} processed; pipeline "
            f"{'drained' if extra['drained'] else 'NOT drained'} {extra['drain_seconds']:.1f}s later "
            f"({extra['processed_after_drain']:,} processed, "
            f"{extra['pipeline_rows_per_s_after_load']:,.0f} rows/s); sickbay log level {extra['log_level']}"
        ),
    ]
    for fig in (null_fig, sb_fig):
        if fig.errors:
            lines.append(Text(f"{fig.target}: {fig.errors} errors, first: {fig.first_error}", style="red"))
    lines.append(Text(f"written to {out}", style="dim"))
    return Group(table, *lines)


if __name__ == "__main__":
    _args = parse_args(sys.argv[1:])
    if _args.null_server:
        null_server_main(_args.port)
    else:
        (Console() if sys.stdout.isatty() else Console(width=140)).print(main(sys.argv[1:]))
