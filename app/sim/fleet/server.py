"""Every node's dcgm-exporter, kube-state-metrics and a control API, from one aiohttp process on loopback.

One port for the whole fleet: `/nodes/{node}/metrics` is node `node`'s exporter. Prometheus still sees one
target per node — the target list (file_sd, or http_sd from `/targets`) gives each node its own
`__metrics_path__` and a distinct `instance` (`<node>:9400`), under job `dcgm-exporter`. A node whose
exporter is restarting or rebooting answers 503, so its target reads `up == 0`, as a dead exporter would.

Control API (JSON): `POST /inject` {node, gpu, mode, lead_time_s?, xid?, duration_s?, version?,
recovery_action?}, `GET /truth[?pending=1]`, `POST /advance` {seconds} (manual time only), `POST /drain`
and `POST /uncordon` {node}, `GET /nodes`, `GET /targets`, `GET /healthz`.

Two time modes: "manual" (only `/advance` or the owner's `sim.step` move time; for tests) and "realtime"
(a background task steps the simulation by the elapsed loop time times `speed`, every `tick_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import yaml
from aiohttp import web

from app.sim.fleet import exposition, scrape
from app.sim.fleet.exposition import HostnameLabel
from app.sim.fleet.fleet import FleetSim
from app.sim.fleet.injection import InjectionError
from app.sim.fleet.truth import iso

log = logging.getLogger(__name__)

TimeMode = Literal["manual", "realtime"]
_MAX_BODY = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    time_mode: TimeMode = "manual"
    tick_s: float = 1.0
    speed: float = 1.0
    hostname_label: HostnameLabel = "Hostname"
    # Nodes whose exporter maps no pods (dcgm-exporter without --kubernetes): no pod/namespace/container.
    unmapped_nodes: frozenset[str] = frozenset()


SIM = web.AppKey("sim", FleetSim)
SETTINGS = web.AppKey("settings", ServerSettings)


def _json(data: Any, *, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise web.HTTPBadRequest(
            text='{"error": "body must be JSON"}', content_type="application/json"
        ) from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(
            text='{"error": "body must be a JSON object"}', content_type="application/json"
        )
    return data


async def node_metrics(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    name = request.match_info["node"]
    try:
        observation = sim.observe_node(name)
    except KeyError:
        return web.Response(status=404, text=f"no node {name}\n")
    if not observation.exporter_up:
        return web.Response(status=503, text="dcgm-exporter is not running\n")
    settings = request.app[SETTINGS]
    text = exposition.render_node(
        observation,
        hostname_label=settings.hostname_label,
        pod_labels=observation.node not in settings.unmapped_nodes,
        view=sim.config.exporter,
    )
    return web.Response(body=text.encode(), headers={"Content-Type": exposition.CONTENT_TYPE})


async def kube_state_metrics(request: web.Request) -> web.Response:
    text = exposition.render_kube_state(request.app[SIM].gpu_capacity())
    return web.Response(body=text.encode(), headers={"Content-Type": exposition.CONTENT_TYPE})


async def inject(request: web.Request) -> web.Response:
    body = await _body(request)
    node, mode = body.get("node"), body.get("mode")
    if not isinstance(node, str) or not isinstance(mode, str):
        return _error(400, "`node` and `mode` are required strings")
    gpu = body.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool)):
        return _error(400, "`gpu` must be an integer")
    try:
        injected = request.app[SIM].inject(
            node,
            gpu,
            mode,
            lead_time_s=_number(body, "lead_time_s"),
            xid=_integer(body, "xid"),
            duration_s=_number(body, "duration_s"),
            version=body.get("version") if isinstance(body.get("version"), str) else None,
            recovery_action=_integer(body, "recovery_action") or 0,
        )
    except InjectionError as exc:
        return _error(400, str(exc))
    return _json(injected.as_dict())


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"`{key}` must be a number"}), content_type="application/json"
        )
    return float(value)


def _integer(body: dict[str, Any], key: str) -> int | None:
    value = _number(body, key)
    return None if value is None else int(value)


async def truth(request: web.Request) -> web.Response:
    pending = request.query.get("pending", "") in ("1", "true", "yes")
    return _json(request.app[SIM].truth(include_pending=pending).as_dict())


async def advance(request: web.Request) -> web.Response:
    if request.app[SETTINGS].time_mode != "manual":
        return _error(409, "time is real-time; /advance works in manual mode only")
    seconds = _number(await _body(request), "seconds")
    if seconds is None or seconds < 0:
        return _error(400, "`seconds` must be a non-negative number")
    sim = request.app[SIM]
    sim.step(seconds)
    return _json({"now": iso(sim.time_s), "time_s": sim.time_s})


async def drain(request: web.Request) -> web.Response:
    return await _node_action(request, "drain")


async def uncordon(request: web.Request) -> web.Response:
    return await _node_action(request, "uncordon")


async def _node_action(request: web.Request, action: str) -> web.Response:
    node = (await _body(request)).get("node")
    sim = request.app[SIM]
    if not isinstance(node, str) or node not in sim.node_names:
        return _error(400, "`node` must name a node")
    if action == "drain":
        return _json({"node": node, "interrupted": sim.drain(node)})
    sim.uncordon(node)
    return _json({"node": node})


async def nodes(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    t = sim.time_s
    return _json(
        [
            {
                "node": n.name,
                "exporter_up": n.exporter_up(t),
                "schedulable": n.schedulable(t),
                "faulted": n.faulted,
                "cordoned": n.cordoned,
                "driver_version": n.driver_version,
                "allocatable": n.allocatable(t),
                "gpus": [
                    {"gpu": g.identity.index, "uuid": g.identity.uuid, "present": g.present} for g in n.gpus
                ],
            }
            for n in sim.nodes
        ]
    )


async def targets(request: web.Request) -> web.Response:
    host = request.host
    return _json(exporter_targets(request.app[SIM], address=host) + kube_state_targets(address=host))


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _ticker(app: web.Application) -> AsyncIterator[None]:
    """Real-time mode: step the simulation by elapsed loop time x speed, every tick."""
    settings, sim = app[SETTINGS], app[SIM]
    loop = asyncio.get_running_loop()

    async def run() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(settings.tick_s)
            now = loop.time()
            sim.step((now - last) * settings.speed)
            last = now

    task = asyncio.create_task(run(), name="fleet-sim-ticker")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def build_app(sim: FleetSim, settings: ServerSettings | None = None) -> web.Application:
    settings = settings or ServerSettings()
    app = web.Application(client_max_size=_MAX_BODY)
    app[SIM] = sim
    app[SETTINGS] = settings
    app.router.add_get("/nodes/{node}/metrics", node_metrics)
    app.router.add_get("/kube-state-metrics/metrics", kube_state_metrics)
    app.router.add_post("/inject", inject)
    app.router.add_get("/truth", truth)
    app.router.add_post("/advance", advance)
    app.router.add_post("/drain", drain)
    app.router.add_post("/uncordon", uncordon)
    app.router.add_get("/nodes", nodes)
    app.router.add_get("/targets", targets)
    app.router.add_get("/healthz", healthz)
    if settings.time_mode == "realtime":
        app.cleanup_ctx.append(_ticker)
    return app


# -- scrape configuration ---------------------------------------------------------------------------


def exporter_targets(sim: FleetSim, *, address: str, node_label: bool = False) -> list[dict[str, Any]]:
    """file_sd/http_sd target groups: one per node, each with its own metrics path and instance."""
    groups = []
    for name in sim.node_names:
        labels = {
            "__metrics_path__": f"/nodes/{name}/metrics",
            "instance": exposition.exporter_instance(name),
        }
        if node_label:
            labels["node"] = name
        groups.append({"targets": [address], "labels": labels})
    return groups


def kube_state_targets(*, address: str) -> list[dict[str, Any]]:
    return [
        {
            "targets": [address],
            "labels": {
                "__metrics_path__": "/kube-state-metrics/metrics",
                "instance": exposition.KSM_INSTANCE,
            },
        }
    ]


def write_prometheus_config(
    directory: Path,
    sim: FleetSim,
    *,
    address: str,
    scrape_interval: str = "15s",
    node_label: bool = False,
    rule_files: tuple[Path, ...] = (),
    styles: Mapping[str, scrape.ScrapeStyle] | None = None,
    exporter_pods: Mapping[str, scrape.ExporterPod] | None = None,
) -> Path:
    """Write file_sd target files and a prometheus.yml that scrapes every node as its own target.

    `styles` says how each node's exporter is scraped (`app.sim.fleet.scrape`; default: all plain);
    `exporter_pods` names the exporter pod behind each node for the operator styles.
    """
    directory.mkdir(parents=True, exist_ok=True)
    styles = styles or {}
    pods = exporter_pods or scrape.default_exporter_pods(sim.node_names)
    plain = [
        g
        for g in exporter_targets(sim, address=address, node_label=node_label)
        if _style(g, styles) == "plain"
    ]
    dcgm = directory / "dcgm-exporter-targets.json"
    ksm = directory / "kube-state-metrics-targets.json"
    dcgm.write_text(json.dumps(plain, indent=2) + "\n")
    ksm.write_text(json.dumps(kube_state_targets(address=address), indent=2) + "\n")
    operator_files: dict[scrape.ScrapeStyle, Path] = {}
    for style in ("operator", "honor"):
        groups = [
            scrape.operator_group(address=address, metrics_path=f"/nodes/{name}/metrics", pod=pods[name])
            for name in sim.node_names
            if styles.get(name, "plain") == style
        ]
        if groups:
            operator_files[style] = directory / f"dcgm-exporter-{style}-targets.json"
            operator_files[style].write_text(json.dumps(groups, indent=2) + "\n")
    configs = (
        scrape_configs(dcgm_file=dcgm, ksm_file=ksm)
        if plain
        else scrape_configs(dcgm_file=None, ksm_file=ksm)
    )
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [*configs, *scrape.operator_scrape_configs(operator_files)],
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _style(group: dict[str, Any], styles: Mapping[str, scrape.ScrapeStyle]) -> scrape.ScrapeStyle:
    name = str(group["labels"]["__metrics_path__"]).split("/")[2]
    return styles.get(name, "plain")


def scrape_configs(*, dcgm_file: Path | None, ksm_file: Path) -> list[dict[str, Any]]:
    """The plain `scrape_configs` entries for the simulated fleet (job names as the Helm chart's)."""
    dcgm = [{"job_name": exposition.EXPORTER_JOB, "file_sd_configs": [{"files": [str(dcgm_file)]}]}]
    return [
        *(dcgm if dcgm_file is not None else []),
        {"job_name": exposition.KSM_JOB, "file_sd_configs": [{"files": [str(ksm_file)]}]},
    ]


# -- running it -------------------------------------------------------------------------------------


class FleetServer:
    """The simulated exporters on loopback: `async with FleetServer(sim) as server: server.url`."""

    def __init__(
        self,
        sim: FleetSim,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        settings: ServerSettings | None = None,
    ) -> None:
        self.sim = sim
        self.host = host
        self.port = port
        self.settings = settings or ServerSettings()
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    async def start(self) -> None:
        runner = web.AppRunner(build_app(self.sim, self.settings), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("simulated fleet of %d nodes on %s", len(self.sim.nodes), self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FleetServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def write_prometheus_config(self, directory: Path, **kwargs: Any) -> Path:
        return write_prometheus_config(directory, self.sim, address=self.address, **kwargs)
