"""Fatal first: how long an XID 79 waits behind 5,000 soft alerts, against the same alert with no backlog.

Sickbay runs in process with its shipped pipeline settings (16 nodes at once) against the simulated API
server in its own process (5 ms added to every request, as in `bench_remediation`). Through the real HTTP
intake:

- baseline: one XID 79 at a time on an idle service (5 of them, each on a fresh node), from the start of
  its webhook request to its fault being journaled;
- behind a backlog: 5,000 soft alerts (a transient throttling alert on 200 nodes, 100 per request), then
  at once an XID 79, and four more half a second apart while the backlog is still draining (the last on a
  node with soft rows pending), each measured the same way and also from its answer (its row committed,
  at the head of the fatal lane) to its fault journaled; for each, the soft rows still pending.

The same run again with lanes off (every row soft: the inbox FIFO, as it was) measures one XID 79 for
comparison. Reported: the latencies, their ratio to the baseline, and the soft rows processed per second (the issue
found an XID 79 still not journaled 58 s behind such a backlog, processed FIFO at ~25 rows/s). Written to
out/bench/lanes.json.

    python -m tests.perf lanes
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession
from rich.table import Table

from app.service.runtime import SERVICES
from tests.payloads import alert, webhook
from tests.perf import machine
from tests.perf.bench_remediation import LATENCY_MS, _world

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "lanes.json"
NODES = 210  # 200 carry the soft alerts; the fatal ones land on the rest (and one on a soft node)
SOFT_ALERTS = 5000
PER_REQUEST = 100
BASELINE_SAMPLES = 5
BEHIND = 5
SOFT_LABELS = {
    "alertname": "GpuClocksThrottled",
    "xid": "",
    "sickbay_class": "transient",
    "severity": "warning",
}


class Journaled:
    """Wraps the journal's `record`: when each watched fingerprint's fault was journaled."""

    def __init__(self, journal: Any) -> None:
        self._record = journal.record
        self.at: dict[str, float] = {}
        self.watched: set[str] = set()
        journal.record = self

    async def __call__(self, **kwargs: Any) -> Any:
        result = await self._record(**kwargs)
        fingerprint = kwargs["fault"].signal.fingerprint
        if fingerprint in self.watched and fingerprint not in self.at:
            self.at[fingerprint] = time.perf_counter()
        return result

    async def wait(self, fingerprint: str, *, timeout: float) -> float:
        deadline = time.perf_counter() + timeout
        while fingerprint not in self.at:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{fingerprint} not journaled within {timeout:.0f}s")
            await asyncio.sleep(0.001)
        return self.at[fingerprint]


async def _post(session: ClientSession, url: str, alerts: list[dict[str, Any]]) -> None:
    async with session.post(
        url, data=json.dumps(webhook(*alerts)), headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 200, await response.text()


async def _fatal(
    session: ClientSession, url: str, journaled: Journaled, *, name: str, node: str
) -> tuple[float, float]:
    """Post one XID 79: seconds from the request's start to its fault journaled, and from its answer (the
    row committed, at the head of the fatal lane) to its fault journaled."""
    journaled.watched.add(name)
    started = time.perf_counter()
    await _post(session, url, [alert(fingerprint=name, node=node, xid="79")])
    acknowledged = time.perf_counter()
    at = await journaled.wait(name, timeout=600)
    return at - started, at - acknowledged


async def _depth(server: Any) -> int:
    inbox = server.app[SERVICES].inbox
    return int(await inbox.depth())


async def measure(tmp: Path, *, lanes: bool = True) -> dict[str, Any]:
    """`lanes=False`: every row soft, the inbox FIFO as before lanes, for comparison (one fatal alert)."""
    sim, _, kube, server = await _world(tmp, NODES, pipeline={})  # the shipped pipeline settings
    url = str(server.make_url("/api/v1/alerts"))
    services = server.app[SERVICES]
    if not lanes:
        services.inbox._lane_of = None
    journaled = Journaled(services.journal)
    try:
        async with ClientSession() as session:
            baseline = [  # nodes gpu-0200.. are free of soft alerts
                (await _fatal(session, url, journaled, name=f"base{i}", node=f"gpu-{200 + i:04d}"))[0]
                for i in range(BASELINE_SAMPLES)
            ]
            soft = [
                alert(fingerprint=f"soft{i:05d}", node=f"gpu-{i % 200:04d}", gpu=str(i % 8), **SOFT_LABELS)
                for i in range(SOFT_ALERTS)
            ]
            processed_before = services.pipeline.processed
            started = time.perf_counter()
            await asyncio.gather(
                *(_post(session, url, soft[i : i + PER_REQUEST]) for i in range(0, SOFT_ALERTS, PER_REQUEST))
            )
            accepted_s = time.perf_counter() - started
            behind: list[dict[str, float]] = []
            for k in range(BEHIND if lanes else 1):
                # The last one strikes a node with soft alerts pending: it overtakes them.
                node = f"gpu-{200 + BASELINE_SAMPLES + k:04d}" if k < BEHIND - 1 else "gpu-0007"
                pending = await _depth(server)
                latency, from_commit = await _fatal(session, url, journaled, name=f"fatal{k}", node=node)
                behind.append(
                    {
                        "latency_s": latency,
                        "commit_to_journal_s": from_commit,
                        "pending_at_post": pending,
                        "pending_after": await _depth(server),
                    }
                )
                await asyncio.sleep(0.5)
            elapsed = time.perf_counter() - started
            soft_done = services.pipeline.processed - processed_before - len(behind)
    finally:
        await server.close()
        await kube.close()
        sim.terminate()
        await sim.wait()
    base = statistics.median(baseline)
    worst = max(b["latency_s"] for b in behind)
    return {
        "benchmark": "lanes",
        "machine": machine.describe(),
        "config": {"soft_alerts": SOFT_ALERTS, "api_latency_ms": LATENCY_MS, "node_concurrency": 16},
        "baseline_s": baseline,
        "baseline_median_s": base,
        "soft_accepted_s": accepted_s,
        "behind": behind,
        "worst_behind_s": worst,
        "ratio_worst_to_baseline": worst / base,
        "worst_commit_to_journal_s": max(b["commit_to_journal_s"] for b in behind),
        "soft_rows_per_s": soft_done / elapsed,
    }


def main() -> Table:
    with tempfile.TemporaryDirectory() as tmp:
        report = asyncio.run(measure(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        report["fifo"] = asyncio.run(measure(Path(tmp), lanes=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    table = Table(
        title=(
            f"Fatal first: an XID 79 behind {SOFT_ALERTS:,} soft alerts (simulated API +{LATENCY_MS:g} ms, "
            f"{report['machine']['cpus']} CPUs)"
        )
    )
    for column in (
        "measure",
        "post → journaled",
        "committed → journaled",
        "soft rows pending (post → journaled)",
    ):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row(
        f"no backlog (median of {BASELINE_SAMPLES})", f"{report['baseline_median_s'] * 1000:.0f} ms", "", "0"
    )
    for k, b in enumerate(report["behind"]):
        table.add_row(
            f"behind the backlog, #{k + 1}"
            + (" (its node has soft rows pending)" if k == BEHIND - 1 else ""),
            f"{b['latency_s'] * 1000:.0f} ms",
            f"{b['commit_to_journal_s'] * 1000:.0f} ms",
            f"{b['pending_at_post']:,} → {b['pending_after']:,}",
        )
    table.add_row(
        "  worst behind / no backlog",
        f"{report['ratio_worst_to_baseline']:.2f}x",
        f"worst {report['worst_commit_to_journal_s'] * 1000:.0f} ms (target < 1 s)",
        "",
    )
    fifo = report["fifo"]["behind"][0]
    table.add_row(
        "FIFO for comparison (lanes off), #1",
        f"{fifo['latency_s'] * 1000:,.0f} ms",
        f"{fifo['commit_to_journal_s'] * 1000:,.0f} ms",
        f"{fifo['pending_at_post']:,} → {fifo['pending_after']:,}",
    )
    table.add_row(
        f"{SOFT_ALERTS:,} soft alerts accepted in",
        f"{report['soft_accepted_s']:.2f} s",
        "",
        f"processed meanwhile: {report['soft_rows_per_s']:.0f} rows/s",
    )
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
