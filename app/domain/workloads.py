"""What an audit of GPU-node hygiene reads beyond what decide needs: pod scheduling facts and GPU Jobs.

Standard library only (see `app.domain`). The audit (`app.audit`) checks these against the Kubernetes
guidance on GPU failures; `app.kube.convert` builds them from the API's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists: tolerates every taint
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect
    seconds: int | None = None  # tolerationSeconds; None: tolerated forever (NoExecute)

    def tolerates(self, key: str, effect: str) -> bool:
        """Whether this toleration matches a taint with `key` and `effect` (the Kubernetes matching rule)."""
        return (not self.key or self.key == key) and (not self.effect or self.effect == effect)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """A pod's scheduling facts: its priority, tolerations and images (`spec`)."""

    priority: int = 0
    priority_class: str = ""
    tolerations: tuple[Toleration, ...] = ()
    images: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FailureRule:
    """One rule of a Job's `spec.podFailurePolicy`: an action on pod conditions or on container exit codes."""

    action: str  # FailJob | FailIndex | Ignore | Count
    conditions: tuple[str, ...] = ()  # onPodConditions[].type
    exit_operator: str = ""  # onExitCodes.operator: In | NotIn ("" when the rule matches conditions)
    exit_codes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JobState:
    """A batch/v1 Job as the audit sees it: does it ask for GPUs, and how does it treat pod failures."""

    namespace: str
    name: str
    gpu_request: int = 0  # per pod, from the pod template
    backoff_limit: int = 6  # the API default
    failure_rules: tuple[FailureRule, ...] = ()
    has_failure_policy: bool = False
    active: int = 0
    done: bool = False  # a Complete or Failed condition
