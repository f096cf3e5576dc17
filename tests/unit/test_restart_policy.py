"""Escalation and backoff counting: which past faults count toward this GPU, this workload and this restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import restart_policy
from app.domain import FaultClass, PastFault

NOW = datetime.now(UTC)
POLICY = rules.EscalationPolicy(window=timedelta(hours=24), distinct_workloads=2, repeats=3)


def past(
    minutes_ago: float,
    *,
    workload: str | None = "team/train",
    gpu: int | None = 0,
    fp: str = "",
    cls: FaultClass = FaultClass.RESTART_WORKLOAD,
) -> PastFault:
    return PastFault(
        at=NOW - timedelta(minutes=minutes_ago),
        fault_class=cls,
        gpu=gpu,
        xid=13,
        workload=workload,
        fingerprint=fp or f"fp-{minutes_ago}-{workload}-{gpu}",
    )


def follows(
    history: tuple[PastFault, ...], *, workload: str | None = "team/train", gpu: int | None = 0
) -> restart_policy.Escalation:
    return restart_policy.follows_the_gpu(
        history, gpu=gpu, workload=workload, fingerprint="now", now=NOW, policy=POLICY
    )


def test_prior_on_gpu_keeps_retry_faults_of_this_gpu_from_other_signals_only() -> None:
    kept = past(5)
    history = (
        kept,
        past(6, gpu=1),  # another GPU
        past(7, cls=FaultClass.RESET_GPU),  # hardware, not a retry
        past(8, fp="now"),  # this very signal, journaled before
    )
    assert restart_policy.prior_on_gpu(history, gpu=0, fingerprint="now") == [kept]
    transient = past(9, cls=FaultClass.TRANSIENT)
    assert restart_policy.prior_on_gpu((transient,), gpu=0, fingerprint="now") == [transient]


def test_n_repeats_of_one_workload_escalate_at_the_threshold() -> None:
    below = follows((past(10),))
    assert below == restart_policy.Escalation(False, "occurrence 2 on GPU 0 under 1 workload(s) in 24h")
    at = follows((past(10), past(20)))
    assert at.escalate
    assert at.reason == "GPU 0 faulted 3 times within 24h (threshold 3)"


def test_a_resent_alert_is_not_a_new_occurrence() -> None:
    """Alertmanager re-sends a firing alert with the same fingerprint: one fault, however often it comes."""
    resent = (past(10, fp="again"), past(20, fp="again"), past(30, fp="now"))
    verdict = restart_policy.follows_the_gpu(
        resent, gpu=0, workload="team/train", fingerprint="again", now=NOW, policy=POLICY
    )
    # "now" is another signal: it counts once; the two copies of "again" are this one.
    assert not verdict.escalate
    assert verdict.reason.startswith("occurrence 2 ")


def test_two_workloads_on_one_gpu_escalate_and_are_named() -> None:
    verdict = follows((past(10, workload="team/infer"),))
    assert verdict.escalate
    assert verdict.reason == (
        "the fault follows the GPU: GPU 0 faulted under 2 different workloads within 24h (team/infer, team/train)"
    )


def test_faults_without_a_workload_count_as_repeats_not_as_workloads() -> None:
    lone = follows((past(10, workload=None),), workload=None)
    assert not lone.escalate
    assert lone.reason == "occurrence 2 on GPU 0 under 1 workload(s) in 24h"
    assert follows((past(10, workload=None), past(11, workload=None)), workload=None).escalate
    # One named workload and an anonymous fault: one workload, two occurrences, either way round.
    assert not follows((past(10, workload=None),)).escalate
    assert follows((past(10),), workload=None) == restart_policy.Escalation(
        False, "occurrence 2 on GPU 0 under 1 workload(s) in 24h"
    )


def test_the_window_bounds_what_counts() -> None:
    edge = past(24 * 60)  # exactly one window ago: still inside
    assert follows((edge, past(10))).escalate
    assert not follows((past(24 * 60 + 1), past(10))).escalate
    assert not follows((past(24 * 60 + 1, workload="team/infer"),)).escalate


def test_other_gpus_faults_do_not_escalate_this_one() -> None:
    assert not follows((past(10, gpu=1), past(20, gpu=1), past(30, gpu=1, workload="x/y"))).escalate


def test_no_gpu_never_follows_one() -> None:
    verdict = follows((past(10, gpu=None), past(20, gpu=None)), gpu=None)
    assert verdict == restart_policy.Escalation(False, "no GPU on the signal, so it cannot follow one")


def attempt(
    history: tuple[PastFault, ...], workload: str | None = "team/train"
) -> tuple[int, datetime | None]:
    return restart_policy.restart_attempt(
        history, workload=workload, fingerprint="now", now=NOW, window=timedelta(hours=1)
    )


def test_the_first_restart_has_no_previous() -> None:
    assert attempt(()) == (1, None)


def test_restart_attempts_count_this_workloads_restarts_only() -> None:
    mine_old, mine_new = past(30), past(5)
    history = (
        mine_new,
        mine_old,
        past(3, workload="team/other"),  # another workload's restart: not this one's backoff
        past(4, cls=FaultClass.REBOOT_NODE),  # hardware
        past(6, fp="now"),  # the same signal again
        past(61),  # outside the window
    )
    assert attempt(history) == (3, mine_new.at)
    assert attempt((past(60),))[0] == 2  # exactly one window ago: still inside


def test_a_pod_without_a_workload_always_restarts_first_time() -> None:
    assert attempt((past(5, workload=None), past(6, workload=None)), workload=None) == (1, None)


def test_backoff_starts_at_the_second_restart() -> None:
    retry = rules.RetryPolicy(initial=timedelta(seconds=30), factor=2.0, max=timedelta(minutes=30))
    assert restart_policy.backoff(1, retry) == timedelta(0)
    assert restart_policy.backoff(0, retry) == timedelta(0)
    assert restart_policy.backoff(2, retry) == timedelta(seconds=30)
    assert restart_policy.backoff(3, retry) == timedelta(seconds=60)


@pytest.mark.parametrize("cls", sorted(restart_policy.RETRY_CLASSES, key=lambda c: c.value))
def test_both_retry_classes_count_toward_backoff(cls: FaultClass) -> None:
    assert attempt((past(5, cls=cls),))[0] == 2
