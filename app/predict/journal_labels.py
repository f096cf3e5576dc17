"""The journal's hardware faults as labels for retraining, read straight from the service's SQLite file.

Read-only (WAL lets it while the service writes) and the only journal I/O of the predictor, kept at this
edge rather than through `app.store` (which `app.predict` may not import).
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from app.predict import history, labels


class JournalUnreadable(Exception):
    """The journal file could not be read (missing, not SQLite, no faults table)."""


_JOURNAL_QUERY = (
    "SELECT at, node, gpu, xid, class, rule FROM faults WHERE status = 'firing' AND node IS NOT NULL "
    "AND gpu IS NOT NULL AND at >= ? ORDER BY at, id"
)


def journal_failures(path: Path, *, since: datetime) -> pd.DataFrame:
    """Hardware faults the journal recorded on a GPU since `since`, as a failures table (`history`).

    Reads the service's SQLite file read-only (WAL lets it while the service writes): firing faults of a
    hardware class with a node and a GPU. Faults Sickbay's own prediction raised are `at-risk`, never a
    hardware class, so the model never learns from itself. Raises `JournalUnreadable`.
    """
    # `at` is ISO-8601 text; a day of margin covers any UTC offset, the exact cut is made after parsing.
    coarse = (since.astimezone(UTC) - timedelta(days=1)).isoformat()
    if not path.is_file():
        raise JournalUnreadable(f"no journal at {path}")
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute(_JOURNAL_QUERY, (coarse,)).fetchall()
    except sqlite3.Error as exc:
        raise JournalUnreadable(f"cannot read the journal {path}: {exc}") from None
    cut = since.timestamp()
    records: list[dict[str, Any]] = []
    for at, node, gpu, xid, cls, rule in rows:
        if cls not in labels.HARDWARE_CLASSES:
            continue
        try:
            when = datetime.fromisoformat(str(at))
        except ValueError:
            continue
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        if when.timestamp() < cut:
            continue
        mode = f"xid-{xid}" if xid is not None else f"journal:{rule}"
        records.append({"node": node, "gpu": gpu, "time": when.timestamp(), "fault_class": cls, "mode": mode})
    return history.from_records(records)
