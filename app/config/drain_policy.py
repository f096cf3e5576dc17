"""The `drain` section of `rules/policy.yaml`: which pods a quarantine's drain moves, per hardware class,
and what happens when a PodDisruptionBudget says no. Read as `rules.DrainPolicy` (re-exported there).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app import domain
from app.config.durations import Duration

HardwareClass = Literal["reset-gpu", "reboot-node", "replace"]
# partial: the faulty GPU's pods (and its NVLink peers'); gpu-pods: every GPU pod; all: every pod but
# node agents (DaemonSet, mirror pods).
DrainMode = Literal["partial", "gpu-pods", "all"]


def _default_drain_modes() -> dict[HardwareClass, DrainMode]:
    return {"reset-gpu": "partial"}


class DrainPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Which resources make a pod a GPU pod is a client setting (`kube.gpu_resources`), shared with explain.
    gpu_pods_only: bool = True
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    deadline: Duration = timedelta(minutes=10)
    on_deadline: Literal["leave", "delete"] = "leave"
    # A node left `drain-failed` is drained again this long after the last try (null: never by itself;
    # it waits for a human, or for its pods to leave).
    retry_after: Duration | None = timedelta(minutes=10)
    # Which pods a hardware class's drain moves (`mode_for`): `partial` only the pods on the faulty GPU
    # (and its NVLink peers when `peers`), the node's other work keeps running under the NoSchedule taint;
    # `gpu-pods` every GPU pod; `all` every pod but DaemonSet and mirror pods. A class not named here
    # drains as before this setting existed: `gpu-pods`, or `all` when `gpu_pods_only` is false.
    modes: dict[HardwareClass, DrainMode] = Field(default_factory=_default_drain_modes)
    # A partial drain also moves the pods on the faulty GPU's NVLink peers: where the reset tears down the
    # GPU's NVLinks, peer-to-peer traffic of a job spanning it and its peers fails with it.
    peers: bool = False
    # The GPUs (indices) that share an NVLink domain, for `peers`; empty: every GPU on the node is a peer
    # of every other (an NVSwitch baseboard such as HGX A100/H100 8-GPU).
    nvlink_groups: tuple[tuple[int, ...], ...] = ()

    @field_validator("modes")
    @classmethod
    def _partial_only_resets_one_gpu(
        cls, value: dict[HardwareClass, DrainMode]
    ) -> dict[HardwareClass, DrainMode]:
        wrong = sorted(c for c, mode in value.items() if mode == "partial" and c != "reset-gpu")
        if wrong:
            raise ValueError(
                f"a partial drain needs a fault that only one GPU's reset fixes: not {', '.join(wrong)}"
            )
        return value

    def mode_for(self, fault_class: domain.FaultClass) -> DrainMode:
        """How `fault_class`'s drain chooses its pods."""
        named: DrainMode | None = self.modes.get(fault_class.value)  # type: ignore[call-overload]
        if named is not None:
            return named
        return "gpu-pods" if self.gpu_pods_only else "all"
