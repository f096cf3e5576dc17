"""What `act` writes on a freshly read node, decided in decide: the soft-fault condition
(`soft.condition_write`) and the at-risk taint's removal (`proactive.clear_step`).

Table-driven over the node as read; `now` is passed in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.decide import footprint, proactive, soft
from app.domain import Condition, NodePatch, NodeState, RemediationState, Taint, freeze_mapping

NOW = datetime.now(UTC)
KIND = "GpuSoftFault"


def node(
    *,
    condition: tuple[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    labels: dict[str, str] | None = None,
) -> NodeState:
    conditions = (
        (
            Condition(
                type=KIND, status=condition[0], reason=condition[1], last_transition=NOW - timedelta(hours=1)
            ),
        )
        if condition
        else ()
    )
    return NodeState(
        name="n1",
        resource_version="3",
        taints=taints,
        labels=freeze_mapping(labels or {}),
        conditions=conditions,
    )


OPTED_OUT = {footprint.MANAGED: "false"}


@pytest.mark.parametrize(
    ("the_node", "raise_it", "reason", "expected"),
    [
        # Raise: a condition not there, False, or True for another reason is (re)written.
        (node(), True, "XidStorm", ("True", "XidStorm")),
        (node(condition=("False", "NoSoftFault")), True, "XidStorm", ("True", "XidStorm")),
        (node(condition=("True", "PcieReplays")), True, "XidStorm", ("True", "XidStorm")),
        (node(), True, "", ("True", "SoftFault")),  # no reason given: the default one
        # ... but one already True for the same reason is left alone (no second Event).
        (node(condition=("True", "XidStorm")), True, "XidStorm", f"{KIND} is already True"),
        (node(condition=("True", "SoftFault")), True, "", f"{KIND} is already True"),
        # Clear: only a raised condition is cleared.
        (node(condition=("True", "XidStorm")), False, "", ("False", "NoSoftFault")),
        (node(condition=("False", "NoSoftFault")), False, "", f"{KIND} was not raised"),
        (node(), False, "", f"{KIND} was not raised"),
        # An opted-out node is never written, either way.
        (node(labels=OPTED_OUT), True, "XidStorm", "node opted out (sickbay.io/managed=false)"),
        (
            node(condition=("True", "X"), labels=OPTED_OUT),
            False,
            "",
            "node opted out (sickbay.io/managed=false)",
        ),
    ],
)
def test_soft_condition_write(
    the_node: NodeState, raise_it: bool, reason: str, expected: tuple[str, str] | str
) -> None:
    got = soft.condition_write(
        the_node, kind=KIND, raise_it=raise_it, reason=reason, message="why\nso", now=NOW
    )
    if isinstance(expected, str):
        assert got == soft.Unchanged(expected)
        return
    assert isinstance(got, Condition)
    assert (got.type, got.status, got.reason) == (KIND, *expected)
    assert got.last_transition == NOW
    assert "\n" not in got.message


AT_RISK = Taint(footprint.AT_RISK, "warn", "PreferNoSchedule")
QUARANTINED = Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")
OPERATORS = Taint("example.com/maintenance", "true", "NoSchedule")


@pytest.mark.parametrize(
    ("the_node", "expected"),
    [
        # The at-risk taint goes, any other taint stays; a node only at risk loses its state label too.
        (node(taints=(AT_RISK, OPERATORS)), (OPERATORS,)),
        (node(taints=(AT_RISK,), labels={footprint.STATE: RemediationState.AT_RISK.value}), ()),
        # Quarantined for a fault: the hardware track owns it (its release removes the at-risk taint).
        (
            node(taints=(QUARANTINED, AT_RISK)),
            "quarantined for reset-gpu: left alone, its release removes the at-risk taint",
        ),
        # Nothing to remove.
        (node(taints=(OPERATORS,)), "no at-risk taint to remove"),
        (node(), "no at-risk taint to remove"),
    ],
)
def test_clear_step(the_node: NodeState, expected: tuple[Taint, ...] | str) -> None:
    got = proactive.clear_step(the_node)
    if isinstance(expected, str):
        assert got == proactive.LeaveAlone(expected)
        return
    assert isinstance(got, NodePatch)
    assert got.taints == expected
    assert got.resource_version == "3", "the write is pinned to the read"
    only_at_risk = the_node.state is RemediationState.AT_RISK
    assert got.labels == (((footprint.STATE, ""),) if only_at_risk else ())
