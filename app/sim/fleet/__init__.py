"""A seeded GPU fleet simulator: failure modes, workloads, dcgm-exporter metrics and ground truth.

For demos and tests only; production code never imports it. Public surface:

- `FleetSim` (fleet.py): the simulation — `step(dt)`, `now`, `inject(...)`, `observe_node(...)`, `truth()`.
- `SimConfig` and its parts (params.py): every rate, and every ASSUMPTION, as a frozen value.
- `personality.named` / `draw` / `simulate`: how fleets differ (background noise, exposed fields, labels,
  precursor strength); `classic` is the original simulator.
- `exposition.render_node` / `render_kube_state`: dcgm-exporter's and kube-state-metrics' text.
- `server.FleetServer` / `server.build_app`: all exporters plus a control API from one aiohttp process.
- `datasets.write_dataset`: time series (CSV/Parquet), ground truth, OpenMetrics for promtool backfill.
- `cli`: what `sickbay simulate [serve|backfill]` runs (`app.sim.commands` declares the arguments).
"""

from app.sim.fleet.fleet import DEFAULT_START, FleetSim, NodeGpuCapacity
from app.sim.fleet.injection import Injected, InjectionError
from app.sim.fleet.params import FailureMode, FailureRates, LeadTimes, OpsParams, SimConfig
from app.sim.fleet.truth import FailureRecord, GroundTruth

__all__ = [
    "DEFAULT_START",
    "FailureMode",
    "FailureRates",
    "FailureRecord",
    "FleetSim",
    "GroundTruth",
    "Injected",
    "InjectionError",
    "LeadTimes",
    "NodeGpuCapacity",
    "OpsParams",
    "SimConfig",
]
