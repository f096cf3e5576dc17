"""The journal's faults on a real SQLite file: replays journal once, and each reader (escalation history,
classification context, active alerts, the status page's entries) sees exactly the rows it promises."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    Outcome,
    OutcomeStatus,
    PastFault,
    Plan,
    PodRef,
    QuarantineParams,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)
from app.store import inbox, journal

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[journal.Journal]:
    db = await inbox.connect(tmp_path / "j.db")
    try:
        yield await journal.Journal.open(db)
    finally:
        await db.close()


def signal(
    fp: str,
    *,
    ago: timedelta = timedelta(0),
    node: str = "n1",
    gpu: int | None = 0,
    status: SignalStatus = SignalStatus.FIRING,
    source: SignalSource = SignalSource.ALERTMANAGER,
    name: str = "GpuXid",
) -> Signal:
    at = NOW - ago
    return Signal(
        source=source,
        fingerprint=fp,
        status=status,
        name=name,
        starts_at=at,
        received_at=at,
        node=node,
        gpu=gpu,
        xid=13,
    )


async def put(
    book: journal.Journal,
    seq: int | None,
    s: Signal,
    cls: FaultClass = FaultClass.RESTART_WORKLOAD,
    *,
    workload: str | None = "team/train",
) -> tuple[int, bool]:
    fault = Fault(fault_class=cls, signal=s, reason=f"why {s.fingerprint}", rule="xid")
    return await book.record(
        inbox_seq=seq, fault=fault, plan=Plan.record_only(fault, NOW, "noted"), workload=workload
    )


async def test_a_replayed_inbox_row_is_journaled_once_under_its_first_id(book: journal.Journal) -> None:
    first = await put(book, 1, signal("a"))
    second = await put(book, 2, signal("b"))
    assert first == (1, True)
    assert second == (2, True)
    assert await put(book, 1, signal("a")) == (1, False)
    assert await book.count() == 2


async def test_history_is_this_nodes_firing_faults_since_oldest_first(book: journal.Journal) -> None:
    await put(book, 1, signal("new", ago=timedelta(minutes=1), name="agent:xid"))
    await put(book, 2, signal("old", ago=timedelta(minutes=30)), FaultClass.TRANSIENT, workload=None)
    await put(book, 3, signal("resolved", status=SignalStatus.RESOLVED))
    await put(book, 4, signal("elsewhere", node="n2"))
    await put(book, 5, signal("too-old", ago=timedelta(hours=2)))
    edge = NOW - timedelta(hours=1)
    await put(book, 6, signal("edge", ago=timedelta(hours=1), gpu=None))
    got = await book.history(node="n1", since=edge)
    assert got == [
        PastFault(edge, FaultClass.RESTART_WORKLOAD, None, 13, "team/train", "edge", "GpuXid"),
        PastFault(NOW - timedelta(minutes=30), FaultClass.TRANSIENT, 0, 13, None, "old", "GpuXid"),
        PastFault(
            NOW - timedelta(minutes=1), FaultClass.RESTART_WORKLOAD, 0, 13, "team/train", "new", "agent:xid"
        ),
    ]


async def test_active_alerts_are_those_whose_latest_notification_fires(book: journal.Journal) -> None:
    await put(book, 1, signal("gone", ago=timedelta(minutes=5)), FaultClass.RESET_GPU)
    await put(book, 2, signal("gone", status=SignalStatus.RESOLVED), FaultClass.RESET_GPU)
    await put(
        book, 3, signal("back", status=SignalStatus.RESOLVED, ago=timedelta(minutes=5)), FaultClass.REPLACE
    )
    await put(book, 4, signal("back"), FaultClass.REPLACE)
    await put(book, 5, signal("agent-ev", source=SignalSource.AGENT), FaultClass.REBOOT_NODE)
    await put(book, 6, signal("other-node", node="n2"), FaultClass.REBOOT_NODE)
    assert await book.active_alerts(node="n1") == [("back", "replace")]
    firing = await book.firing_alerts()
    assert sorted(fp for fp, _ in firing) == ["back", "other-node"]
    assert dict(firing)["back"]["fingerprint"] == "back"


async def test_latest_firing_reads_the_newest_row_of_the_alert(book: journal.Journal) -> None:
    assert await book.latest_firing("x") is None
    await put(book, 1, signal("x", ago=timedelta(minutes=3)))
    assert await book.latest_firing("x") == NOW - timedelta(minutes=3)
    await put(book, 2, signal("x", status=SignalStatus.RESOLVED))
    assert await book.latest_firing("x") is None


async def test_recent_signals_are_this_gpus_since_oldest_first(book: journal.Journal) -> None:
    await put(book, 1, signal("b", ago=timedelta(minutes=1)))
    await put(book, 2, signal("a", ago=timedelta(minutes=9)))
    await put(book, 3, signal("other-gpu", gpu=1))
    await put(book, 4, signal("no-gpu", gpu=None))
    await put(book, 5, signal("old", ago=timedelta(minutes=11)))
    got = await book.recent_signals(node="n1", gpu=0, since=NOW - timedelta(minutes=10))
    assert [s.fingerprint for s in got] == ["a", "b"]
    assert got[0] == signal("a", ago=timedelta(minutes=9))
    assert [
        s.fingerprint for s in await book.recent_signals(node="n1", gpu=None, since=NOW - timedelta(hours=1))
    ] == ["no-gpu"]


async def test_entries_are_newest_first_with_every_column(book: journal.Journal) -> None:
    for seq in range(1, 4):
        await put(book, seq, signal(f"f{seq}", node="n1" if seq != 2 else "n2"), FaultClass.RESET_GPU)
    newest = await book.entries(limit=2)
    assert [e.id for e in newest] == [3, 2]
    e = newest[0]
    assert (e.at, e.node, e.gpu, e.xid, e.fault_class, e.rule, e.status, e.source, e.reason) == (
        NOW.isoformat(),
        "n1",
        0,
        13,
        "reset-gpu",
        "xid",
        "firing",
        "alertmanager",
        "why f3",
    )
    assert e.plan["summary"] == "noted"
    assert [e.id for e in await book.entries(node="n1")] == [3, 1]
    assert [e.id for e in await book.entries()] == [3, 2, 1]


async def test_key_values_are_kept_and_overwritten(book: journal.Journal) -> None:
    assert await book.get("breaker") is None
    await book.put("breaker", "open")
    await book.put("breaker", "closed")
    assert await book.get("breaker") == "closed"


def outcome(
    kind: ActionKind,
    status: OutcomeStatus,
    *,
    node: str = "n1",
    ago: timedelta = timedelta(0),
    pod: PodRef | None = None,
) -> Outcome:
    params = QuarantineParams(FaultClass.RESET_GPU) if kind is ActionKind.QUARANTINE else None
    action = Action(kind=kind, track=Track.HARDWARE, reason="r", node=node, pod=pod, params=params)
    return Outcome(
        action=action, status=status, detail=f"{kind.value} {status.value}", at=NOW - ago, attempts=2
    )


async def test_outcomes_come_back_newest_first_with_every_column(book: journal.Journal) -> None:
    await book.record_outcomes(7, [])
    await book.record_outcomes(
        7,
        [
            outcome(ActionKind.QUARANTINE, OutcomeStatus.APPLIED),
            outcome(ActionKind.RECORD, OutcomeStatus.RECORDED, node="n2", pod=PodRef("ml", "p")),
        ],
    )
    rows = await book.outcomes()
    assert rows[0] == {
        "fault_id": 7,
        "at": NOW.isoformat(),
        "kind": "record",
        "track": "hardware",
        "node": "n2",
        "pod": str(PodRef("ml", "p")),
        "status": "recorded",
        "detail": "record recorded",
        "attempts": 2,
    }
    assert rows[1]["pod"] is None
    assert [r["node"] for r in await book.outcomes(node="n1")] == ["n1"]
    assert len(await book.outcomes(limit=1)) == 1


async def test_quarantine_times_count_applied_quarantines_of_the_node_since(book: journal.Journal) -> None:
    week = NOW - timedelta(days=7)
    await book.record_outcomes(
        1,
        [
            outcome(ActionKind.QUARANTINE, OutcomeStatus.APPLIED, ago=timedelta(days=1)),
            outcome(ActionKind.QUARANTINE, OutcomeStatus.APPLIED, ago=timedelta(days=7)),  # at the edge
            outcome(ActionKind.QUARANTINE, OutcomeStatus.APPLIED, ago=timedelta(days=8)),
            outcome(ActionKind.QUARANTINE, OutcomeStatus.DRY_RUN),
            outcome(ActionKind.QUARANTINE, OutcomeStatus.APPLIED, node="n2"),
            outcome(ActionKind.RECORD, OutcomeStatus.APPLIED),
        ],
    )
    assert sorted(await book.quarantine_times(node="n1", since=week)) == [week, NOW - timedelta(days=1)]


async def test_rechecks_are_due_oldest_first_and_done_only_at_their_check_number(
    book: journal.Journal,
) -> None:
    a, b, c = signal("a"), signal("b", ago=timedelta(minutes=1)), signal("c")
    await book.schedule_recheck(a, due=NOW + timedelta(minutes=2), check=1)
    await book.schedule_recheck(b, due=NOW - timedelta(minutes=1), check=1)
    await book.schedule_recheck(c, due=NOW + timedelta(hours=1), check=1)
    await book.schedule_recheck(a, due=NOW, check=2)  # rescheduled: replaces the first
    due = await book.due_rechecks(NOW)
    assert due == [(b, 1), (a, 2)]
    assert await book.due_rechecks(NOW, limit=1) == [(b, 1)]
    await book.done_rechecks([])
    await book.done_rechecks([(b, 1), (a, 1)])  # `a` moved on to check 2: it stays
    assert await book.due_rechecks(NOW + timedelta(hours=2)) == [(a, 2), (c, 1)]
