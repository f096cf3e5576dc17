"""The demo's timeline says each verification step, from the node's marks (`app.demo.verifying`)."""

from __future__ import annotations

import itertools

from app.config import rules
from app.decide import footprint
from app.demo import cluster_watch, verifying
from app.domain import NodeState, freeze_mapping


def node(**annotations: str) -> NodeState:
    return NodeState(name="gpu-03", annotations=freeze_mapping(annotations))


def test_each_verification_step_is_said_once_as_the_marks_change() -> None:
    steps = [
        node(),
        node(**{footprint.VERIFICATION_JOB: "verify-gpu-03-1-a", footprint.VERIFICATION_FAILURES: "0"}),
        node(**{footprint.VERIFICATION_JOB: "verify-gpu-03-2-b", footprint.VERIFICATION_FAILURES: "1"}),
        node(**{footprint.VERIFICATION_JOB: "verify-gpu-03-2-b", footprint.VERIFIED: "verify-gpu-03-2-b"}),
        node(),  # released: the marks are gone, nothing to say about verification
    ]
    views = [cluster_watch.view_of(n) for n in steps]
    said = [cluster_watch.describe_change(a, b) for a, b in itertools.pairwise(views)]
    assert said == [
        "verification Job verify-gpu-03-1-a running (DCGM diag)",
        "verification Job verify-gpu-03-2-b running (1 failed, DCGM diag)",
        "verified: Job verify-gpu-03-2-b passed",
        "",
    ]


def test_the_demo_policy_section_is_a_valid_policy_with_the_shipped_template() -> None:
    policy = rules.Policy.model_validate({"version": 1, "verification": verifying.policy_section()})
    assert policy.verification.enabled
    assert policy.verification.namespace == verifying.NAMESPACE
    assert policy.verification.template.endswith("rules/verification-job.yaml")
