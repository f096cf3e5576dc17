"""tests/gpu holds scripts run by hand on a machine with an NVIDIA GPU; pytest must never collect them."""

collect_ignore_glob = ["*.py"]
