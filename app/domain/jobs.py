"""A batch/v1 Job as decide sees it: what it is called and how it ended, if it has.

Only the fields the verification step reads (`app.decide.verification`); the Job API's own terminal
conditions `Complete` and `Failed` (with `DeadlineExceeded` or `BackoffLimitExceeded` as the reason) say
how it ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class JobRun:
    name: str
    namespace: str
    # The node the Job is pinned to (its `sickbay.io/node` label); "" when it carries none.
    node: str = ""
    # True once the Job has the `Complete` condition, False once it has `Failed`, None while it runs.
    succeeded: bool | None = None
    # The terminal condition's reason and message (`DeadlineExceeded`, `BackoffLimitExceeded`, ...).
    reason: str = ""
    message: str = ""
    start_time: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.succeeded is not None
