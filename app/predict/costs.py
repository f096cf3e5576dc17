"""What prediction is worth in GPU-hours: work lost to failures with and without the proactive ladder,
against the capacity the ladder takes out of the pool.

Pure arithmetic (pandas and numpy only), so the numbers a backtest prints can be checked by hand. The
model is deliberately simple and every assumption is a field of `CostModel`, echoed in the backtest's
JSON (`CostModel.assumptions`):

- **Reactive handling** (rules only): a hardware failure kills the job on the GPU. The job loses the work
  since its last checkpoint — on average half a checkpoint interval — plus the time to notice the failure
  (a collective hangs until the NCCL watchdog fires) and to restart from the checkpoint elsewhere. All
  `job_gpus` GPUs of the job lose that time: `job_gpus x (interval / 2 + detect + restart)` GPU-hours.
- **With the ladder**: a failure flagged at `act` at least `min_lead_h` before it happens gives the
  workload its warning (NoSchedule and "checkpoint now"): it checkpoints and restarts elsewhere at a time
  of its choosing, losing only the restart, `job_gpus x restart` GPU-hours. A failure caught later than
  that, or not at all, costs what it costs reactively.
- The issue's figure, `reduction`, compares work lost *to failures*. If every warned workload moves, every
  other alarm (false, early, a second alarm for the same failure) costs a planned restart too: those are
  `needless_restart_gpu_h`, and `net_reduction` counts them against the ladder.
- **Capacity**: a node at `act` takes no new work (NoSchedule) and its workload has moved away, so all its
  GPUs are out of the pool from the first flag until the failure (after a failure the node is out either
  way, ladder or not) or, when no failure follows, until the level drops below `act` (or the range ends).
  Overlapping alarms of one node count once. The fleet is assumed fully allocated: capacity held is
  capacity lost (an upper bound where the fleet has idle GPUs).
- **The proactive budget** (the policy's `budgets.proactive_max_fraction` and `proactive_max_nodes`): at
  most that many nodes are at `act` at once. A node whose hold starts while the budget is full stays at
  `warn` (PreferNoSchedule) — no capacity taken, its workload not warned — until the scorer re-sends its
  level (every `resend_h`, the policy's `prediction.resend`) and finds a slot free; a failure it foresaw
  costs a planned restart only if the node reached `act` at least `min_lead_h` before it.
  `proactive_max_fraction = 1` with no node cap turns the budget off.
- Repair time, spare capacity and the failure itself are the same with and without the ladder and are
  left out of both sides.

Defaults, and why:
- `job_gpus = 8`: one job per 8-GPU node (a multi-node gang loses `job_gpus` = all of its GPUs: raise it).
- `checkpoint_interval_h = 1`: large training jobs checkpoint every 30 min to a few hours; an hour is a
  common middle (Meta's Llama 3 run recovered ~90% effective training time with frequent checkpoints).
- `detect_h = 0.25`: PyTorch's NCCL watchdog default timeout is 10 min; add the job controller noticing.
- `restart_h = 0.25`: rescheduling, pulling the image and loading a checkpoint take minutes to tens of
  minutes at scale; 15 min.
- `min_lead_h = 1`: time for the workload to take a checkpoint and drain at its own pace after the warning.
- `proactive_max_fraction = 0.05`, `proactive_max_nodes = 10`, `resend_h = 0.5`: the shipped policy's
  budget and re-send interval (`sickbay backtest` reads the policy file's).

With these, a failure costs 8 x 1.0 = 8 GPU-hours reactively and 8 x 0.25 = 2 GPU-hours when caught in
time: the ladder can save at most 75% of the lost work, times the share of failures it catches in time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.config import rules
from app.decide import gates

HOUR = 3600.0
HOLD_COLUMNS: tuple[str, ...] = ("node", "start", "end")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """The assumptions behind the GPU-hour figures (see the module docstring for the defaults)."""

    job_gpus: int = 8
    checkpoint_interval_h: float = 1.0
    detect_h: float = 0.25
    restart_h: float = 0.25
    min_lead_h: float = 1.0
    proactive_max_fraction: float = 0.05
    proactive_max_nodes: int | None = 10
    resend_h: float | None = 0.5

    def __post_init__(self) -> None:
        if self.job_gpus < 1:
            raise ValueError("job_gpus must be at least 1")
        if not 0.0 <= self.proactive_max_fraction <= 1.0:
            raise ValueError("proactive_max_fraction must be between 0 and 1")
        if self.proactive_max_nodes is not None and self.proactive_max_nodes < 1:
            raise ValueError("proactive_max_nodes must be at least 1 (None: no cap)")
        if self.resend_h is not None and self.resend_h <= 0:
            raise ValueError("resend_h must be positive (None: a refused node never asks again)")
        for name in ("checkpoint_interval_h", "detect_h", "restart_h", "min_lead_h"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @property
    def reactive_loss_gpu_h(self) -> float:
        """GPU-hours one failure costs when it is handled only after it happened."""
        return self.job_gpus * (self.checkpoint_interval_h / 2.0 + self.detect_h + self.restart_h)

    @property
    def planned_loss_gpu_h(self) -> float:
        """GPU-hours of a planned restart from a fresh checkpoint."""
        return self.job_gpus * self.restart_h

    def budget(self, nodes: int) -> Budget:
        """The proactive budget of a fleet of `nodes` GPU nodes, as the decision layer's policy has it."""
        cap = max(nodes, 1) if self.proactive_max_nodes is None else self.proactive_max_nodes
        policy = rules.BudgetPolicy(
            proactive_max_fraction=self.proactive_max_fraction, proactive_max_nodes=cap
        )
        return Budget(gpu_nodes=nodes, policy=policy)

    def node_limit(self, nodes: int) -> int:
        """Nodes that may be at act at once: `decide.gates.proactive_limit` (never 0 unless the fraction is)."""
        return self.budget(nodes).limit

    def failure_loss_gpu_h(self, lead_h: float | None) -> float:
        """One failure's cost with the ladder: planned when flagged at least `min_lead_h` ahead."""
        if lead_h is not None and np.isfinite(lead_h) and lead_h >= self.min_lead_h:
            return self.planned_loss_gpu_h
        return self.reactive_loss_gpu_h

    def assumptions(self) -> dict[str, Any]:
        """The fields, the per-event costs they imply, and the model in words (for the JSON report)."""
        return {
            **asdict(self),
            "reactive_loss_gpu_h_per_failure": self.reactive_loss_gpu_h,
            "planned_loss_gpu_h_per_restart": self.planned_loss_gpu_h,
            "statements": [
                "reactive: a failure loses half a checkpoint interval of work plus detection and restart, "
                "on all job_gpus GPUs of the job",
                "ladder: a failure flagged at act at least min_lead_h ahead costs only a planned restart "
                "from a fresh checkpoint; flagged later or not at all, it costs what it costs reactively",
                "reduction counts work lost to failures; net_reduction also charges one planned restart "
                "to every other alarm acted on (false, early, repeated): if every warned workload moves",
                "the proactive budget: while proactive_max_fraction of the nodes (at most "
                "proactive_max_nodes) are at act, a newly flagged node stays at warn (no capacity taken, "
                "no workload warned) until a re-send (every resend_h) finds a slot free",
                "capacity: a node at act (NoSchedule) holds all its GPUs from the first flag until the "
                "failure, or until its level drops below act or the range ends when none follows",
                "the fleet is fully allocated: capacity held is capacity lost",
                "repairs and the failure itself cost the same with and without the ladder and are left out",
            ],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CostReport:
    """GPU-hours lost to failures reactively and with the ladder, and the capacity the ladder held."""

    failures: int
    caught_in_time: int
    reactive_gpu_h: float
    ladder_gpu_h: float
    saved_gpu_h: float
    reduction: float
    needless_restarts: int
    needless_restart_gpu_h: float
    net_reduction: float
    capacity_gpu_h: float
    fleet_gpu_h: float
    capacity_fraction: float
    peak_nodes_held: int
    max_nodes_at_act: int
    holds_refused: int
    holds_delayed: int

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (round(v, 6) if np.isfinite(v) else None) if isinstance(v, float) else v
            for k, v in asdict(self).items()
        }


def compare(
    *,
    leads_h: Iterable[float | None],
    needless_restarts: int,
    holds: pd.DataFrame,
    gpus_per_node: Mapping[str, int],
    fleet_gpu_h: float,
    costs: CostModel,
    max_nodes_at_act: int,
    holds_refused: int = 0,
    holds_delayed: int = 0,
) -> CostReport:
    """The cost report for failures with these lead times (None: not caught, or not acted on; else from the
    moment the node reached act), this many other alarms acted on, and these node holds (`HOLD_COLUMNS`,
    Unix seconds: the admitted parts), `holds_refused` never admitted, `holds_delayed` admitted late."""
    leads = list(leads_h)
    reactive = costs.reactive_loss_gpu_h * len(leads)
    per_failure = [costs.failure_loss_gpu_h(lead) for lead in leads]
    caught = sum(1 for cost in per_failure if cost < costs.reactive_loss_gpu_h)
    ladder = float(sum(per_failure))
    restarts = costs.planned_loss_gpu_h * needless_restarts
    capacity = held_gpu_hours(holds, gpus_per_node)
    return CostReport(
        failures=len(leads),
        caught_in_time=caught,
        reactive_gpu_h=reactive,
        ladder_gpu_h=ladder,
        saved_gpu_h=reactive - ladder,
        reduction=_share(reactive - ladder, reactive),
        needless_restarts=needless_restarts,
        needless_restart_gpu_h=restarts,
        net_reduction=_share(reactive - ladder - restarts, reactive),
        capacity_gpu_h=capacity,
        fleet_gpu_h=fleet_gpu_h,
        capacity_fraction=_share(capacity, fleet_gpu_h),
        peak_nodes_held=peak_nodes_held(holds),
        max_nodes_at_act=max_nodes_at_act,
        holds_refused=holds_refused,
        holds_delayed=holds_delayed,
    )


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else float("nan")


@dataclass(frozen=True, slots=True)
class Budget:
    """The proactive budget the ladder applies: `decide.gates.admit_proactive` over these GPU nodes."""

    gpu_nodes: int
    policy: rules.BudgetPolicy

    @classmethod
    def of_limit(cls, limit: int) -> Budget:
        """A budget of exactly `limit` nodes at act (0: none)."""
        policy = rules.BudgetPolicy(
            proactive_max_fraction=1.0 if limit > 0 else 0.0, proactive_max_nodes=max(limit, 1)
        )
        return cls(gpu_nodes=max(limit, 0), policy=policy)

    @property
    def limit(self) -> int:
        return gates.proactive_limit(self.gpu_nodes, self.policy) if self.gpu_nodes > 0 else 0

    def admits(self, node: str, acting: frozenset[str]) -> bool:
        """May `node` go to act while `acting` are: the serve path's very check."""
        fleet = gates.ProactiveFleet(gpu_nodes=self.gpu_nodes, acting=acting)
        return gates.admit_proactive(fleet, node=node, policy=self.policy).allowed


def admit(
    holds: pd.DataFrame, budget: Budget | int, *, resend_s: float | None = None
) -> npt.NDArray[np.float64]:
    """When each hold (disjoint per node, as `merged_holds` gives) gets its node to act under the proactive
    `budget` (or a plain limit of nodes at act at once); NaN when it never does.

    A hold asks at its start, and the scorer asks again every `resend_s` (the policy's
    `prediction.resend`; None: never again) until the hold ends; it is admitted at the first ask the
    budget admits (`Budget.admits`: `decide.gates.admit_proactive`, as the ladder decides it in serve). A
    slot frees when an admitted hold ends (ends before asks at the same instant; asks at one instant in
    order of the holds' starts).
    """
    budget = budget if isinstance(budget, Budget) else Budget.of_limit(budget)
    start = holds["start"].to_numpy(dtype=np.float64)
    end = holds["end"].to_numpy(dtype=np.float64)
    nodes = (
        holds["node"].astype(str).to_numpy() if "node" in holds.columns else np.arange(len(holds)).astype(str)
    )
    admitted_at = np.full(len(holds), np.nan)
    order = np.argsort(start, kind="stable")
    rank = np.empty(len(holds), dtype=np.int64)
    rank[order] = np.arange(len(holds))
    # (time, 0 = an end, 1 = an ask, rank, hold)
    events: list[tuple[float, int, int, int]] = [(float(start[i]), 1, int(rank[i]), int(i)) for i in order]
    heapq.heapify(events)
    acting: dict[str, int] = {}  # node -> admitted holds running (merged holds: at most one)
    while events:
        t, kind, _, i = heapq.heappop(events)
        node = str(nodes[i])
        if kind == 0:
            acting[node] -= 1
            if not acting[node]:
                del acting[node]
        elif (t < end[i] or t == start[i]) and budget.admits(node, frozenset(acting)):
            admitted_at[i] = t
            acting[node] = acting.get(node, 0) + 1
            heapq.heappush(events, (float(end[i]), 0, int(rank[i]), i))
        elif resend_s is not None and resend_s > 0 and t + resend_s < end[i]:
            heapq.heappush(events, (t + resend_s, 1, int(rank[i]), i))
    return admitted_at


def merged_holds(holds: pd.DataFrame) -> pd.DataFrame:
    """Per node, the union of its hold intervals as disjoint (node, start, end) rows."""
    rows = holds.loc[holds["end"] >= holds["start"], list(HOLD_COLUMNS)]
    if rows.empty:
        return pd.DataFrame({"node": pd.Series(dtype=object), "start": [], "end": []})
    ordered = rows.sort_values(["node", "start"], kind="stable").reset_index(drop=True)
    node = ordered["node"].astype(str).to_numpy()
    start = ordered["start"].to_numpy(dtype=np.float64)
    end = ordered["end"].to_numpy(dtype=np.float64)
    # Running maximum of the ends within each node: a row opens a new interval when it starts after it.
    reach = pd.Series(end).groupby(node).cummax().to_numpy()
    before = np.full(len(node), -np.inf)
    before[1:] = np.where(node[1:] == node[:-1], reach[:-1], -np.inf)
    opens = start > before
    block = np.cumsum(opens)
    merged = pd.DataFrame({"node": node, "start": start, "end": end, "block": block})
    out = merged.groupby("block", sort=True).agg(
        node=("node", "first"), start=("start", "min"), end=("end", "max")
    )
    return out.reset_index(drop=True)


def held_gpu_hours(holds: pd.DataFrame, gpus_per_node: Mapping[str, int]) -> float:
    """GPU-hours of the nodes' GPUs held: overlapping holds of one node count once."""
    merged = merged_holds(holds)
    if merged.empty:
        return 0.0
    gpus = merged["node"].map(lambda n: gpus_per_node.get(str(n), 0)).to_numpy(dtype=np.float64)
    return float(np.sum(gpus * (merged["end"] - merged["start"]).to_numpy() / HOUR))


def peak_nodes_held(holds: pd.DataFrame) -> int:
    """The most nodes held at once (what the proactive budget, a share of the fleet, would cap)."""
    merged = merged_holds(holds)
    merged = merged.loc[merged["end"] > merged["start"]]
    if merged.empty:
        return 0
    times = np.concatenate([merged["start"].to_numpy(), merged["end"].to_numpy()])
    steps = np.concatenate([np.ones(len(merged)), -np.ones(len(merged))])
    # Ends before starts at the same instant: a hold handed over is not two holds at once.
    order = np.lexsort((steps, times))
    return int(np.max(np.cumsum(steps[order])))
