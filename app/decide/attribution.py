"""Which pod a GPU signal is about, confirmed against the cluster before anything is done to it.

The labels on an alert are a claim, not a fact: under prometheus-operator's scrape `pod` is the exporter,
a stale series can name a pod that is gone, a forged or mislabelled alert can name any pod anywhere.
The workload track acts only on a pod the cluster shows on the signal's node, requesting a GPU, and not a
DaemonSet, mirror or excluded-namespace pod; the delete then carries that pod's UID. When the signal
names no pod, the only GPU pod on the node is unambiguous (a whole-node job); several are a guess, and
Sickbay does not guess. Pure: the caller reads the node's pods into the Situation.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import rules
from app.decide.situation import Situation
from app.domain import PodRef, PodState, Signal

AGENT = "agent"


@dataclass(frozen=True, slots=True)
class Attribution:
    """The pod a signal is about: `pod` when the cluster confirmed it, and a sentence saying how (or why not)."""

    pod: PodState | None
    named: PodRef | None
    how: str

    @property
    def confirmed(self) -> bool:
        return self.pod is not None


def refusal(pod: PodState, policy: rules.DrainPolicy) -> str | None:
    """Why the workload track must never restart or evict `pod`, or None when it may."""
    if pod.is_daemonset:
        return "is a DaemonSet pod (a node agent, not a workload)"
    if pod.is_mirror:
        return "is a static (mirror) pod"
    if pod.namespace in policy.excluded_namespaces:
        return f"is in the excluded namespace {pod.namespace}"
    if pod.gpu_request <= 0:
        return "requests no GPU"
    if pod.terminal:
        return f"has already finished ({pod.phase})"
    if pod.deleting:
        return "is already being deleted"
    return None


def _source(signal: Signal) -> str:
    if signal.pod_label == AGENT:
        return "named by the node agent from the kubelet's PodResources"
    return f"named by the alert's `{signal.pod_label or 'pod'}` label"


def attribute(signal: Signal, situation: Situation, policy: rules.DrainPolicy) -> Attribution:
    """The confirmed pod on the signal's GPU, or none with the reason."""
    node = signal.node
    named = signal.pod
    if situation.node is None:
        return Attribution(
            None,
            named,
            "the cluster was not read, so no pod on the GPU can be confirmed: nothing is restarted",
        )
    if named is not None:
        where = _source(signal)
        pod = next(
            (p for p in situation.pods_on_node if (p.namespace, p.name) == (named.namespace, named.name)),
            None,
        )
        if pod is None:
            return Attribution(
                None, named, f"{named} ({where}) is not running on {node}: left alone, nothing is guessed"
            )
        why = refusal(pod, policy)
        if why is not None:
            return Attribution(None, named, f"{named} ({where}) {why}: never restarted or evicted")
        return Attribution(pod, named, f"{named} ({where}), confirmed on {node}")
    candidates = [p for p in situation.pods_on_node if refusal(p, policy) is None]
    if len(candidates) == 1:
        only = candidates[0]
        return Attribution(only, None, f"{only.ref}: the only GPU pod on {node}")
    gpu = f"GPU {signal.gpu}" if signal.gpu is not None else "the GPU"
    if not candidates:
        return Attribution(None, None, f"the signal names no pod and {node} runs no GPU pod")
    return Attribution(
        None,
        None,
        f"the signal names no pod and {len(candidates)} GPU pods run on {node}; which one uses {gpu} is "
        "unknown, so none is picked",
    )
