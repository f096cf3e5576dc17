"""An action's typed parameters in the journal's form: the string-valued JSON object every plan row holds.

Rows written before the parameters were typed stored `("cordon", "false")`-style pairs, some with keys
nothing read (a restart's attempt and workload, a gang restart's group, the at-risk taint's effect); they
decode here with the same defaults act applied to them then. New rows keep the same keys and string
values, so an operator's script reading `plan.actions[].params` sees no change (less the unread keys).
A remediator's template and URL are policy, not part of the record (a URL may carry a token): they are
not written, and a decoded remediation names only the remediator's kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.domain import (
    PARAMS,
    ActionKind,
    ActionParams,
    AtRiskParams,
    CheckpointParams,
    ConditionParams,
    FaultClass,
    OwnerRef,
    QuarantineParams,
    RecheckParams,
    RemediationParams,
    RemediatorKind,
    RequeueParams,
    RestartParams,
    RiskLevel,
)

_REMEDIATORS: tuple[RemediatorKind, ...] = ("none", "annotate", "custom-resource", "webhook")


def to_object(params: ActionParams | None) -> dict[str, str]:
    """The journal's object for `params`; empty for an action that takes none."""
    match params:
        case None:
            return {}
        case QuarantineParams(fault_class=cls, cordon=cordon):
            return {"class": cls.value, "cordon": "true" if cordon else "false"}
        case RestartParams(uid=uid):
            return {"uid": uid}
        case RemediationParams(remediation=cls, remediator=kind):
            return {"remediation": cls.value, "remediator": kind}
        case AtRiskParams(level=level, held=held):
            return {"level": level.value, **({"held": held} if held else {})}
        case CheckpointParams(owner=None, uid=uid):
            return {"uid": uid}
        case CheckpointParams(owner=OwnerRef() as owner, namespace=namespace):
            return {
                "kind": owner.kind,
                "name": owner.name,
                "namespace": namespace,
                "uid": owner.uid,
                "api_version": owner.api_version,
            }
        case RecheckParams(check=check):
            return {"check": str(check)}
        case ConditionParams(condition=condition, reason=reason):
            return {"condition": condition, **({"reason": reason} if reason else {})}
        case RequeueParams(owner=owner, namespace=namespace, queue=queue):
            return {
                "kind": owner.kind,
                "name": owner.name,
                "namespace": namespace,
                "uid": owner.uid,
                "api_version": owner.api_version,
                "queue": queue,
            }
    raise TypeError(f"no journal form for {params!r}")


def from_object(
    kind: ActionKind, data: Mapping[str, str], *, fault_class: FaultClass | None = None
) -> ActionParams | None:
    """The typed parameters of a journaled `kind` action, from a row of any age.

    `fault_class` is the fault's own class (journaled in its own column): the class of a quarantine or a
    remediation whose row does not name one, as act took it then. Raises ValueError for a row that
    cannot be read as `kind`'s parameters."""
    wanted = PARAMS.get(kind)
    try:
        if wanted is QuarantineParams:
            return QuarantineParams(_class(data, "class", fault_class), cordon=data.get("cordon") != "false")
        if wanted is RestartParams:
            return RestartParams(data.get("uid", ""))
        if wanted is RemediationParams:
            kind_ = data.get("remediator", "none")
            if kind_ not in _REMEDIATORS:
                raise ValueError(f"unknown remediator {kind_!r}")
            return RemediationParams(_class(data, "remediation", fault_class), remediator=kind_)
        if wanted is AtRiskParams:
            return AtRiskParams(
                RiskLevel(data.get("level") or RiskLevel.WARN.value), held=data.get("held", "")
            )
        if wanted is CheckpointParams:
            if "kind" not in data:
                return CheckpointParams(uid=data.get("uid", ""))
            owner = OwnerRef(
                kind=data["kind"],
                name=data.get("name", ""),
                uid=data.get("uid", ""),
                api_version=data.get("api_version", ""),
            )
            return CheckpointParams(owner=owner, namespace=data.get("namespace", ""))
        if wanted is RecheckParams:
            return RecheckParams(int(data.get("check") or "1"))
        if wanted is ConditionParams:
            return ConditionParams(data["condition"], reason=data.get("reason", ""))
        if wanted is RequeueParams:
            owner = OwnerRef(
                kind=data["kind"],
                name=data["name"],
                uid=data.get("uid", ""),
                api_version=data.get("api_version", ""),
            )
            return RequeueParams(owner, namespace=data["namespace"], queue=data.get("queue", ""))
    except KeyError as exc:
        raise ValueError(f"a {kind.value} row has no {exc.args[0]!r}") from None
    return None


def _class(data: Mapping[str, str], key: str, fallback: FaultClass | None) -> FaultClass:
    raw = data.get(key)
    if raw:
        return FaultClass(raw)
    if fallback is None:
        raise KeyError(key)
    return fallback
