"""Typed, validated views of `rules/xid-catalog.yaml` and `rules/policy.yaml`.

The files are data an operator edits; these models reject anything they would misread (an unknown class,
a `depends` entry without a rule, a negative window) and report every problem in one `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import pydantic
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app import backoff, domain
from app.config import errors
from app.config.drain_policy import DrainMode, DrainPolicy, HardwareClass
from app.config.durations import Duration
from app.config.verification import VerificationPolicy

DependsRule = Literal["dbe-remap", "follows-others", "per-link", "recovery-action"]
Concrete = Literal["ignore", "restart-workload", "reset-gpu", "reboot-node", "replace", "transient"]
__all__ = ["DrainMode", "DrainPolicy", "HardwareClass"]  # their home is `drain_policy`; read as rules.X


_M = TypeVar("_M", bound=BaseModel)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Text an operator must fill in: blank is as good as missing.
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

# NVIDIA's immediate-action buckets ("Resolution Bucket (Immediate Action)" in its Xid catalog) and what
# each means in Sickbay's classes. An entry whose class is not its bucket's, whose bucket is not here
# (CHECK_UVM is conditional on something Sickbay cannot see), or that has no bucket, must say why in a note.
NVIDIA_ACTION_CLASSES: Mapping[str, tuple[domain.FaultClass, DependsRule | None]] = {
    "RESTART_APP": (domain.FaultClass.RESTART_WORKLOAD, None),
    "IGNORE": (domain.FaultClass.IGNORE, None),
    "RESET_GPU": (domain.FaultClass.RESET_GPU, None),
    "RESTART_BM": (domain.FaultClass.REBOOT_NODE, None),
    # The VM that owns the GPU is the node Sickbay sees.
    "RESTART_VM": (domain.FaultClass.REBOOT_NODE, None),
    # A human has to act (reseat, call NVIDIA, update software): quarantine and hand off, never auto-release.
    "CHECK_MECHANICALS": (domain.FaultClass.REPLACE, None),
    "CONTACT_SUPPORT": (domain.FaultClass.REPLACE, None),
    "UPDATE_SWFW": (domain.FaultClass.REPLACE, None),
    "WORKFLOW_XID_45": (domain.FaultClass.DEPENDS, "follows-others"),
    "WORKFLOW_XID_48": (domain.FaultClass.DEPENDS, "dbe-remap"),
    "WORKFLOW_NVLINK_ERR": (domain.FaultClass.DEPENDS, "per-link"),
    "WORKFLOW_NVLINK5_ERR": (domain.FaultClass.DEPENDS, "per-link"),
    "XID_154": (domain.FaultClass.DEPENDS, "recovery-action"),
}


def _xid_number(value: int) -> int:
    if not 0 < value < 1000:
        raise ValueError("XIDs must be between 1 and 999")
    return value


XidNumber = Annotated[int, AfterValidator(_xid_number)]


class XidEntry(_Frozen):
    """One row of the catalog. Each check is a validator of its own field, so one bad entry reports all of
    its problems together (a model validator would run only once every field is valid)."""

    fault_class: domain.FaultClass = Field(alias="class")
    name: Text
    mnemonic: Text | None = None
    # NVIDIA's bucket as NVIDIA writes it; null where NVIDIA's catalog gives none. Required, so a row says so.
    nvidia_action: Text | None
    # Where the row comes from: a document and its version.
    source: Text
    rule: DependsRule | None = Field(default=None, validate_default=True)
    # What a `depends` XID means when its context is missing (no link, no recovery action on the alert).
    fallback: Concrete | None = None
    # Why the class is what it is, where it is not simply the class of NVIDIA's bucket.
    note: Text | None = Field(default=None, validate_default=True)

    @field_validator("fault_class")
    @classmethod
    def _an_xid_class(cls, value: domain.FaultClass) -> domain.FaultClass:
        if value in (domain.FaultClass.AT_RISK, domain.FaultClass.DRIVER_MISMATCH):
            raise ValueError(f"class {value.value!r} is not an XID class")
        return value

    @field_validator("rule")
    @classmethod
    def _depends_has_rule(cls, rule: DependsRule | None, info: ValidationInfo) -> DependsRule | None:
        fault_class = info.data.get("fault_class")
        if fault_class is domain.FaultClass.DEPENDS and rule is None:
            raise ValueError("a 'depends' XID needs a 'rule'")
        if fault_class is not None and fault_class is not domain.FaultClass.DEPENDS and rule is not None:
            raise ValueError(f"'rule' only applies to class 'depends', not {fault_class.value!r}")
        return rule

    @field_validator("note")
    @classmethod
    def _differences_are_explained(cls, note: str | None, info: ValidationInfo) -> str | None:
        if note is not None or not {"fault_class", "nvidia_action", "rule"} <= info.data.keys():
            return note
        fault_class: domain.FaultClass = info.data["fault_class"]
        action: str | None = info.data["nvidia_action"]
        ours = f"{fault_class.value}" + (f"/{info.data['rule']}" if info.data["rule"] else "")
        if action is None:
            raise ValueError(f"NVIDIA gives no immediate action for it: say in a 'note' why it is {ours}")
        expected = NVIDIA_ACTION_CLASSES.get(action)
        if expected is None:
            raise ValueError(
                f"NVIDIA's bucket {action!r} has no class of its own in Sickbay: say in a 'note' why it is {ours}"
            )
        if expected != (fault_class, info.data["rule"]):
            theirs = expected[0].value + (f"/{expected[1]}" if expected[1] else "")
            raise ValueError(
                f"class {ours} differs from NVIDIA's {action} (which is {theirs}): say why in a 'note'"
            )
        return note


class XidCatalog(_Frozen):
    version: Literal[1]
    # Named source documents, for the entries' `source` (the shipped file refers to them by YAML anchor).
    sources: dict[str, Text] = Field(default_factory=dict)
    xids: dict[XidNumber, XidEntry]
    recovery_actions: dict[int, Concrete] = Field(default_factory=dict)
    # Moved to the policy (classification.unknown_xid). Refused with the fix rather than silently ignored,
    # so a cluster's old copy of the catalog cannot lose its setting unnoticed.
    default_class: None = Field(default=None, exclude=True, repr=False)

    @field_validator("default_class", mode="before")
    @classmethod
    def _moved_to_policy(cls, value: object) -> None:
        if value is not None:
            raise ValueError(
                f"'default_class' moved to rules/policy.yaml: set `classification: {{unknown_xid: {value}}}` "
                "there and delete it here"
            )

    def entry(self, xid: int) -> XidEntry | None:
        return self.xids.get(xid)


class ClassificationPolicy(_Frozen):
    # The class of an XID the catalog does not list. Always visible: rule `xid-unknown`, a reason naming the
    # XID, the sickbay_unknown_xids_total{xid} metric and a warning log once per node and XID.
    unknown_xid: Concrete = "transient"
    link_repeats: int = Field(default=3, ge=1)
    link_window: Duration = timedelta(hours=1)
    context_window: Duration = timedelta(minutes=10)


class RetryPolicy(_Frozen):
    initial: Duration = timedelta(seconds=30)
    factor: float = Field(default=2.0, ge=1.0)
    max: Duration = timedelta(minutes=30)

    @property
    def waits(self) -> backoff.Backoff:
        """The policy as the one backoff: `initial` growing by `factor` up to `max`, no jitter."""
        return backoff.Backoff(
            base=self.initial.total_seconds(), factor=self.factor, cap=self.max.total_seconds()
        )

    @model_validator(mode="after")
    def _ordered(self) -> RetryPolicy:
        if self.initial > self.max:
            raise ValueError("retry.initial must not exceed retry.max")
        return self


class EscalationPolicy(_Frozen):
    window: Duration = timedelta(hours=24)
    distinct_workloads: int = Field(default=2, ge=2)
    repeats: int = Field(default=3, ge=1)
    escalate_to: Literal["reset-gpu", "reboot-node", "replace"] = "reset-gpu"


class TransientPolicy(_Frozen):
    """Soft and unknown signals: never a restart. Re-checked with the retry backoff while they fire; made
    visible on the node (condition and Event) when they last or repeat; hardware only when said here."""

    # Still firing this long after it started: the node condition is raised.
    persist_after: Duration = timedelta(minutes=15)
    # Or this many separate firings of the same alert on the same GPU within `escalation.window`.
    repeats: int = Field(default=3, ge=2)
    # The node condition's type (status True while a soft signal lasts).
    condition: str = Field(default="GpuSoftFault", pattern=r"^[A-Za-z][A-Za-z0-9]{0,62}$")
    # A raised condition clears when its alert resolves, or once no soft signal has fired on the node for
    # this long (agent events never resolve).
    condition_ttl: Duration = timedelta(hours=1)
    # null: visibility only. A class sends a lasting or repeating soft signal to the hardware track.
    escalate_to: HardwareClass | None = None


GroupPolicy = Literal["requeue", "restart-gang", "leave-to-controller"]


class WorkloadPolicy(_Frozen):
    gang_labels: dict[str, str] = Field(
        default_factory=lambda: {
            "jobset.sigs.k8s.io/jobset-name": "jobset",
            "training.kubeflow.org/job-name": "kubeflow",
            "leaderworkerset.sigs.k8s.io/name": "leaderworkerset",
            "batch.kubernetes.io/job-name": "job",
        }
    )
    group_policy: dict[str, GroupPolicy] = Field(default_factory=dict)
    default_policy: GroupPolicy = "requeue"

    def policy_for(self, group_kind: str) -> GroupPolicy:
        return self.group_policy.get(group_kind, self.default_policy)


class BudgetPolicy(_Frozen):
    pool_label: str = "sickbay.io/pool"
    max_fraction: float = Field(default=0.10, gt=0, le=1)
    max_nodes: int = Field(default=20, ge=1)
    per_pool_max_fraction: float = Field(default=0.25, gt=0, le=1)
    per_pool_max_nodes: int = Field(default=10, ge=1)
    # The proactive budget: GPU nodes that may carry `sickbay.io/at-risk=act:NoSchedule` at once.
    proactive_max_fraction: float = Field(default=0.05, ge=0, le=1)
    proactive_max_nodes: int = Field(default=10, ge=1)
    quarantines_per_minute: int = Field(default=30, ge=1)
    calm_period: Duration = timedelta(minutes=15)
    hysteresis_nodes: int = Field(default=2, ge=0)
    attempts_per_week: int = Field(default=3, ge=1)


class Remediator(_Frozen):
    kind: domain.RemediatorKind = "annotate"
    timeout: Duration = timedelta(hours=1)
    # custom-resource: a YAML template with {node}, {action}, {fault} placeholders.
    template: str | None = None
    # webhook: where to POST the request.
    url: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> Remediator:
        if self.kind == "custom-resource" and not self.template:
            raise ValueError("a 'custom-resource' remediator needs a 'template'")
        if self.kind == "webhook" and not self.url:
            raise ValueError("a 'webhook' remediator needs a 'url'")
        return self


def _default_remediation() -> dict[HardwareClass, Remediator]:
    return {
        "reset-gpu": Remediator(kind="annotate", timeout=timedelta(hours=1)),
        "reboot-node": Remediator(kind="annotate", timeout=timedelta(hours=2)),
        "replace": Remediator(kind="none"),
    }


class ReleasePolicy(_Frozen):
    healthy_delay: Duration = timedelta(minutes=10)
    allocatable_grace: Duration = timedelta(minutes=5)


class ShadowPolicy(_Frozen):
    """When the proactive ladder may act on a fleet, and when it goes back to recording only (shadow).

    A model is a claim about the fleets it was trained and judged on. On a fleet where the current model
    version has not been validated the ladder runs in shadow: it scores and journals what it would have
    done, and writes nothing. It leaves shadow when a backtest over this fleet's own recent history keeps
    the false-alarm rate within `max_false_alarms_per_1000_node_days`, or when an operator says so; the
    runtime guard sends an acting ladder back when it flags too much or holds the budget full too long.
    """

    # The backtest's limit. 1 per 1,000 node-days is the acceptance bar of issue 12 for held-out fleets.
    max_false_alarms_per_1000_node_days: float = Field(default=1.0, ge=0)
    # The backtest replays the last `history` of the fleet's Prometheus; it judges nothing with fewer than
    # `min_history` of scored history (one false alarm in a few node-days says little either way).
    history: Duration = timedelta(days=14)
    min_history: Duration = timedelta(days=7)
    # While in shadow for want of a passing backtest, it runs again this often (and after a model loads).
    revalidate_every: Duration = timedelta(hours=24)
    # Runtime guard: back to shadow when more than this share of the scored GPUs is flagged (warn or act)
    # in one cycle, and more than `min_flagged_gpus` of them, so one real failure never trips a small fleet.
    max_flagged_fraction: float = Field(default=0.02, gt=0, le=1)
    min_flagged_gpus: int = Field(default=3, ge=0)
    # ... or when the proactive budget stays full this long. A true alarm is followed by its failure within
    # the model's horizon (24 h), which moves the node to the hardware budget and frees its slot.
    max_budget_full: Duration = timedelta(hours=24)

    @model_validator(mode="after")
    def _ordered(self) -> ShadowPolicy:
        if self.min_history > self.history:
            raise ValueError("prediction.shadow.min_history must not exceed prediction.shadow.history")
        return self


class PredictionPolicy(_Frozen):
    """The proactive ladder: which predicted risk taints a node, how a level is held on the way down, how far
    the `act` step goes. Thresholds left null are the model card's (chosen for a target precision)."""

    warn: float | None = Field(default=None, gt=0, lt=1)
    act: float | None = Field(default=None, gt=0, le=1)
    # A level drops only after `clear_after` consecutive scoring cycles below its threshold less this
    # fraction of it, so a score hovering at a threshold does not flap the taint.
    clear_margin: float = Field(default=0.1, ge=0, lt=1)
    clear_after: int = Field(default=3, ge=1)
    # An unchanged warn/act level is signalled again this often: it promotes a node the proactive budget
    # held at warn once a slot frees, and heals a signal lost in a failover. Repeats change nothing else.
    resend: Duration = timedelta(minutes=30)
    # At `act`: ask the running GPU workloads to checkpoint (Events on their pods and owners) ...
    checkpoint_events: bool = True
    # ... and evict them as well only when this is true; otherwise NoSchedule just lets them finish.
    drain: bool = False
    shadow: ShadowPolicy = ShadowPolicy()

    @model_validator(mode="after")
    def _ordered(self) -> PredictionPolicy:
        if self.warn is not None and self.act is not None and self.warn > self.act:
            raise ValueError("prediction.warn must not exceed prediction.act")
        return self


class Policy(_Frozen):
    version: Literal[1]
    alerts: dict[str, domain.FaultClass] = Field(default_factory=dict)
    classification: ClassificationPolicy = ClassificationPolicy()
    retry: RetryPolicy = RetryPolicy()
    escalation: EscalationPolicy = EscalationPolicy()
    transient: TransientPolicy = TransientPolicy()
    workloads: WorkloadPolicy = WorkloadPolicy()
    drain: DrainPolicy = DrainPolicy()
    budgets: BudgetPolicy = BudgetPolicy()
    remediation: dict[HardwareClass, Remediator] = Field(default_factory=_default_remediation)
    release: ReleasePolicy = ReleasePolicy()
    verification: VerificationPolicy = VerificationPolicy()
    prediction: PredictionPolicy = PredictionPolicy()

    def remediator(self, fault_class: domain.FaultClass) -> Remediator:
        found: Remediator | None = self.remediation.get(fault_class.value)  # type: ignore[call-overload]
        return found if found is not None else Remediator(kind="none")


def load_catalog(path: Path) -> XidCatalog:
    return _load(path, XidCatalog)


def load_policy(path: Path) -> Policy:
    return _load(path, Policy)


def _load(path: Path, model: type[_M]) -> _M:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{path} is not valid YAML: {exc}") from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise errors.describe(exc, source=path) from None
