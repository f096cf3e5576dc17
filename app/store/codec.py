"""JSON round-trips for the domain values the journal keeps (signals, plans), so history reloads exactly.

The shapes are TypedDicts read by pydantic `TypeAdapter`s: the domain stays plain dataclasses (no pydantic
in `app.domain`), and these say only how a field is written. The format is what the journal and the inbox
already hold, byte for byte: times in Python's own ISO form (`+00:00`, not pydantic's `Z`), label and
parameter pairs as objects, a pod as `{namespace, name, container}`, keys sorted, no spaces.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, NotRequired

from pydantic import BeforeValidator, PlainSerializer, PlainValidator, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from app.domain import (
    Action,
    ActionKind,
    ActionParams,
    FaultClass,
    Pairs,
    Plan,
    PodRef,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)
from app.store import action_params


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _pairs(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


# Parsed and written by the standard library, as the rows already journaled were.
Time = Annotated[datetime, PlainValidator(_time), PlainSerializer(datetime.isoformat, return_type=str)]
# A domain value's sorted (key, value) pairs, as a JSON object.
PairsObject = Annotated[Pairs, BeforeValidator(_pairs), PlainSerializer(dict, return_type=dict[str, str])]


# An action's typed parameters, as the string-valued object the journal has always held.
ParamsObject = Annotated[
    ActionParams | None, PlainSerializer(action_params.to_object, return_type=dict[str, str])
]


class SignalShape(TypedDict):
    source: SignalSource
    fingerprint: str
    status: SignalStatus
    name: str
    starts_at: Time
    received_at: Time
    node: NotRequired[str | None]
    gpu: NotRequired[int | None]
    uuid: NotRequired[str | None]
    xid: NotRequired[int | None]
    pod: NotRequired[PodRef | None]
    pod_label: NotRequired[str | None]
    ends_at: NotRequired[Time | None]
    labels: NotRequired[PairsObject]
    annotations: NotRequired[PairsObject]


class ActionShape(TypedDict):
    kind: ActionKind
    track: Track
    reason: str
    node: str | None
    pod: PodRef | None
    params: ParamsObject
    not_before: Time | None


class PlanShape(TypedDict):
    """What the journal keeps of a plan (its fault is journaled in its own columns)."""

    summary: str
    decided_at: Time
    workload: str | None
    actions: list[ActionShape]
    # What a plan in shadow mode would have done; written only when there is something.
    shadowed: NotRequired[list[ActionShape]]


_SIGNAL = TypeAdapter(SignalShape)
_PLAN = TypeAdapter(PlanShape)


def _shallow(value: Signal | Action | Plan, shape: type) -> dict[str, Any]:
    """The fields `shape` names, in its order, unconverted (nested values stay domain values)."""
    return {name: getattr(value, name) for name in shape.__annotations__}


def signal_to_dict(signal: Signal) -> dict[str, Any]:
    encoded: dict[str, Any] = _SIGNAL.dump_python(_shallow(signal, SignalShape), mode="json")  # type: ignore[arg-type]
    return encoded


def signal_from_dict(data: dict[str, Any]) -> Signal:
    return Signal(**_SIGNAL.validate_python(data))


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    shallow = _shallow(plan, PlanShape)
    shallow["actions"] = [_shallow(a, ActionShape) for a in plan.actions]
    if plan.shadowed:
        shallow["shadowed"] = [_shallow(a, ActionShape) for a in plan.shadowed]
    else:
        del shallow["shadowed"]
    encoded: dict[str, Any] = _PLAN.dump_python(shallow, mode="json")  # type: ignore[arg-type]
    return encoded


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def signal_json(signal: Signal) -> str:
    return dumps(signal_to_dict(signal))


def action_from_dict(data: dict[str, Any], *, fault_class: FaultClass | None = None) -> Action:
    """A journaled action, from a row of any age (see `action_params.from_object` for `fault_class`)."""
    kind = ActionKind(data["kind"])
    pod = data.get("pod")
    not_before = data.get("not_before")
    return Action(
        kind=kind,
        track=Track(data["track"]),
        reason=str(data.get("reason", "")),
        node=data.get("node"),
        pod=PodRef(pod["namespace"], pod["name"], pod.get("container")) if pod else None,
        params=action_params.from_object(kind, data.get("params") or {}, fault_class=fault_class),
        not_before=_time(not_before) if not_before else None,
    )
