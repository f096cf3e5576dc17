"""The demo: the whole pipeline on loopback against a scripted run of GPU faults.

    sickbay demo [--nodes 32] [--seed 7] [--out out/demo] [--keep]   # `make demo`: python -m app.demo

- `stack.Stack` starts the simulated fleet and Kubernetes API (in process), Debian's Prometheus and
  Alertmanager, and `sickbay serve`, and always stops them; the end-to-end tests and the end-to-end
  benchmark reuse it (`configs`, `processes` and `probe` are its parts).
- `scenario` plays the scripted faults, `timeline` records what happened and when, `report` writes the
  HTML report, `main` ties them together with a live view; `commands` declares the flags, without
  importing any of it (this `__init__` imports nothing, for the same reason).

For demos and tests only: no production module imports this package.
"""
