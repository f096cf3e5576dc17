"""/metrics speaks dcgm-exporter: its names, types, label set and order, and value formats."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from pytest_aiohttp import AiohttpClient

from app.agent import exposition, server
from app.agent.devices import discover_gpus
from app.agent.exposition import GpuSample, Snapshot
from app.agent.model import Field, PodRef
from app.agent.readings import GpuReader
from app.agent.selfmetrics import create_metrics
from app.dcgm_fields import BY_NAME, XID_ERRORS
from tests.agent.fake_pynvml import FakeNvml, make_gpu

BASE_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
POD_LABELS = ["container", "namespace", "pod"]


def poll(nvml: FakeNvml, *, last_xid: int = 0, pods: dict[int, PodRef] | None = None) -> Snapshot:
    nvml.nvmlInit()
    reader = GpuReader(nvml)
    samples = tuple(
        GpuSample(
            gpu=gpu.identity,
            reading=reader.read(gpu),
            last_xid=last_xid,
            pod=(pods or {}).get(gpu.identity.index),
        )
        for gpu in discover_gpus(nvml)
    )
    return Snapshot(samples, driver_version=nvml.driver_version)


def families(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def label_order(text: str, name: str) -> list[list[str]]:
    return [re.findall(r'([A-Za-z_]+)="', line) for line in text.splitlines() if line.startswith(name + "{")]


def test_every_series_has_the_exporter_name_type_and_labels() -> None:
    nvml = FakeNvml([make_gpu(0, nvlink={0: {}}), make_gpu(1, nvlink={0: {}})])
    text = exposition.render(poll(nvml), hostname="node-a")
    found = families(text)

    assert set(found) == {field.value for field in Field} | {XID_ERRORS.name}
    for field in Field:
        family = found[field.value]
        assert family.type == BY_NAME[field.value].kind, field
        assert len(family.samples) == 2
        for sample in family.samples:
            assert list(sample.labels) == BASE_LABELS + POD_LABELS
        assert label_order(text, field.value) == [BASE_LABELS + POD_LABELS] * 2
    gpu1 = next(s for s in found["DCGM_FI_DEV_GPU_TEMP"].samples if s.labels["gpu"] == "1")
    assert gpu1.labels == {
        "gpu": "1",
        "UUID": "GPU-00000001-aaaa-bbbb-cccc-000000000001",
        "pci_bus_id": "00000000:19:00.0",
        "device": "nvidia1",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "container": "",
        "namespace": "",
        "pod": "",
    }
    assert label_order(text, XID_ERRORS.name) == [BASE_LABELS + POD_LABELS + ["err_code", "err_msg"]] * 2


def test_counters_keep_their_bare_exporter_names() -> None:
    text = exposition.render(poll(FakeNvml(1)), hostname="node-a")

    assert "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n" in text
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n" in text
    assert "\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{" in text
    assert "_total" not in text  # no prometheus-client style suffix anywhere
    # The parser itself appends `_total` to counter *sample* names; the family name stays the exporter's.
    parsed = families(text)["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert parsed.name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"


def test_prometheus_client_would_have_mangled_the_names() -> None:
    """Why exposition writes the text itself: the library renames counter families."""

    class Collector:
        def collect(self) -> list[Metric]:
            metric = Metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "replays", "counter")
            metric.add_sample("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {"gpu": "0", "UUID": "GPU-x"}, 3)
            return [metric]

    registry = CollectorRegistry()
    registry.register(Collector())
    library_text = generate_latest(registry).decode()
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total counter" in library_text
    assert '{UUID="GPU-x",gpu="0"}' in library_text  # and it sorts labels


def test_values_are_read_and_formatted_like_dcgm() -> None:
    gpu = make_gpu(
        0,
        power_mw=68_123,
        remapped_rows=(3, 1, 1, 0),
        pcie_replays=17,
        clocks_event_reasons=0x44,
        retired_pages_pending=1,
        nvlink={0: {2: 5, 3: 1, 0: 2, 1: 0}, 1: {2: 7}, 5: {}},
    )
    gpu.ecc = {(0, 0): 11, (1, 0): 0, (0, 1): 120, (1, 1): 2}
    text = exposition.render(poll(FakeNvml([gpu])), hostname="node-a")
    values = {family.name: family.samples[0].value for family in text_string_to_metric_families(text)}

    power_line = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    assert power_line.endswith("} 68.123000")
    assert values["DCGM_FI_DEV_GPU_TEMP"] == 40
    assert values["DCGM_FI_DEV_MEMORY_TEMP"] == 50
    assert values["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == 11
    assert values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0
    assert values["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 120
    assert values["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"] == 2
    assert values["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 3
    assert values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 1
    assert values["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1
    assert values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert values["DCGM_FI_DEV_RETIRED_PENDING"] == 1
    assert values["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 17
    assert values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 0x44
    # Summed over the active links 0, 1 and 5 (NVML_NVLINK_ERROR_DL_CRC_FLIT = 2, CRC_DATA = 3, ...).
    assert values["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"] == 12
    assert values["DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"] == 1
    assert values["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 2
    assert values["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"] == 0
    assert values[XID_ERRORS.name] == 0


def test_fields_a_gpu_does_not_support_are_skipped_not_fatal() -> None:
    nvml = FakeNvml([make_gpu(0), make_gpu(1, memory_temperature_c=None)])
    nvml.set_unsupported(
        1, "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPowerUsage"
    )
    text = exposition.render(poll(nvml), hostname="node-a")
    found = families(text)

    def gpus(name: str) -> set[str]:
        return {sample.labels["gpu"] for sample in found[name].samples}

    for name in (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
    ):
        assert gpus(name) == {"0"}, name
    assert gpus("DCGM_FI_DEV_GPU_TEMP") == {"0", "1"}
    # No NVLink on these GPUs at all: the families are absent, as with the exporter.
    assert "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" not in found


def test_hostname_label_can_use_the_newer_spelling() -> None:
    text = exposition.render(poll(FakeNvml(1)), hostname="node-a", hostname_label="hostname")
    sample = families(text)["DCGM_FI_DEV_GPU_TEMP"].samples[0]

    assert sample.labels["hostname"] == "node-a"
    assert "Hostname" not in sample.labels


def test_xid_series_holds_the_last_xid_with_code_and_message() -> None:
    text = exposition.render(poll(FakeNvml(1), last_xid=48), hostname="node-a")
    sample = families(text)[XID_ERRORS.name].samples[0]

    assert sample.value == 48
    assert sample.labels["err_code"] == "48"
    assert sample.labels["err_msg"] == "Double Bit ECC Error"


def test_pod_labels_name_the_container_using_the_gpu() -> None:
    pod = PodRef(namespace="training", name="llama-worker-3", container="trainer")
    text = exposition.render(poll(FakeNvml(2), pods={1: pod}), hostname="node-a")
    samples = {s.labels["gpu"]: s.labels for s in families(text)["DCGM_FI_DEV_GPU_TEMP"].samples}

    assert (samples["1"]["namespace"], samples["1"]["pod"], samples["1"]["container"]) == (
        "training",
        "llama-worker-3",
        "trainer",
    )
    assert (samples["0"]["namespace"], samples["0"]["pod"], samples["0"]["container"]) == ("", "", "")


def test_a_lost_gpu_keeps_only_its_xid_series() -> None:
    snapshot = poll(FakeNvml(2))
    lost = GpuSample(gpu=snapshot.samples[1].gpu, reading=None, last_xid=79)
    text = exposition.render(Snapshot((snapshot.samples[0], lost), snapshot.driver_version), hostname="n")
    found = families(text)

    assert {s.labels["gpu"] for s in found["DCGM_FI_DEV_GPU_TEMP"].samples} == {"0"}
    xid = {s.labels["gpu"]: s for s in found[XID_ERRORS.name].samples}
    assert xid["1"].value == 79
    assert xid["1"].labels["err_msg"] == "GPU has fallen off the bus"


@pytest.mark.parametrize("text", ['a"b', "a\\b", "a\nb"])
def test_label_values_are_escaped(text: str) -> None:
    snapshot = poll(FakeNvml([make_gpu(0, name=text)]))
    sample = families(exposition.render(snapshot, hostname="n"))["DCGM_FI_DEV_GPU_TEMP"].samples[0]

    assert sample.labels["modelName"] == text


async def test_endpoint_serves_gpu_series_then_the_agents_own(aiohttp_client: AiohttpClient) -> None:
    metrics = create_metrics()
    metrics.spool_dropped.inc(2)
    snapshot = poll(FakeNvml(1))
    app = server.build_app(
        render_gpu_metrics=lambda: exposition.render(snapshot, hostname="node-a"), registry=metrics.registry
    )
    client = await aiohttp_client(app)

    response = await client.get("/metrics")
    text = await response.text()

    assert response.status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = families(text)
    assert "DCGM_FI_DEV_GPU_TEMP" in found
    assert found["sickbay_agent_spool_dropped"].samples[0].value == 2
    assert (await client.get("/healthz")).status == 200
