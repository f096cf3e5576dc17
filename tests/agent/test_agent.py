"""The whole agent against fakes: NVML, the kubelet's PodResources socket and the Sickbay service."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import cli
from app.agent.agent import Agent
from app.agent.main import EXIT_NO_NVML, EXIT_OK, run_agent
from app.agent.settings import AgentSettings
from tests.agent.conftest import TOKEN, FakeKubelet, Receiver, eventually
from tests.agent.fake_pynvml import FakeNvml


@pytest.fixture
async def agent(
    fake_nvml: FakeNvml,
    make_settings: Callable[..., AgentSettings],
    live_receiver: Receiver,
    kubelet: FakeKubelet,
) -> AsyncIterator[Agent]:
    kubelet.allocate(namespace="ml", pod="trainer-0", container="main", device_ids=[fake_nvml.gpus[0].uuid])
    running = Agent(
        make_settings(service_url=live_receiver.base_url, pod_resources_socket=kubelet.socket), fake_nvml
    )
    await running.start()
    yield running
    await running.stop()


async def scrape(agent: Agent) -> dict[str, dict[str, float]]:
    """family → {gpu label (or '') → value}"""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{agent.port}/metrics") as response,
    ):
        text = await response.text()
    return {
        family.name: {sample.labels.get("gpu", ""): sample.value for sample in family.samples}
        for family in text_string_to_metric_families(text)
    }


async def scrape_labels(agent: Agent, family_name: str) -> dict[str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{agent.port}/metrics") as response,
    ):
        text = await response.text()
    family = next(f for f in text_string_to_metric_families(text) if f.name == family_name)
    return {sample.labels["gpu"]: sample.labels for sample in family.samples}


async def test_an_xid_is_pushed_at_once_with_its_pod(
    agent: Agent, fake_nvml: FakeNvml, live_receiver: Receiver
) -> None:
    fake_nvml.inject_xid(0, 94)
    await eventually(lambda: len(live_receiver.accepted) == 1, what="the XID event")

    event = live_receiver.accepted[0]
    assert (event["kind"], event["xid"], event["gpu"], event["uuid"]) == (
        "xid",
        94,
        0,
        fake_nvml.gpus[0].uuid,
    )
    assert event["node"] == "node-a"
    assert event["pod"] == {"namespace": "ml", "name": "trainer-0", "container": "main"}
    assert live_receiver.auth == [f"Bearer {TOKEN}"]
    # The last-XID series follows the event without waiting for a poll.
    assert (await scrape(agent))["DCGM_FI_DEV_XID_ERRORS"]["0"] == 94


async def test_metrics_carry_pod_labels(agent: Agent) -> None:
    labels = await scrape_labels(agent, "DCGM_FI_DEV_GPU_TEMP")

    assert (labels["0"]["namespace"], labels["0"]["pod"], labels["0"]["container"]) == (
        "ml",
        "trainer-0",
        "main",
    )
    assert (labels["1"]["namespace"], labels["1"]["pod"], labels["1"]["container"]) == ("", "", "")


async def drain_nvml_events(nvml: FakeNvml) -> None:
    """Let the event thread pick up everything injected and the loop record it."""
    await eventually(lambda: all(s.pending.empty() for s in nvml.event_sets), what="NVML events read")
    await asyncio.sleep(0.1)


async def test_a_lost_gpu_is_reported_as_one_xid_79(
    agent: Agent, fake_nvml: FakeNvml, live_receiver: Receiver
) -> None:
    fake_nvml.lose_gpu(1)
    for _ in range(3):
        await agent.poll_once()
    # The driver's own XID 79 event for the same loss arrives late: still one report.
    fake_nvml.inject_xid(1, 79)
    await drain_nvml_events(fake_nvml)
    await agent.poll_once()
    await eventually(lambda: len(live_receiver.accepted) >= 1, what="the loss report")
    await asyncio.sleep(0.1)

    lost = [e for e in live_receiver.accepted if e["gpu"] == 1]
    assert len(lost) == 1
    assert (lost[0]["kind"], lost[0]["xid"], lost[0]["uuid"]) == ("gpu-lost", 79, fake_nvml.gpus[1].uuid)
    series = await scrape(agent)
    assert series["DCGM_FI_DEV_XID_ERRORS"]["1"] == 79
    assert set(series["DCGM_FI_DEV_GPU_TEMP"]) == {"0"}
    assert series["sickbay_agent_gpus_lost"][""] == 1


async def test_a_loss_the_driver_reports_first_is_not_repeated_by_the_poller(
    agent: Agent, fake_nvml: FakeNvml, live_receiver: Receiver
) -> None:
    fake_nvml.lose_gpu(0)
    fake_nvml.inject_xid(0, 79)
    await drain_nvml_events(fake_nvml)
    for _ in range(3):
        await agent.poll_once()
    await eventually(lambda: len(live_receiver.accepted) >= 1, what="the XID 79 event")
    await asyncio.sleep(0.1)

    assert [(e["kind"], e["xid"], e["gpu"]) for e in live_receiver.accepted] == [("xid", 79, 0)]
    # The handle still identified the GPU although NVML can no longer read its UUID.
    assert live_receiver.accepted[0]["pod"] == {"namespace": "ml", "name": "trainer-0", "container": "main"}


async def test_a_gpu_that_answers_again_can_be_lost_again(
    agent: Agent, fake_nvml: FakeNvml, live_receiver: Receiver
) -> None:
    fake_nvml.lose_gpu(0)
    await agent.poll_once()
    fake_nvml.gpus[0].lost = False
    await agent.poll_once()
    fake_nvml.lose_gpu(0)
    await agent.poll_once()
    await eventually(lambda: len(live_receiver.accepted) == 2, what="two separate losses")


async def test_a_node_without_the_nvml_library_exits_with_one_line(
    make_settings: Callable[..., AgentSettings],
) -> None:
    stderr = io.StringIO()
    code = await run_agent(make_settings(), nvml=FakeNvml(library_present=False), stderr=stderr)

    lines = stderr.getvalue().splitlines()
    assert code == EXIT_NO_NVML != 0
    assert len(lines) == 1
    assert "libnvidia-ml.so.1 not found" in lines[0]


async def test_run_agent_serves_until_stopped(
    make_settings: Callable[..., AgentSettings], live_receiver: Receiver, tmp_path: Path
) -> None:
    stop = asyncio.Event()
    nvml = FakeNvml(1)
    task = asyncio.create_task(
        run_agent(make_settings(service_url=live_receiver.base_url), nvml=nvml, stop=stop)
    )
    await eventually(lambda: bool(nvml.event_sets), what="the agent to start")
    stop.set()

    assert await asyncio.wait_for(task, 5) == EXIT_OK
    assert not nvml.initialized  # nvmlShutdown ran


async def test_events_left_from_a_previous_run_are_sent_on_start(
    fake_nvml: FakeNvml, make_settings: Callable[..., AgentSettings], receiver: Receiver
) -> None:
    settings = make_settings(service_url=receiver.base_url)
    first = Agent(settings, fake_nvml)
    await first.start()
    fake_nvml.inject_xid(1, 48)
    await eventually(lambda: first.metrics.events.labels(kind="xid")._value.get() == 1, what="spooled")
    await first.stop()

    await receiver.start()
    second = Agent(settings, FakeNvml(2))
    await second.start()
    try:
        await eventually(lambda: len(receiver.accepted) == 1, what="the leftover event")
    finally:
        await second.stop()
    assert receiver.accepted[0]["xid"] == 48


def test_sickbay_agent_without_a_service_url_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["agent", "--node-name", "n"])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1
    assert "service_url" in err[0]
