"""A year of operation (issue 15): N alerts through the store over a simulated year, with and without retention.

The store is opened as `sickbay serve` opens it (`Inbox.open`, the journal on its own connection, one
write lock, the `Pruner`). Time is compressed: alert i is received at `start + i * year / N`, on one of
10,000 nodes. Each alert is appended to the inbox as the intake does, marked done as the pipeline does,
and journaled as a faults row (the pipeline's columns, written in bulk: the bench measures the store's
growth and its reads, not classification). With retention on, passes run as the
leader's job would; compressed time allows one pass per simulated day (a pass costs ~30 ms here, the
default interval of an hour would be 8,760 passes a year), with the default cutoffs and no node held.

N counts notifications: half fire, half resolve the alert before them. At ten checkpoints it measures, on the grown store (medians of `SAMPLES` calls):
- intake: one Alertmanager group of 10 new alerts appended and committed (`Inbox.append`);
- decision: the per-signal reads of the planning step: the node's escalation window
  (`FaultLog.history`), its weekly quarantines (`OutcomeLog.quarantine_times`) and the alert's latest
  firing (`FaultLog.latest_firing`);
- status page: its journal reads (`FaultLog.entries(limit=100)`, `OutcomeLog.outcomes(limit=200)`);
- the file's size (database + WAL).
The baseline is the first checkpoint of the same run: flat means each figure stays near 1x of it.

    python -m tests.perf soak [-- --alerts 1000000 --alerts 5000000 | --quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from app.config.retention import RetentionSettings
from app.decide import retention
from app.store import inbox as inbox_mod
from app.store.inbox import Inbox, Record, RowState
from app.store.journal import Journal
from app.store.retention import Pruner
from tests.perf import machine

YEAR = timedelta(days=365)
PASS_EVERY = timedelta(days=1)
NODES = 10_000
CHECKPOINTS = 10
SAMPLES = 30
FILL_BATCH = 1000
SIZES = (1_000_000,)
QUICK_SIZES = (20_000,)
FAULT_SQL = (
    "INSERT INTO faults (inbox_seq, at, node, gpu, xid, class, rule, status, source, fingerprint, reason, "
    "signal, plan, workload) VALUES (?, ?, ?, ?, 43, 'ignore', 'xid-43', ?, 'alertmanager', ?, "
    "'informational', ?, '{\"actions\": []}', NULL)"
)


@dataclass(frozen=True)
class Checkpoint:
    alerts: int
    simulated_day: float
    db_mib: float
    intake_ms: float
    decision_ms: float
    status_ms: float
    inbox_rows: int
    fault_rows: int


def _record(i: int, at: datetime, *, starts: datetime | None = None) -> Record:
    """Notification i: even ones fire, each odd one resolves the alert before it (as Alertmanager sends
    `resolved` once an alert stops; a firing alert never resolved is kept by retention, rightly)."""
    alert = i // 2
    status = "resolved" if i % 2 else "firing"
    node = f"gpu-{alert % NODES:05d}"
    payload = (
        f'{{"labels": {{"alertname": "GpuXid", "Hostname": "{node}", "gpu": "{i % 8}", "xid": "43"}}, '
        f'"startsAt": "{(starts or at).isoformat()}", "status": "{status}"}}'
    )
    return Record(
        source="alertmanager",
        fingerprint=f"fp{alert:010d}",
        starts_at=(starts or at).isoformat(),  # a resolve carries its alert's startsAt (the dedup key)
        status=status,
        node=node,
        payload=payload,
        received_at=at.isoformat(),
    )


async def _median_ms(call: Callable[[], Awaitable[object]], samples: int) -> float:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _size_mib(path: Path) -> float:
    wal = path.with_name(path.name + "-wal")
    return (path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / 2**20


async def _count(db: aiosqlite.Connection, table: str) -> int:
    async with db.execute(f"SELECT count(*) FROM {table}") as cursor:
        row = await cursor.fetchone()
    assert row is not None  # count(*) always answers one row
    return int(row[0])


async def soak(alerts: int, *, prune: bool, folder: Path, samples: int = SAMPLES) -> list[Checkpoint]:
    path = folder / f"soak-{alerts}-{'retention' if prune else 'none'}.db"
    lock = asyncio.Lock()
    inbox = await Inbox.open(path, write_lock=lock)
    journal_db = await inbox_mod.connect(path, durable=False)
    journal = await Journal.open(journal_db, write_lock=lock)
    settings = RetentionSettings()
    pruner = await Pruner.open(
        path, write_lock=lock, batch_rows=settings.batch_rows, vacuum_pages=settings.vacuum_pages
    )
    start = datetime.now(UTC) - YEAR
    step = YEAR / alerts
    next_pass = start + PASS_EVERY
    every = max(FILL_BATCH, alerts // CHECKPOINTS)
    out: list[Checkpoint] = []
    probe = 0
    try:
        done = 0
        while done < alerts:
            count = min(FILL_BATCH, alerts - done)
            records = [
                _record(n, start + step * n, starts=start + step * (n - n % 2))
                for n in range(done, done + count)
            ]
            await inbox.append(records)
            rows = await inbox.pending(after_seq=0, limit=count + 10)
            await inbox.mark([row.seq for row in rows], RowState.DONE)
            async with lock:
                await journal_db.executemany(
                    FAULT_SQL,
                    [
                        (row.seq, rec.starts_at, rec.node, (done + k) % 8, rec.status, rec.fingerprint, "{}")
                        for k, (row, rec) in enumerate(zip(rows, records, strict=False))
                    ],
                )
                await journal_db.commit()
            done += count
            now = start + step * done
            while prune and now >= next_pass:
                plan = retention.pruning(settings, now=next_pass, held=frozenset())
                await pruner.prune({t.value: c for t, c in plan.cutoffs.items()}, held=plan.held)
                next_pass += PASS_EVERY
            if done % every == 0 or done == alerts:
                node = f"gpu-{done % NODES:05d}"

                async def intake(at: datetime = now) -> None:
                    nonlocal probe
                    probe += 1
                    group = [_record(alerts + probe * 10 + k, at) for k in range(10)]
                    await inbox.append(group)

                async def decision(node: str = node, at: datetime = now, last: int = done - 1) -> None:
                    await journal.history(node=node, since=at - timedelta(hours=24))
                    await journal.quarantine_times(node=node, since=at - timedelta(days=7))
                    await journal.latest_firing(f"fp{last // 2:010d}")

                async def status() -> None:
                    await journal.entries(limit=100)
                    await journal.outcomes(limit=200)

                out.append(
                    Checkpoint(
                        alerts=done,
                        simulated_day=(now - start) / timedelta(days=1),
                        db_mib=_size_mib(path),
                        intake_ms=await _median_ms(intake, samples),
                        decision_ms=await _median_ms(decision, samples),
                        status_ms=await _median_ms(status, samples),
                        inbox_rows=await _count(journal_db, "inbox"),
                        fault_rows=await _count(journal_db, "faults"),
                    )
                )
                pending = await inbox.pending(after_seq=0, limit=10_000)
                await inbox.mark([row.seq for row in pending], RowState.DONE)
    finally:
        await pruner.close()
        await inbox.close()
        await journal_db.close()
    return out


def _table(alerts: int, prune: bool, points: Sequence[Checkpoint]) -> Table:
    base = points[0]
    table = Table(title=f"{alerts:,} alerts over a simulated year, retention {'on' if prune else 'off'}")
    for column in (
        "alerts",
        "day",
        "DB MiB",
        "inbox rows",
        "fault rows",
        "intake ms",
        "decision ms",
        "status ms",
    ):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(
            f"{p.alerts:,}",
            f"{p.simulated_day:.0f}",
            f"{p.db_mib:.1f}",
            f"{p.inbox_rows:,}",
            f"{p.fault_rows:,}",
            f"{p.intake_ms:.2f} ({p.intake_ms / base.intake_ms:.1f}x)",
            f"{p.decision_ms:.2f} ({p.decision_ms / base.decision_ms:.1f}x)",
            f"{p.status_ms:.2f} ({p.status_ms / base.status_ms:.1f}x)",
        )
    return table


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.bench_soak")
    parser.add_argument("--alerts", type=int, action="append", help="alerts per run (repeatable; default 1M)")
    parser.add_argument("--quick", action="store_true", help="20k alerts: a smoke run")
    parser.add_argument("--samples", type=int, default=SAMPLES, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv))
    args.alerts = args.alerts or list(QUICK_SIZES if args.quick else SIZES)
    return args


def main(argv: Sequence[str] | None = None) -> Group:
    args = parse_args(argv or [])
    load = os.getloadavg()
    parts: list[Table | Text] = []
    with tempfile.TemporaryDirectory(prefix="sickbay-soak-") as folder:
        for alerts in args.alerts:
            for prune in (False, True):
                started = time.perf_counter()
                points = asyncio.run(soak(alerts, prune=prune, folder=Path(folder), samples=args.samples))
                parts.append(_table(alerts, prune, points))
                parts.append(Text(f"took {time.perf_counter() - started:.0f}s"))
    parts.append(Text(f"machine: {machine.describe(load)}"))
    return Group(*parts)


if __name__ == "__main__":
    Console(width=140).print(main(sys.argv[1:]))
