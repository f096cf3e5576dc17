"""The demo: the whole pipeline on loopback against a scripted run of GPU faults.

    python -m app.demo [--nodes 32] [--seed 7] [--out out/demo] [--keep]   # `make demo`; `sickbay demo`

- `stack.Stack` starts the simulated fleet and Kubernetes API (in process), Debian's Prometheus and
  Alertmanager, and `sickbay serve`, and always stops them; the end-to-end tests and the end-to-end
  benchmark reuse it (`configs`, `processes` and `probe` are its parts).
- `scenario` plays the scripted faults, `timeline` records what happened and when, `report` writes the
  HTML report, `main` ties them together with a live view.

For demos and tests only: no production module imports this package.
"""

from app.demo.main import main_demo

__all__ = ["main_demo"]
