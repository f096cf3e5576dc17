"""Moves due re-checks of transient signals from the journal into the inbox, where the pipeline plans them
again like any signal: still firing and lasting → visible on the node; resolved meanwhile → nothing.

A re-check row carries the original signal with a new receipt time; its inbox fingerprint adds the check
number, so each re-check is a row of its own while a replay of the same one stays a duplicate. Rows are
handed to the inbox before they are removed from the journal: a crash in between re-appends them, and
the inbox's dedup makes that harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from app.domain import Signal
from app.store import codec
from app.store.inbox import RECHECK_SOURCE, Inbox, Record
from app.store.journal import Journal

log = logging.getLogger(__name__)


def record_of(original: Signal, *, check: int, now: datetime) -> Record:
    signal = replace(original, received_at=now)
    return Record(
        source=RECHECK_SOURCE,
        fingerprint=f"{signal.fingerprint}#{check}",
        starts_at=signal.starts_at.isoformat(),
        status=signal.status.value,
        node=signal.node,
        payload=codec.signal_json(signal),
        received_at=now.isoformat(),
    )


async def enqueue_due(*, journal: Journal, inbox: Inbox, clock: Callable[[], datetime]) -> int:
    """Append every due re-check to the inbox; returns how many."""
    now = clock()
    due = await journal.due_rechecks(now)
    if not due:
        return 0
    await inbox.append([record_of(signal, check=check, now=now) for signal, check in due])
    await journal.done_rechecks(due)
    log.debug("re-checking %d transient signal(s)", len(due))
    return len(due)
