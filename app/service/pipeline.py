"""The single consumer: inbox → signal → classify → decide → journal → act.

Fatal first: every pending row of the fatal lane (what may be a hardware fault, `app.classify.lanes`) is
taken before the next soft one. A soft row is started only while no fatal row waits, so a fatal row that
arrives behind any soft backlog waits for the rows already in hand (one processing slot) and no more;
a fatal row may overtake its node's pending soft rows, which is the point. Within a lane, rows are taken in
inbox order: one node's strictly in order, different nodes in parallel (bounded).

Poison rows go aside: a row that fails is retried with the one backoff, alone — the rows after it, of its
node or any other, go on (`app.service.row_retries`) — and after its last try (or at once, when it can never
be processed) it moves to the dead-letter list with its error, counted in
`sickbay_inbox_dead_lettered_total`, and its inbox row is marked failed.

A row is marked done only after its fault and plan are journaled, and journaling is idempotent per row, so
a crash anywhere in between replays the row without double-counting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pydantic

from app.act.executor import Executor
from app.act.shadowing import ShadowKeeper
from app.act.urgency import Urgency
from app.classify import classifier
from app.config.settings import PipelineSettings
from app.domain import Fault, FaultClass, Lane, Outcome, Plan, Signal, SignalSource
from app.ingest import payloads, signals
from app.kube import port
from app.kube.viewgate import ViewGate
from app.obs.metrics import Metrics
from app.service import planning, row_retries
from app.service.recent_signals import RecentSignals
from app.store import codec, deadletter
from app.store.inbox import RECHECK_SOURCE, Inbox, Row, RowState
from app.store.journal import Journal

log = logging.getLogger(__name__)
_BATCH = 1000
# Why a row went to the dead-letter list: the `reason` of the letter and of sickbay_inbox_dead_lettered_total.
UNPROCESSABLE = "unprocessable"  # it no longer validates: no retry can help
RETRIES_EXHAUSTED = "retries_exhausted"
_UNKNOWN_XIDS_WARNED = 10_000  # (node, XID) pairs remembered as warned; past it the oldest may warn again


class StoredRowError(ValueError):
    """A stored row that can never be processed (it no longer validates); retrying cannot help."""


# Signals Sickbay makes itself (capacity drops, risk scores) are stored as serialised Signals.
INTERNAL_SOURCES = frozenset({SignalSource.ALLOCATABLE.value, SignalSource.PREDICTION.value, RECHECK_SOURCE})


@dataclass
class _Cursor:
    """Where the soft lane resumes within one drain: the rows it read but had not taken, then after `after`."""

    after: int = 0
    left: list[Row] = field(default_factory=list)


@dataclass(frozen=True)
class Processed:
    fault: Fault
    plan: Plan
    outcomes: tuple[Outcome, ...] = ()


def _item(row: Row) -> object:
    """What a dead letter keeps of a row: its stored JSON as a value (the alert, the event, the Signal)."""
    try:
        return json.loads(row.payload)
    except ValueError:
        return row.payload


def signal_of(row: Row, *, keys: signals.NodeKeys) -> Signal:
    """Rebuild the Signal from a stored row with the same code the intake validated it with."""
    received_at = datetime.fromisoformat(row.received_at)
    if row.source in INTERNAL_SOURCES:
        return codec.signal_from_dict(json.loads(row.payload))
    if row.source == "agent":
        event = payloads.GpuEvent.model_validate_json(row.payload)
        return signals.from_gpu_event(event, received_at=received_at)
    alert = payloads.AlertmanagerAlert.model_validate_json(row.payload)
    return signals.from_alert(alert, keys=keys, received_at=received_at)


class Pipeline:
    def __init__(
        self,
        *,
        inbox: Inbox,
        journal: Journal,
        rules: classifier.Rules,
        settings: PipelineSettings,
        node_keys: signals.NodeKeys,
        metrics: Metrics,
        kube: port.KubePort | None = None,
        executor: Executor | None = None,
        urgency: Urgency | None = None,
        shadow: ShadowKeeper | None = None,
        dead_letters: deadletter.DeadLetters | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        timer: Callable[[], float] | None = None,
        view: ViewGate | None = None,
    ) -> None:
        """`dead_letters`: where rows given up on go (without one they are only marked failed). `timer`:
        monotonic seconds for retry waits, the event loop's clock unless a test passes its own."""
        self._urgency = urgency or Urgency()
        # The proactive ladder's standing per model version; without one (a bare pipeline) it acts.
        self._shadow = shadow
        self._kube = kube
        self._view = view  # the cluster view, for the proactive budget's fleet while it is fresh
        self._executor = executor
        self._inbox = inbox
        self._journal = journal
        self._rules = rules
        self._settings = settings
        self._keys = node_keys
        self._metrics = metrics
        self._clock = clock
        self._retries = row_retries.RowRetries(timer=timer or (lambda: asyncio.get_running_loop().time()))
        self._dead_letters = dead_letters
        self._slots = asyncio.Semaphore(settings.node_concurrency)
        self._recent = RecentSignals(journal)
        self._unknown_warned: dict[tuple[str | None, int], None] = {}
        self.processed = 0

    async def run(self) -> None:
        """Consume forever; resumes from every pending row, so a restart loses nothing."""
        while True:
            worked = await self.drain_once()
            if not worked:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that races
                # with the event being set, and the service would then never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.poll_interval_s):
                        await self._inbox.arrived.wait()
                self._inbox.arrived.clear()

    async def drain_once(self) -> int:
        """Process every row pending now, the fatal lane first (rows waiting out a retry excepted); return
        how many were taken."""
        taken = 0
        soft = _Cursor()
        while True:
            # Cleared before the lane is read: a fatal row committed from here on is either read now or
            # sets it again, so the soft lane yields to it.
            self._inbox.fatal_arrived.clear()
            taken += await self._drain_fatal()
            count, yielded = await self._drain_soft(soft)
            taken += count
            if not yielded:
                break
        self._metrics.inbox_depth.set(await self._inbox.depth())
        return taken

    async def _drain_fatal(self) -> int:
        taken, after, seen = 0, 0, set[int]()
        while rows := await self._inbox.pending(after_seq=after, limit=_BATCH, lane=Lane.FATAL):
            after = rows[-1].seq
            seen.update(row.seq for row in rows)
            taken += (await self._take(rows, lane=Lane.FATAL))[0]
        self._retries.keep_fatal(seen)
        return taken

    async def _drain_soft(self, cursor: _Cursor) -> tuple[int, bool]:
        """The soft lane from `cursor`, batch by batch, until it is empty (False) or yields to a fatal row
        (True). The rows read but not taken when it yields stay in `cursor`: a flood of fatal rows makes it
        yield often, and resuming must not read a thousand rows again each time."""
        taken = 0
        while True:
            rows, cursor.left = cursor.left, []
            if not rows:
                rows = await self._inbox.pending(after_seq=cursor.after, limit=_BATCH, lane=Lane.SOFT)
                if not rows:
                    return taken, False
                cursor.after = rows[-1].seq
            count, cursor.left = await self._take(rows, lane=Lane.SOFT)
            taken += count
            if cursor.left or self._fatal_waiting():
                return taken, True

    async def _take(self, rows: Sequence[Row], *, lane: Lane) -> tuple[int, list[Row]]:
        """Rows of one lane, each node's in order, nodes in parallel; (how many were taken, the rows left
        when the soft lane yielded, in order)."""
        now = self._retries.now()
        by_node: dict[str | None, list[Row]] = defaultdict(list)
        for row in rows:
            if self._retries.due(row.seq, now=now):
                by_node[row.node].append(row)
        async with self._urgency.urgent():
            results = await asyncio.gather(*(self._node_rows(r, lane=lane) for r in by_node.values()))
        left = sorted((row for _, rest in results for row in rest), key=lambda row: row.seq)
        return sum(count for count, _ in results), left

    def _fatal_waiting(self) -> bool:
        """A fatal row is pending that the soft lane must yield to: a new one, or one whose retry is due."""
        return self._inbox.fatal_arrived.is_set() or self._retries.fatal_due()

    async def _node_rows(self, rows: Sequence[Row], *, lane: Lane) -> tuple[int, Sequence[Row]]:
        """One node's rows of one lane, in order; (how many were taken, those left). A soft row is started
        only while no fatal row waits; a row that fails waits out its retry alone, the next rows go on."""
        taken = 0
        async with self._slots:
            done: list[int] = []
            for row in rows:
                if lane is Lane.SOFT and self._fatal_waiting():
                    break  # the rest stay pending, taken when the soft lane resumes
                taken += 1
                try:
                    await self.process(row)
                except StoredRowError as exc:  # cannot get better by retrying
                    self._metrics.pipeline_errors.inc()
                    await self._give_up(row, reason=UNPROCESSABLE, error=str(exc), lane=lane)
                    continue
                except Exception as exc:  # a database or API hiccup, or a poison row: retry it, alone
                    await self._retry_later(row, exc, lane=lane)
                    continue
                done.append(row.seq)
                self._retries.forget(row.seq)
            await self._inbox.mark(done, RowState.DONE)
        return taken, rows[taken:]

    async def _retry_later(self, row: Row, exc: Exception, *, lane: Lane) -> None:
        self._metrics.pipeline_errors.inc()
        attempts = row.attempts + 1
        error = f"{type(exc).__name__}: {exc}"
        if attempts >= row_retries.MAX_ATTEMPTS:
            await self._give_up(row, reason=RETRIES_EXHAUSTED, error=error, lane=lane)
            return
        delay = self._retries.wait(row.seq, attempts=attempts, fatal=lane is Lane.FATAL)
        log.warning(
            "inbox row %d (node %s) failed, attempt %d of %d: %r; will retry in %.0fs",
            row.seq,
            row.node,
            attempts,
            row_retries.MAX_ATTEMPTS,
            error,
            delay,
        )
        with contextlib.suppress(Exception):  # if even this fails, the row simply stays pending
            await self._inbox.mark([row.seq], RowState.PENDING, error=error)

    async def _give_up(self, row: Row, *, reason: str, error: str, lane: Lane) -> None:
        """Move the row to the dead-letter list with its error, then mark it failed; if the list cannot be
        written, the row stays pending and is tried again later, so it is never lost unseen."""
        letter = deadletter.Letter(
            source=row.source,
            reason=reason,
            where=f"inbox.{row.seq}",
            message=error,
            item=_item(row),
            fingerprint=row.fingerprint,
        )
        if self._dead_letters is not None:
            try:
                await self._dead_letters.keep([letter], seen_at=self._clock())
            except deadletter.DeadLetterError as exc:
                log.error("inbox row %d could not be dead-lettered (%s); keeping it pending", row.seq, exc)
                self._retries.wait_for(row.seq, row_retries.BACKOFF.cap, fatal=lane is Lane.FATAL)
                return
        log.error(  # the error quotes what arrived: repr'd, so it stays one line
            "inbox row %d (%s, node %s) moved to the dead-letter list after %d attempt(s) (%s): %r",
            row.seq,
            row.source,
            row.node,
            row.attempts + 1,
            reason,
            error,
        )
        self._metrics.dead_lettered.labels(source=row.source, reason=reason).inc()
        await self._inbox.mark([row.seq], RowState.FAILED, error=error)
        self._retries.forget(row.seq)

    async def process(self, row: Row) -> Processed:
        try:
            signal = signal_of(row, keys=self._keys)
        except (pydantic.ValidationError, signals.SignalError, ValueError, KeyError) as exc:
            raise StoredRowError(f"stored row no longer validates: {exc}") from exc
        if (
            row.source == RECHECK_SOURCE
            and await self._journal.latest_firing(signal.fingerprint) != signal.starts_at
        ):
            # Resolved (or replaced by a newer firing) since the re-check was scheduled: nothing to do,
            # and journaling it would make a resolved alert look firing again.
            log.debug("re-check of %s on %s: no longer firing", signal.name, signal.node)
            stale = Fault(FaultClass.TRANSIENT, signal, "no longer firing when re-checked", "recheck")
            return Processed(fault=stale, plan=Plan.record_only(stale, self._clock(), stale.reason))
        policy = self._rules.policy.classification
        context = await self._recent.context(signal, window=max(policy.context_window, policy.link_window))
        decided = await planning.plan_signal(
            signal,
            context=context,
            rules=self._rules,
            now=self._clock(),
            kube=self._kube,
            journal=self._journal,
            shadow=self._shadow,
            view=self._view,
        )
        fault, plan, situation = decided.fault, decided.plan, decided.situation
        # The plan's fault: after an escalation it carries the class and reason that were acted on.
        fault_id, fresh = await self._journal.record(
            inbox_seq=row.seq, fault=plan.fault, plan=plan, workload=plan.workload
        )
        if fresh:
            self._recent.remember(signal)
            self._metrics.faults.labels(fault_class=fault.fault_class.value, status=signal.status.value).inc()
            log.log(
                logging.DEBUG if plan.is_noop else logging.INFO,
                "classified %s on %s gpu=%s as %s: %s; plan: %s",
                signal.name,
                signal.node,
                signal.gpu,
                fault.fault_class.value,
                fault.reason,
                plan.summary,
            )
            if fault.rule == classifier.UNKNOWN_XID_RULE and signal.firing:
                self._report_unknown_xid(fault)
        outcomes: tuple[Outcome, ...] = ()
        if self._executor is not None:
            # A replayed row (journaled, not yet marked done) is executed again: every action is idempotent.
            outcomes = tuple(await self._executor.execute(plan, fault_id=fault_id, node=situation.node))
        self._metrics.processing_seconds.observe(
            max(0.0, (self._clock() - signal.received_at).total_seconds())
        )
        self.processed += 1
        return Processed(fault=fault, plan=plan, outcomes=outcomes)

    def _report_unknown_xid(self, fault: Fault) -> None:
        """An XID the catalog lacks is classified by policy, never silently: counted every time, and
        logged once per node and XID with what to do about it."""
        signal = fault.signal
        assert signal.xid is not None
        self._metrics.unknown_xids.labels(xid=str(signal.xid)).inc()
        key = (signal.node, signal.xid)
        if key in self._unknown_warned:
            return
        if len(self._unknown_warned) >= _UNKNOWN_XIDS_WARNED:
            del self._unknown_warned[next(iter(self._unknown_warned))]
        self._unknown_warned[key] = None
        log.warning(
            "XID %d on node %s (GPU %s) is not in the XID catalog: classified %s by the policy's "
            "classification.unknown_xid. Look it up in NVIDIA's Xid catalog and add it, with its class and "
            "source, to the XID catalog (xid_catalog_file); until then it counts in "
            'sickbay_unknown_xids_total{xid="%d"} (logged once per node and XID)',
            signal.xid,
            signal.node,
            signal.gpu,
            fault.fault_class.value,
            signal.xid,
        )
