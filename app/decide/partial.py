"""Which pods a hardware fault's drain moves: the policy's mode per class, and for a partial drain the
pods on the faulty GPU (and its NVLink peers) only, the node's other work left running.

A GPU reset (`nvidia-smi -r -i N`, NVML's nvmlDeviceResetGpu) needs every process on that GPU gone, not
on the node: the other GPUs keep running. So for `reset-gpu` the node can keep its healthy workloads, under
the NoSchedule taint (nothing new lands while the reset is pending) but not cordoned. Where the reset
tears down the GPU's NVLinks, a job doing peer-to-peer traffic over them fails with it: NVIDIA's Fabric
Manager user guide (docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide, "GPU Reset") has the
GPU's NVLinks torn down and retrained by the reset on NVSwitch systems, and NVML names recovery actions
that drain peer-to-peer traffic before a reset (nvmlDeviceGpuRecoveryAction_t:
GPU_RECOVERY_ACTION_DRAIN_P2P, GPU_RECOVERY_ACTION_DRAIN_AND_RESET). The policy's `drain.peers` then
moves the pods on the GPU's NVLink domain too.

A partial drain needs a reliable GPU→pod fact: the pod the signal names on its GPU (the agent's
PodResources lookup, or the alert's `exported_pod`/device labels), confirmed on the node by
`attribution`. Without one, or where several pods may share a GPU (time-slicing, MPS), or where a peer
GPU's holder is unknown, the drain falls back to every GPU pod and says why. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.config import rules
from app.decide import attribution, evictions, footprint
from app.decide.situation import Situation
from app.domain import Fault, NodeState, PodRef, PodState

# GPU Feature Discovery's node labels for a shared GPU (NVIDIA k8s-device-plugin, docs/gpu-feature-discovery:
# `nvidia.com/gpu.replicas` is the physical count times the replicas when a sharing strategy is on;
# `nvidia.com/gpu.sharing-strategy` is `none`, `time-slicing` or `mps`).
REPLICAS = "nvidia.com/gpu.replicas"
SHARING = "nvidia.com/gpu.sharing-strategy"
_SHOWN = 3  # pods named in a sentence; the rest are counted


@dataclass(frozen=True, slots=True)
class EvictionSet:
    """The pods a drain moves and the drainable pods it keeps running, with the sentence saying why.

    `mode` is the mode applied: the policy's, or `gpu-pods` when a partial drain fell back (`fallback`
    then holds the reason)."""

    mode: rules.DrainMode
    evict: tuple[PodState, ...]
    kept: tuple[PodState, ...] = ()
    why: str = ""
    fallback: str = ""

    @property
    def partial(self) -> bool:
        return self.mode == "partial"


def choose(fault: Fault, situation: Situation, policy: rules.DrainPolicy) -> EvictionSet:
    """The eviction set of `fault`'s drain on its node, as the policy's mode for its class says."""
    mode = policy.mode_for(fault.fault_class)
    if mode != "partial":
        return _whole(situation, policy, mode, why=f"policy: {fault.fault_class.value} drains {_what(mode)}")
    refused = _no_partial(fault, situation, policy)
    if isinstance(refused, str):
        return _fell_back(situation, policy, refused)
    found, gpus = refused
    gpu = fault.signal.gpu
    assert gpu is not None  # _no_partial refuses a signal without one
    holders = {**_known_holders(situation), gpu: found.ref}
    peers = _peers(gpu, situation, policy) if policy.peers else ()
    unknown = [g for g in peers if g not in holders]
    candidates = _candidates(situation, policy, "gpu-pods")
    evict_refs = {found.ref} | {holders[g] for g in peers if g in holders}
    if unknown and any(p.ref not in evict_refs for p in candidates):
        which = ", ".join(str(g) for g in unknown)
        return _fell_back(
            situation,
            policy,
            f"the reset of GPU {gpu} also resets its NVLink peers (policy: peers) and which pods hold "
            f"GPU(s) {which} is unknown",
        )
    evict = tuple(p for p in candidates if p.ref in evict_refs)
    kept = tuple(p for p in candidates if p.ref not in evict_refs)
    on = f"GPU {gpu}" + (f" and its NVLink peers {', '.join(str(g) for g in peers)}" if peers else "")
    moved = _names(evict) or "no pod"
    why = f"partial drain: evict {moved} (on {on}; {gpus})"
    if kept:
        why += f"; keep {_names(kept)} running: not on {on}, and the node is tainted, not cordoned"
    return EvictionSet(mode="partial", evict=evict, kept=kept, why=why)


def _no_partial(fault: Fault, situation: Situation, policy: rules.DrainPolicy) -> str | tuple[PodState, str]:
    """Why the fault's GPU→pod mapping is not reliable enough for a partial drain, or the confirmed pod on
    its GPU and how it was found."""
    signal = fault.signal
    node = situation.node
    if node is None:
        return "the cluster was not read, so no pod on the GPU can be confirmed"
    if signal.gpu is None:
        return "the signal names no GPU index"
    if footprint.partially_drained(node) and not resetting(node, signal.gpu):
        held = footprint.fault_of(node).get("gpu")
        return f"GPU {held} of the node is already held for a reset, so its other GPUs are not all healthy"
    shared = _shared(situation)
    if shared:
        return shared
    found = attribution.attribute(signal, situation, policy)
    if found.pod is None:
        return f"no reliable GPU→pod mapping: {found.how}"
    return found.pod, found.how


def resetting(node: NodeState, gpu: int | None) -> bool:
    """The node is under a partial drain for this very GPU's reset (a repeat of its fault)."""
    return (
        footprint.partially_drained(node) and gpu is not None and footprint.fault_of(node).get("gpu") == gpu
    )


def _shared(situation: Situation) -> str:
    node = situation.node
    if node is None:
        return ""
    strategy = node.label(SHARING)
    if strategy not in (None, "", "none"):
        return f"the node's GPUs are shared ({SHARING}={strategy}): several pods may use one GPU"
    replicas = node.label(REPLICAS)
    if replicas is not None and replicas.isdigit() and 0 < node.gpu_capacity < int(replicas):
        return f"the node's GPUs are shared ({REPLICAS}={replicas}): several pods may use one GPU"
    return ""


def _known_holders(situation: Situation) -> Mapping[int, PodRef]:
    """GPU index → the pod holding it, for the GPUs other than the signal's that the situation knows."""
    return {gpu: PodRef(namespace=pod.namespace, name=pod.name) for gpu, pod in situation.gpu_holders}


def _peers(gpu: int, situation: Situation, policy: rules.DrainPolicy) -> tuple[int, ...]:
    """The other GPUs of `gpu`'s NVLink domain: its group in the policy, else every GPU on the node."""
    for group in policy.nvlink_groups:
        if gpu in group:
            return tuple(g for g in group if g != gpu)
    if policy.nvlink_groups:
        return ()  # named groups, and this GPU in none: it resets alone
    count = situation.node.gpu_capacity if situation.node is not None else 0
    return tuple(g for g in range(count) if g != gpu)


def _candidates(situation: Situation, policy: rules.DrainPolicy, mode: rules.DrainMode) -> list[PodState]:
    return [p for p in situation.pods_on_node if evictions.drainable(p, policy, mode)]


def _whole(
    situation: Situation, policy: rules.DrainPolicy, mode: rules.DrainMode, *, why: str
) -> EvictionSet:
    return EvictionSet(mode=mode, evict=tuple(_candidates(situation, policy, mode)), why=why)


def _fell_back(situation: Situation, policy: rules.DrainPolicy, reason: str) -> EvictionSet:
    whole = _whole(
        situation, policy, "gpu-pods", why=f"partial drain not possible ({reason}): every GPU pod is drained"
    )
    return EvictionSet(mode=whole.mode, evict=whole.evict, why=whole.why, fallback=reason)


def _what(mode: rules.DrainMode) -> str:
    return "every pod but node agents" if mode == "all" else "every GPU pod"


def _names(pods: tuple[PodState, ...]) -> str:
    shown = ", ".join(str(p.ref) for p in pods[:_SHOWN])
    return shown + (f" and {len(pods) - _SHOWN} more" if len(pods) > _SHOWN else "")
