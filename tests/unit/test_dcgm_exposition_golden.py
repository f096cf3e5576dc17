"""The agent's and the simulator's dcgm-exporter text, byte for byte, for a fixed GPU state.

Both exporters take their names, types, help strings and DCGM 4.6 renames from `app.dcgm_fields`; these
files were written before that catalog existed, so a change to it that moves one byte of what either
exporter serves fails here. Regenerate with `SICKBAY_WRITE_GOLDEN=1` only for an intended change.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from app.agent import exposition as agent_exposition
from app.agent.model import PodRef
from app.predict import features
from app.sim.fleet import datasets, fieldsets, openmetrics
from app.sim.fleet import exposition as sim_exposition
from app.sim.fleet.params import ExporterView
from tests.agent.fake_pynvml import FakeNvml, make_gpu
from tests.agent.test_metrics import poll
from tests.sim.helpers import quiet_sim, run

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm_exposition"
VIEWS = {
    "classic": ExporterView(),
    "default-4.6": ExporterView(fields=fieldsets.DEFAULT_FIELDS, field_set="default", metric_names="4.6"),
    "extended-hostname": ExporterView(
        fields=fieldsets.EXTENDED_FIELDS, field_set="extended", host_label="hostname", table_host=True
    ),
    "full-4.6": ExporterView(metric_names="4.6"),
}


def _agent_text() -> str:
    nvml = FakeNvml([make_gpu(0, nvlink={0: {}, 1: {}}), make_gpu(1, nvlink={0: {}})])
    snapshot = poll(nvml, last_xid=94, pods={1: PodRef("team-a", "trainer-0", "main")})
    return agent_exposition.render(snapshot, hostname="node-a")


def _sim_texts() -> dict[str, str]:
    sim = quiet_sim(nodes=2)
    run(sim, seconds=600)
    # Two GPUs of one node keep the files short; every family and label is still there.
    full = sim.observe_node(sim.node_names[0])
    node = dataclasses.replace(full, gpus=full.gpus[:2])
    out = {
        f"sim-{name}.txt": sim_exposition.render_node(node, hostname_label=view.host_label, view=view)
        for name, view in VIEWS.items()
    }
    names = {
        "columns": {name: list(datasets.table_layout(view).columns) for name, view in VIEWS.items()},
        "openmetrics": {style: list(openmetrics.family_names(style)) for style in ("unknown", "suffixed")},
        "field_sets": {
            name: None if fields is None else sorted(fields) for name, fields in fieldsets.FIELD_SETS.items()
        },
        "optional": list(fieldsets.OPTIONAL_FIELDS),
        "agent_series": list(agent_exposition.series_names()),
        "predictor": {
            "source_metrics": list(features.SOURCE_METRICS),
            "aliases": sorted(features.ALIASES.items()),  # a lookup table: its order means nothing
            "field_groups": {name: list(group) for name, group in features.FIELD_GROUPS.items()},
            "volatile": list(features.VOLATILE_COUNTERS),
        },
    }
    out["names.json"] = json.dumps(names, indent=1, sort_keys=True) + "\n"
    return out


def _texts() -> dict[str, str]:
    return {"agent.txt": _agent_text(), **_sim_texts()}


@pytest.mark.parametrize("name", ["agent.txt", *(f"sim-{view}.txt" for view in VIEWS), "names.json"])
def test_exposition_is_byte_identical_to_the_golden_file(name: str) -> None:
    text = _texts()[name]
    path = GOLDEN / name
    if os.environ.get("SICKBAY_WRITE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
