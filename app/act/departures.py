"""Waiting until evicted pods are really gone, not merely accepted for eviction.

An accepted eviction (201) only marks the pod for deletion: it stays Terminating while the kubelet stops
it, for up to its `terminationGracePeriodSeconds` (a training job spends them on its checkpoint), and only
the kubelet's final delete removes it. So the drain polls the node's pods (one LIST per poll, whatever the
number of pods) until each one it moved is gone: absent, or its name taken by a pod with another UID (a
StatefulSet's replacement is not the pod that was evicted). Each pod is waited for until its own
`wait_until`, on the event loop's clock; one still there then is reported, never assumed gone.

The polls read the API server, never the cluster view: this is the check that the node is empty before it
is handed to a reboot or a replacement, and a cache that lags by one event (or whose watch is down) would
say a pod is gone while kube-apiserver still holds it Terminating for its grace period ("Termination of
Pods", https://kubernetes.io/docs/concepts/workloads/pods/pod-termination/: only once the grace period has
expired is the Pod deleted from the API server). Its cost is one LIST on a field selector per poll of a
node being drained, not a fleet-wide read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from app import backoff
from app.domain import PodRef
from app.kube import errors, port

log = logging.getLogger("app.act")
FIRST_POLL_S = 0.25
MAX_POLL_S = 5.0
POLLS = backoff.Backoff(base=FIRST_POLL_S, cap=MAX_POLL_S)


@dataclass(frozen=True, slots=True)
class Departure:
    """A pod whose eviction or deletion was accepted, and how long to wait for it to go."""

    pod: PodRef
    uid: str
    wait_until: float  # the event loop's clock
    grace_period_s: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod.namespace, self.pod.name)


async def wait_until_gone(
    kube: port.KubePort,
    node: str,
    departures: Sequence[Departure],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> dict[PodRef, str]:
    """Poll `node`'s pods until every departure is gone or past its `wait_until`; returns those still there.

    The value says what was seen last (Terminating for how long, or why the pods could not be listed).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    pending = {d.key: d for d in departures}
    lingering: dict[PodRef, str] = {}
    polls = 0
    unlisted = ""
    while pending:
        polls += 1
        try:
            present = {(p.namespace, p.name): p.uid for p in await kube.list_pods(node=node)}
            unlisted = ""
        except errors.KubeError as exc:  # keep waiting: the next poll may get through
            log.warning("cannot list the pods on %s to see whether the drained ones left: %s", node, exc)
            present = None
            unlisted = str(exc)
        if present is not None:
            for key, departure in list(pending.items()):
                uid = present.get(key)
                if uid is None or (departure.uid and uid != departure.uid):
                    del pending[key]
        now = loop.time()
        for key, departure in list(pending.items()):
            if now >= departure.wait_until:
                lingering[departure.pod] = _why(departure, waited=now - started, unlisted=unlisted)
                del pending[key]
        if not pending:
            break
        next_end = min(d.wait_until for d in pending.values())
        await sleep(max(0.0, min(POLLS.delay(polls), next_end - now)))
    return lingering


def _why(departure: Departure, *, waited: float, unlisted: str) -> str:
    if unlisted:
        return f"could not confirm it left: {unlisted}"
    return (
        f"still Terminating {waited:.0f}s after its eviction was accepted "
        f"(grace period {departure.grace_period_s}s; is the kubelet on the node stopping it?)"
    )
