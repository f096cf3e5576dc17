"""Reads what decide needs to know about a fault's surroundings: the node, its pods, their gangs, history,
and for a predicted risk the GPU fleet its proactive budget is measured against.

Which of these a fault needs, and from how far back, is `decide.situation.reads_for`'s answer; this only
reads what it says.

A read that fails degrades the situation (decide then plans from the fault alone, and `act` re-reads
the node before any write), it never drops the signal.

The node and its pods are read from the API server, never from the cluster view: they are read once per
fault, concurrently (one round trip), the plan needs every pod on the node (the view keeps only GPU pods)
and the state as it is now, not as of the last watch event. The proactive budget's fleet, a list of every
node per risk change, is read from the view while it is fresh: it only lets the plan say whether the node
will be held at warn, and `act` measures the budget again on a fresh list under its lock.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from app.config import rules
from app.decide import gates, groups, situation
from app.decide.situation import Situation
from app.domain import Fault, FaultClass, NodeState, PastFault, PodState
from app.kube import errors, port
from app.kube.viewgate import ViewGate
from app.store.journal import Journal

log = logging.getLogger(__name__)


async def situation_of(
    fault: Fault,
    *,
    kube: port.KubePort | None,
    journal: Journal | None,
    policy: rules.Policy,
    now: datetime,
    view: ViewGate | None = None,
) -> Situation:
    node_name = fault.node
    if node_name is None:
        return Situation.unknown()
    reads = situation.reads_for(fault, policy=policy, now=now)
    if kube is None or not reads.cluster:
        history, quarantines = await _past(node_name, journal=journal, reads=reads)
        return Situation.unknown(history=history)
    # The journal's reads and the cluster's at once: each row of a storm waits for the slower of them,
    # not for both in turn (one node's rows are taken one after another).
    (history, quarantines), read = await asyncio.gather(
        _past(node_name, journal=journal, reads=reads), _cluster(node_name, kube=kube)
    )
    if read is None:
        return Situation.unknown(history=history)
    node, pods = read
    group_pods = await _group_pods(pods, kube=kube, policy=policy) if reads.gangs else ()
    return Situation(
        node=node,
        pods_on_node=pods,
        group_pods=group_pods,
        history=history,
        quarantines=quarantines,
        proactive=await _proactive_fleet(kube=kube, view=view) if reads.proactive_fleet else None,
    )


async def _past(
    node: str, *, journal: Journal | None, reads: situation.Reads
) -> tuple[tuple[PastFault, ...], tuple[datetime, ...]]:
    """The node's faults and quarantines from the journal, as far back as `reads` says (none without it)."""
    if journal is None:
        return (), ()
    history: tuple[PastFault, ...] = ()
    quarantines: tuple[datetime, ...] = ()
    if reads.history_since is not None:
        history = tuple(await journal.history(node=node, since=reads.history_since))
    if reads.quarantines_since is not None:
        quarantines = tuple(await journal.quarantine_times(node=node, since=reads.quarantines_since))
    return history, quarantines


async def _cluster(node_name: str, *, kube: port.KubePort) -> tuple[NodeState, tuple[PodState, ...]] | None:
    """The node and its pods, read together (the fault-to-cordon latency is then one round trip for
    both); None when the node is gone or could not be read (decide then plans from the fault alone)."""
    try:
        node, pod_list = await asyncio.gather(kube.get_node(node_name), kube.list_pods(node=node_name))
    except errors.NotFoundError:
        return None
    except errors.KubeError as exc:
        log.warning("could not read node %s for planning (%s); planning from the fault alone", node_name, exc)
        return None
    return node, tuple(pod_list)


async def resolved_situation(fault: Fault, *, journal: Journal | None) -> Situation:
    """For a resolved soft signal: which other soft alerts still fire on its node (the condition stays)."""
    if journal is None or fault.node is None or fault.fault_class is not FaultClass.TRANSIENT:
        return Situation.unknown()
    active = await journal.active_alerts(node=fault.node)
    firing = tuple(fp for fp, cls in active if cls == FaultClass.TRANSIENT.value)
    return Situation(node=None, soft_firing=firing)


async def _proactive_fleet(*, kube: port.KubePort, view: ViewGate | None) -> gates.ProactiveFleet | None:
    """The GPU fleet for an at-risk fault's budget; None (act re-checks the budget) if it cannot be read.

    `act` lists again under a lock anyway, so this read only lets the plan (and `explain`) say whether the
    node will be held at warn: the view serves it while fresh (no waiting: a signal is not held up for
    it), a node list otherwise.
    """
    fresh = view.fresh("planning") if view is not None else None
    if fresh is not None:
        return gates.ProactiveFleet.of(fresh.nodes())
    try:
        return gates.ProactiveFleet.of(await kube.list_nodes())
    except errors.KubeError as exc:
        log.warning("could not list nodes for the proactive budget (%s); it is checked when acting", exc)
        return None


async def _group_pods(
    pods: tuple[PodState, ...], *, kube: port.KubePort, policy: rules.Policy
) -> tuple[PodState, ...]:
    """Pods of every restart-gang group that has a member on this node, wherever they run."""
    found: list[PodState] = []
    for group in groups.gangs_among(pods, policy.workloads):
        try:
            found += await kube.list_pods(
                namespace=group.namespace, label_selector=f"{group.label}={group.name}"
            )
        except errors.KubeError as exc:
            log.warning("could not list the pods of %s: %s", group.key, exc)
    return tuple(found)
