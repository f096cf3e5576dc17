"""The demo's verification before release: the policy section that turns it on, the simulated Job
outcomes that make the first verification fail, and the words the timeline uses for each step.

The XID 79 node's release scene goes through it: once the remediator reports done, Sickbay runs the
DCGM verification Job on the node (`rules/verification-job.yaml`, level 1); the simulator's Job
controller fails the first one (`/_sim/job-outcomes`), the second passes, and only then, after the
healthy delay, is the node released. Every other release in the demo passes its first verification.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.config.settings import RULES_DIR
from app.decide import footprint
from app.domain import NodeState
from app.sim.kubeapi.resources import NAMESPACES, Ref

if TYPE_CHECKING:
    from app.demo.stack import Stack

NAMESPACE = "sickbay"
# Seconds a simulated verification Job's pod runs before it ends (a real `dcgmi diag -r 1` takes seconds).
RUN_S = 0.5


def policy_section() -> dict[str, Any]:
    """`verification:` for the demo's policy: on, DCGM level 1, a deadline fit for a run of seconds."""
    return {
        "enabled": True,
        "level": 1,
        "deadline": "20s",
        "max_failures": 2,
        "namespace": NAMESPACE,
        "template": str(RULES_DIR / "verification-job.yaml"),
        "keep_finished": "10m",
    }


def prepare(stack: Stack) -> None:
    """The namespace the Jobs run in, and short Job runs: before Sickbay verifies anything."""
    if stack.kube.store.get(Ref(NAMESPACES, name=NAMESPACE)) is None:
        stack.kube.load({"namespaces": [NAMESPACE]})
    stack.kube.registry.jobs.run_s = RUN_S


def fail_first_verification(stack: Stack, node: str) -> None:
    """The next verification Job on `node` fails (its pod exits non-zero); the one after it passes."""
    prepare(stack)
    stack.kube.registry.jobs.queue(node, "fail")


def view(node: NodeState) -> str | None:
    """The node's verification in words, as its marks say it; None when it has none."""
    if job := node.annotation(footprint.VERIFIED):
        return f"verified: Job {job} passed"
    job = node.annotation(footprint.VERIFICATION_JOB)
    if not job:
        return None
    failures = node.annotation(footprint.VERIFICATION_FAILURES) or "0"
    failed = f"{failures} failed, " if failures != "0" else ""
    return f"verification Job {job} running ({failed}DCGM diag)"
