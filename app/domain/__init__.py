"""The values that flow through Sickbay's loop: signal → fault → plan → outcome.

Everything here is a frozen dataclass or an enum built from the standard library only, so the pure core
(`classify`, `decide`, `predict.features`) can share these types without importing any I/O. Nothing in this
package may import another `app` module or a third-party package. Import the names from `app.domain`; the
modules say where each lives: `faults` (what is observed and what it means), `cluster` (nodes and pods as
decide sees them), `actions` (what is decided and what came of it),
`identity` (who a caller is, as the API server vouches), `workloads` (what an audit reads of pods and Jobs),
`jobs` (a verification Job's run and how it ended), `queueing` (Kueue's Workload).
"""

from app.domain.actions import (
    PARAMS,
    Action,
    ActionKind,
    ActionParams,
    AtRiskParams,
    CheckpointParams,
    ConditionParams,
    Outcome,
    OutcomeStatus,
    Plan,
    QuarantineParams,
    RecheckParams,
    RemediationParams,
    RemediatorKind,
    RequeueParams,
    RestartParams,
    Track,
)
from app.domain.cluster import (
    Condition,
    NodePatch,
    NodeState,
    OwnerRef,
    PodState,
    RemediationState,
    Taint,
)
from app.domain.faults import (
    HARDWARE_CLASSES,
    Fault,
    FaultClass,
    Lane,
    Pairs,
    PastFault,
    PodRef,
    Risk,
    RiskLevel,
    Signal,
    SignalSource,
    SignalStatus,
    freeze_mapping,
    lookup,
)
from app.domain.identity import AccessRequest, AccessReview, TokenReview, UserInfo
from app.domain.jobs import JobRun
from app.domain.queueing import JOB_UID_LABEL, QUEUE_NAME_LABEL, WorkloadState
from app.domain.workloads import FailureRule, JobState, PodFacts, Toleration

__all__ = [
    "HARDWARE_CLASSES",
    "JOB_UID_LABEL",
    "PARAMS",
    "QUEUE_NAME_LABEL",
    "AccessRequest",
    "AccessReview",
    "Action",
    "ActionKind",
    "ActionParams",
    "AtRiskParams",
    "CheckpointParams",
    "Condition",
    "ConditionParams",
    "FailureRule",
    "Fault",
    "FaultClass",
    "JobRun",
    "JobState",
    "Lane",
    "NodePatch",
    "NodeState",
    "Outcome",
    "OutcomeStatus",
    "OwnerRef",
    "Pairs",
    "PastFault",
    "Plan",
    "PodFacts",
    "PodRef",
    "PodState",
    "QuarantineParams",
    "RecheckParams",
    "RemediationParams",
    "RemediationState",
    "RemediatorKind",
    "RequeueParams",
    "RestartParams",
    "Risk",
    "RiskLevel",
    "Signal",
    "SignalSource",
    "SignalStatus",
    "Taint",
    "TokenReview",
    "Toleration",
    "Track",
    "UserInfo",
    "WorkloadState",
    "freeze_mapping",
    "lookup",
]
