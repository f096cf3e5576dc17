"""What every benchmark report says about the machine it ran on (figures depend on it)."""

from __future__ import annotations

import os
import platform
from typing import Any


def describe(load_at_start: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """CPUs, Python and platform; with the load average at the start, also the load average now."""
    out: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if load_at_start is not None:
        out["load_average_at_start"] = load_at_start
        out["load_average_at_end"] = os.getloadavg()
    return out
