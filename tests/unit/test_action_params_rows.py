"""Short and odd journal rows of action parameters: the defaults each missing field takes, the fault's own
class where a row names none, and the errors that say what is missing."""

from __future__ import annotations

import pytest

from app.domain import (
    ActionKind,
    CheckpointParams,
    FaultClass,
    OwnerRef,
    QuarantineParams,
    RemediationParams,
    RequeueParams,
)
from app.store import action_params


def test_a_remediation_row_takes_the_faults_class_and_a_human_by_default() -> None:
    got = action_params.from_object(ActionKind.REQUEST_REMEDIATION, {}, fault_class=FaultClass.REBOOT_NODE)
    assert got == RemediationParams(remediation=FaultClass.REBOOT_NODE, remediator="none")


def test_an_unknown_remediator_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown remediator 'robot'"):
        action_params.from_object(
            ActionKind.REQUEST_REMEDIATION, {"remediation": "replace", "remediator": "robot"}
        )


def test_a_row_without_its_class_and_no_fault_class_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match="a quarantine row has no 'class'"):
        action_params.from_object(ActionKind.QUARANTINE, {})
    assert action_params.from_object(
        ActionKind.QUARANTINE, {}, fault_class=FaultClass.REPLACE
    ) == QuarantineParams(FaultClass.REPLACE)


def test_checkpoint_rows_of_a_pod_and_of_an_owner_with_missing_fields() -> None:
    assert action_params.from_object(ActionKind.REQUEST_CHECKPOINT, {}) == CheckpointParams(uid="")
    assert action_params.from_object(ActionKind.REQUEST_CHECKPOINT, {"kind": "Job"}) == CheckpointParams(
        owner=OwnerRef(kind="Job", name="", uid="", api_version=""), namespace=""
    )


def test_parameters_of_no_known_form_are_refused_by_value() -> None:
    with pytest.raises(TypeError, match=r"no journal form for 42"):
        action_params.to_object(42)  # type: ignore[arg-type]


def test_a_requeue_row_of_an_older_release_reads_with_empty_defaults() -> None:
    row = {"kind": "Job", "name": "train", "namespace": "ml"}
    assert action_params.from_object(ActionKind.REQUEUE_WORKLOAD, row) == RequeueParams(
        OwnerRef(kind="Job", name="train", uid="", api_version=""), namespace="ml", queue=""
    )
    with pytest.raises(ValueError, match="a requeue-workload row has no 'namespace'"):
        action_params.from_object(ActionKind.REQUEUE_WORKLOAD, {"kind": "Job", "name": "train"})
