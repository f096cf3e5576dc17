"""Verify before release, decided purely: (node marks, its Job as read, policy, now) → the next step.

Table-driven, no mocks, no clock: the Job's name, when it was asked for and the failures so far are
annotations on the node in each row, so each row is also what a new leader decides from the same node.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from app.config import rules
from app.config import verification as verification_config
from app.config.errors import ConfigError
from app.decide import footprint, reconciling, verification
from app.domain import FaultClass, JobRun, NodeState, RemediationState, Taint, freeze_mapping

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
POLICY = rules.Policy.model_validate(
    {"version": 1, "verification": {"enabled": True, "deadline": "10m", "max_failures": 2}}
)
OFF = rules.Policy(version=1)
JOB = "verify-n1-1-abc"


def verifying(**annotations: str) -> NodeState:
    marks = {
        footprint.OWNED_BY: "sickbay-0",
        footprint.ADDED: "cordon,taint",
        footprint.FAULT: '{"class":"reset-gpu"}',
        footprint.REMEDIATION_REQUESTED: "reset-gpu",
        footprint.REMEDIATION_DONE: "true",
        **annotations,
    }
    return NodeState(
        name="n1",
        unschedulable=True,
        taints=(Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"),),
        labels=freeze_mapping({footprint.STATE: RemediationState.VERIFYING.value}),
        annotations=freeze_mapping(marks),
        gpu_capacity=8,
        gpu_allocatable=8,
    )


def running(name: str = JOB) -> JobRun:
    return JobRun(name=name, namespace="sickbay", node="n1")


def ended(succeeded: bool, reason: str = "", name: str = JOB) -> JobRun:
    return JobRun(name=name, namespace="sickbay", node="n1", succeeded=succeeded, reason=reason)


STARTED = {
    footprint.VERIFICATION_JOB: JOB,
    footprint.VERIFICATION_STARTED_AT: T0.isoformat(),
    footprint.VERIFICATION_FAILURES: "0",
}
AFTER_ONE = {**STARTED, footprint.VERIFICATION_FAILURES: "1"}


@pytest.mark.parametrize(
    ("marks", "job", "now", "expected", "attempt", "failures"),
    [
        # No Job yet: the first one.
        ({}, None, T0, verification.Start, 1, 0),
        # Named on the node but absent (the create was lost): create that one.
        (STARTED, None, T0 + MIN, verification.Create, 1, None),
        # Running, within its deadline plus the grace: wait.
        (STARTED, running(), T0 + 10 * MIN, verification.Wait, None, None),
        # Succeeded: verified.
        (STARTED, ended(True), T0 + 2 * MIN, verification.Passed, None, None),
        # Failed once, with one more allowed: the second Job.
        (STARTED, ended(False, "BackoffLimitExceeded"), T0 + 2 * MIN, verification.Start, 2, 1),
        # The deadline failed it: the same.
        (STARTED, ended(False, "DeadlineExceeded"), T0 + 11 * MIN, verification.Start, 2, 1),
        # Still not finished well past its deadline (no Job controller ended it): counted as failed.
        (STARTED, running(), T0 + 12 * MIN, verification.Start, 2, 1),
        # The second failure reaches max_failures: give up (escalate).
        (AFTER_ONE, ended(False, "BackoffLimitExceeded"), T0 + 2 * MIN, verification.GiveUp, None, 2),
        # An unreadable count counts as none.
        ({**STARTED, footprint.VERIFICATION_FAILURES: "x"}, ended(False), T0, verification.Start, 2, 1),
        # Gave up already: wait for a human, whatever the Job says.
        ({footprint.VERIFICATION_GAVE_UP: "2 failed"}, None, T0, verification.Wait, None, None),
    ],
)
def test_verification_step(
    marks: dict[str, str],
    job: JobRun | None,
    now: datetime,
    expected: type,
    attempt: int | None,
    failures: int | None,
) -> None:
    decision = verification.verification_step(verifying(**marks), job, unhealthy=None, policy=POLICY, now=now)
    assert type(decision) is expected, decision
    if attempt is not None:
        assert decision.attempt == attempt
    if failures is not None:
        assert decision.failures == failures


@pytest.mark.parametrize(
    ("marks", "job", "expected"),
    [
        # Not healthy yet (the device plugin has not advertised every GPU): no first Job ...
        ({}, None, verification.Wait),
        # ... nor a retry; the failed Job stays the last word until the node is healthy.
        (STARTED, ended(False), verification.Wait),
        # A Job that runs or ended is read as it is: health gates only new Jobs.
        (STARTED, running(), verification.Wait),
        (STARTED, ended(True), verification.Passed),
        (AFTER_ONE, ended(False), verification.GiveUp),
        (STARTED, None, verification.Create),
    ],
)
def test_a_new_job_starts_only_once_the_gpus_report_healthy(
    marks: dict[str, str], job: JobRun | None, expected: type
) -> None:
    node = verifying(**marks)
    unhealthy = reconciling.health_problem(replace(node, gpu_allocatable=6), firing=())
    assert unhealthy == "GPU allocatable 6 is below capacity 8"
    decision = verification.verification_step(node, job, unhealthy=unhealthy, policy=POLICY, now=T0 + MIN)
    assert type(decision) is expected, decision
    assert reconciling.health_problem(node, firing=("reset-gpu",)) == "a reset-gpu fault still fires on it"
    assert reconciling.health_problem(node, firing=("transient",)) is None


def test_a_new_job_has_a_new_name_for_each_attempt_and_time() -> None:
    first = verification.verification_step(verifying(), None, unhealthy=None, policy=POLICY, now=T0)
    retry = verification.verification_step(
        verifying(**STARTED), ended(False), unhealthy=None, policy=POLICY, now=T0 + MIN
    )
    assert isinstance(first, verification.Start)
    assert isinstance(retry, verification.Start)
    assert first.name != retry.name != JOB
    later = verification.job_name("n1", attempt=1, now=T0 + MIN)
    assert later != first.name  # a later episode never meets an older finished Job
    long = verification.job_name("gpu." + "x" * 300, attempt=2, now=T0)
    assert len(long) <= 63
    assert long.startswith("verify-gpu-x")


def test_giving_up_escalates_to_replace_unless_replace_was_asked_already() -> None:
    failed = ended(False, "BackoffLimitExceeded")
    escalate = verification.verification_step(
        verifying(**AFTER_ONE), failed, unhealthy=None, policy=POLICY, now=T0
    )
    assert isinstance(escalate, verification.GiveUp)
    assert escalate.remediation is not None
    assert escalate.remediation.remediation is FaultClass.REPLACE
    assert escalate.remediation.remediator == "none"  # the policy's replace remediator: a human
    replaced = verifying(**AFTER_ONE, **{footprint.REMEDIATION_REQUESTED: "replace"})
    hold = verification.verification_step(replaced, failed, unhealthy=None, policy=POLICY, now=T0)
    assert isinstance(hold, verification.GiveUp)
    assert hold.remediation is None


def test_a_verifying_node_is_verified_before_release_only_when_the_policy_says_so() -> None:
    node = verifying()
    assert reconciling.next_step(node, drain_running=False, policy=POLICY).step is reconciling.Step.VERIFY
    assert reconciling.next_step(node, drain_running=False, policy=OFF).step is reconciling.Step.RELEASE
    passed = verifying(**{footprint.VERIFIED: JOB})
    assert reconciling.next_step(passed, drain_running=False, policy=POLICY).step is reconciling.Step.RELEASE


def test_leaving_verifying_removes_the_verification_marks_and_release_too() -> None:
    node = verifying(**AFTER_ONE, **{footprint.VERIFIED: JOB})
    to_remediating = dict(footprint.state_patch(node, RemediationState.REMEDIATING).annotations)
    present = [key for key in footprint.VERIFICATION_MARKS if node.annotation(key) is not None]
    assert len(present) == 4  # all but gave-up
    for key in present:
        assert to_remediating[key] == ""
    assert footprint.VERIFICATION_GAVE_UP not in to_remediating  # absent: nothing to remove
    staying = dict(footprint.state_patch(node, RemediationState.VERIFYING).annotations)
    assert not set(staying) & set(footprint.VERIFICATION_MARKS)
    released = dict(footprint.release_patch(node).annotations)
    for key in (footprint.VERIFICATION_JOB, footprint.VERIFICATION_FAILURES, footprint.VERIFIED):
        assert released[key] == ""


TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "gpu"}},
    "spec": {
        "backoffLimit": 6,
        "template": {
            "spec": {
                "restartPolicy": "OnFailure",
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "containers": [{"name": "diag", "image": "dcgm"}],
            }
        },
    },
}


def test_the_job_is_pinned_tolerates_our_taints_asks_for_every_gpu_and_runs_once() -> None:
    job = verification.render(TEMPLATE, node=verifying(), name=JOB, attempt=2, policy=POLICY)
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    assert job["metadata"]["name"] == JOB
    assert job["metadata"]["namespace"] == "sickbay"
    assert job["metadata"]["labels"] == {
        "team": "gpu",
        verification.NODE_LABEL: "n1",
        verification.ATTEMPT_LABEL: "2",
    }
    spec = job["spec"]
    assert spec["backoffLimit"] == 0  # the template's 6 is overridden: one try per verification
    assert spec["activeDeadlineSeconds"] == 600
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["nodeName"] == "n1"
    assert pod["restartPolicy"] == "Never"
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert tolerated == {
        "dedicated",
        footprint.UNHEALTHY,
        footprint.AT_RISK,
        verification.UNSCHEDULABLE_TAINT,
    }
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "8"
    assert resources["requests"]["nvidia.com/gpu"] == "8"
    assert TEMPLATE["spec"]["backoffLimit"] == 6  # the template itself is left as it was


def test_the_shipped_template_runs_dcgm_diag_at_the_policy_level(tmp_path: Any) -> None:
    shipped = rules.load_policy(verification_config.DEFAULT_POLICY_DIR / "policy.yaml")
    assert shipped.verification.enabled is False  # opt-in: see rules/policy.yaml
    on = rules.Policy.model_validate({"version": 1, "verification": {"enabled": True, "level": 1}})
    text = verification_config.load_template(
        on.verification, policy_dir=verification_config.DEFAULT_POLICY_DIR
    )
    job = verification.render(
        yaml.safe_load(verification.fill_level(text, on)), node=verifying(), name=JOB, attempt=1, policy=on
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("nvcr.io/nvidia/cloud-native/dcgm:")
    assert "dcgmi diag -r 1" in " ".join(container["args"])
    assert verification_config.load_template(OFF.verification, policy_dir=tmp_path) == ""
    with pytest.raises(ConfigError, match="cannot read"):
        verification_config.load_template(on.verification, policy_dir=tmp_path)
    (tmp_path / "verification-job.yaml").write_text("kind: Job\nspec: {}\n")
    with pytest.raises(ConfigError, match="with a container"):
        verification_config.load_template(on.verification, policy_dir=tmp_path)


@pytest.mark.parametrize(
    "section",
    [{"level": 5}, {"max_failures": 0}, {"deadline": "0s"}, {"namespace": "Not_A_Name"}, {"unknown": 1}],
)
def test_a_bad_verification_section_is_refused(section: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="verification"):
        rules.Policy.model_validate({"version": 1, "verification": section})


def test_a_partially_drained_node_skips_the_job_and_says_why() -> None:
    # Tainted for the reset, never cordoned: its other workloads still hold GPUs a Job could not get.
    node = replace(verifying(**{footprint.ADDED: "taint"}), unschedulable=False)
    assert footprint.partially_drained(node)
    step = verification.verification_step(node, None, unhealthy=None, policy=POLICY, now=T0)
    assert isinstance(step, verification.Passed)
    assert step.name == verification.PARTIAL_DRAIN_SKIP
    assert "partial drain" in step.why
    # A whole-node drain of the same class still runs the Job.
    whole = verification.verification_step(verifying(), None, unhealthy=None, policy=POLICY, now=T0)
    assert isinstance(whole, verification.Start)
