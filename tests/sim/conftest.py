"""Fixtures for the fleet simulator's tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROMTOOL = Path("/usr/bin/promtool")
PROMETHEUS = Path("/usr/bin/prometheus")


@pytest.fixture
def promtool() -> Path:
    if not PROMTOOL.exists() and shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`)")
    return PROMTOOL if PROMTOOL.exists() else Path(str(shutil.which("promtool")))


@pytest.fixture
def prometheus() -> Path:
    if not PROMETHEUS.exists():
        pytest.skip("prometheus is not installed (Debian package `prometheus`)")
    return PROMETHEUS
