"""The queries run per signal, by the status page and by retention use an index (`EXPLAIN QUERY PLAN`),
so their cost follows one node's rows, not the table's: a year of alerts must not slow each decision."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.store import inbox, journal

QUERIES = {
    # escalation window and restart backoff (faults.history)
    "SELECT at FROM faults WHERE node = ? AND at >= ? AND status = 'firing' ORDER BY at, id": "faults_by_gpu",
    # classification context (faults.recent_signals)
    "SELECT signal FROM faults WHERE node = ? AND gpu IS ? AND at >= ? ORDER BY at, id": "faults_by_gpu",
    # a re-check's "still firing?" (faults.latest_firing)
    "SELECT at, status FROM faults WHERE fingerprint = ? ORDER BY id DESC LIMIT 1": "faults_by_fingerprint",
    # the node view and /api/v1/actions?node= (faults.entries, outcomes.outcomes)
    "SELECT id FROM faults WHERE node = ? ORDER BY id DESC LIMIT ?": "faults_by_gpu",
    "SELECT id FROM outcomes WHERE node = ? ORDER BY id DESC LIMIT ?": "outcomes_by_node",
    # the weekly attempt cap (outcomes.quarantine_times): one node's quarantines
    "SELECT at FROM outcomes WHERE node = ? AND kind = 'quarantine' AND status = 'applied' AND at >= ?": (
        "outcomes_quarantines"
    ),
    # the status page's unattributed alerts, and retention's scans by age
    "SELECT count(*) FROM inbox WHERE node IS NULL": "inbox_unattributed",
    "SELECT seq FROM inbox WHERE received_at < ? AND state != 'pending' LIMIT ?": "inbox_by_received",
    "SELECT id FROM faults WHERE at < ? LIMIT ?": "faults_by_time",
    "SELECT id FROM outcomes WHERE at < ? LIMIT ?": "outcomes_by_time",
}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = Path(tmp_path_factory.mktemp("plans")) / "p.db"
    conn = sqlite3.connect(path)
    conn.executescript(inbox.SCHEMA + inbox.INDEXES + journal.SCHEMA)
    return conn


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_the_query_uses_its_index(db: sqlite3.Connection, query: str) -> None:
    params = (None,) * query.count("?")
    plan = " | ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {query}", params))
    assert f"INDEX {QUERIES[query]}" in plan, plan
    assert "SCAN faults " not in f"{plan} ", plan
    assert "SCAN outcomes " not in f"{plan} ", plan
