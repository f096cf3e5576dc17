"""The default failure rate is Llama 3's: about 2.4 GPU-caused failures per 1,000 node-days."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from app.sim.fleet import FleetSim, SimConfig
from tests.sim.helpers import run

DAY = 86400.0


def test_ten_thousand_node_days_give_about_24_gpu_failures() -> None:
    sim = FleetSim(nodes=100, seed=2024)
    run(sim, seconds=100 * DAY, step=4 * 3600)
    failures = sim.truth().failures
    # Poisson(24): the 99.9% band is about 10..41.
    assert 10 <= len(failures) <= 41, len(failures)
    assert not any(f.injected for f in failures)


def test_the_mix_follows_meta_and_a_quarter_have_no_warning() -> None:
    base = SimConfig()
    config = replace(base, rates=replace(base.rates, rate_multiplier=20.0))
    sim = FleetSim(nodes=100, seed=77, config=config)
    run(sim, seconds=100 * DAY, step=6 * 3600)
    failures = sim.truth().failures
    assert 350 <= len(failures) <= 620
    categories = Counter(f.category for f in failures)
    share = {k: v / len(failures) for k, v in categories.items()}
    assert 0.48 <= share["faulty-gpu"] <= 0.68  # 148/256
    assert 0.20 <= share["hbm3"] <= 0.36  # 72/256
    no_warning = sum(1 for f in failures if f.precursor_start is None and f.mode != "gsp")
    assert 0.18 <= no_warning / len(failures) <= 0.33
