"""How long the store keeps each growing table, and how the pruning job goes about deleting the rest.

Durations are written as the policy writes them (`90d`, `2w`, `36h`). Each table's retention has a floor
that the features reading it need (`app.decide.retention.needs`: the escalation window, the weekly cap on
remediation attempts, retraining's look-back); a retention below its floor is refused at start-up with
the feature named, never silently honoured. `enabled: false` keeps everything (the behaviour before).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from app.config.durations import Duration


class RetentionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # Processed inbox rows (done or failed), by when they were received. They serve the intake's dedup
    # of resends and the status page's unattributed alerts; a pending row is never deleted.
    inbox: Duration = timedelta(days=14)
    # The journal's faults, by their signal's startsAt: escalation, classification context, `explain`,
    # the status page and retraining's labels read them.
    faults: Duration = timedelta(days=90)
    # The journal's outcomes (what each action did): the weekly attempt cap and the quarantine rate limit.
    outcomes: Duration = timedelta(days=90)
    # The validation log: rows older than this go, except each (model version, fleet)'s latest, which is
    # that version's standing now.
    validation: Duration = timedelta(days=180)
    # How often the job runs, and its first run this long after start-up (not during the start-up rush).
    interval: Duration = timedelta(hours=1)
    # Rows deleted per transaction: each batch holds the store's one write lock for a few milliseconds,
    # so the intake's group commits go between batches.
    batch_rows: int = Field(default=2000, ge=1, le=100_000)
    # Free pages handed back to the file system per incremental vacuum step (4 KiB pages: 4 MiB a step).
    vacuum_pages: int = Field(default=1000, ge=1, le=1_000_000)
