"""What a `Stack` runs: fleet size and seed, scrape and rule intervals, policy overrides, prediction.

A frozen value; `Stack` reads it, nothing writes it. The defaults are the end-to-end test's stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.demo import prediction
from app.demo.configs import DEFAULT_SHORT_FOR
from app.sim.fleet import SimConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class StackConfig:
    nodes: int = 12
    seed: int = 7
    fleet: SimConfig | None = None  # default: quiet_fleet_config()
    tick_s: float = 0.5
    interval: str = "1s"  # Prometheus scrape and rule-evaluation interval
    short_for: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SHORT_FOR))
    group_wait_other: str = "1s"  # hardware classes always use 0s
    group_interval: str = "1s"
    healthy_delay: str = "3s"
    reconcile_interval_s: float = 0.5
    budgets: Mapping[str, Any] = field(
        default_factory=lambda: {
            "max_fraction": 1.0,
            "max_nodes": 1000,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 1000,
            "quarantines_per_minute": 600,
        }
    )
    policy: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # more section overrides
    pool: str = "h100"
    # A deleted pod stays Terminating for its grace period times this (30 s: 0.3 s), as behind a kubelet.
    grace_scale: float = 0.01
    probe: bool = False  # also deliver every notification to an in-process recording receiver
    token: str = "sickbay-e2e-token"  # noqa: S105 - a loopback demo credential
    # The operators' own credential (model validation, breaker reset): the webhook's may post alerts only.
    operator_token: str = "sickbay-e2e-operator-token"  # noqa: S105 - a loopback demo credential
    identity: str = "sickbay-e2e"
    start_timeout_s: float = 60.0
    sickbay_env: Mapping[str, str] = field(default_factory=dict)
    # Simulated DCGM history backfilled into Prometheus before it starts (seconds; 0: none), one sample
    # every `history_step_s`; the fleet must then begin that long before now (`prediction.history_start`).
    history_s: float = 0.0
    history_step_s: float = prediction.STEP_S
    # Sickbay scores risk from this stack's Prometheus every so many seconds (None: it loads the shipped
    # model but scores nothing, as without a Prometheus URL); it starts with no model (`promote_model`).
    prediction_interval_s: float | None = None
    pod_owners: bool = False  # workload pods get owners (a Job per pod; a JobSet and a Job per rank)
    # How Prometheus scrapes each node's exporter: all the plain way, or `mixed`: every third node as
    # prometheus-operator does (honorLabels false, then true) and the plain way with an exporter that maps
    # no pods (`app.sim.fleet.scrape`).
    scrape: Literal["plain", "mixed"] = "plain"
    # A team's own rule (TeamGpuPowerBrake) and route to Sickbay: an alert no Sickbay rule knows.
    user_alerts: bool = False
