"""The whole pipeline on loopback: simulated fleet → real Prometheus → real Alertmanager → `sickbay serve`.

`Stack` is what the demo, the end-to-end test and the end-to-end benchmark run against:

- the fleet simulator (`FleetServer`, in process, real time) serving every node's dcgm-exporter;
- the simulated Kubernetes API (`KubeApiServer`, in process) seeded from the fleet itself — the same node
  names, and one pod per workload the fleet placed (gangs carry JobSet labels), plus a DaemonSet;
- Debian's Prometheus scraping the fleet every second and evaluating the rule bundle every second;
- Debian's Alertmanager routing every Sickbay class to Sickbay's webhook (`group_wait: 0s` for the
  hardware classes, `group_interval: 1s`, `send_resolved`, bearer credentials from a file), and,
  optionally, a copy of every notification to an in-process "probe" receiver that only records when it
  arrived (the floor of the pipeline, for latency comparisons);
- `sickbay serve` as a child process, acting on the simulated cluster through its kubeconfig.

Rules with a long `for:` cannot be exercised in seconds, so the stack runs Prometheus on a COPY of the
bundle whose listed alerts get shorter `for:` durations (`StackConfig.short_for`); the shipped file is
never changed.

For risk prediction (`StackConfig.history_s`, `prediction_interval_s`; `app.demo.prediction`), the fleet
first runs through a simulated past that is backfilled into the TSDB Prometheus starts on, and `sickbay
serve` scores risk from that Prometheus, starting rules-only until `promote_model` installs a model.

Every child process is started with free loopback ports and its own log file, and `Stack` always stops
everything it started, in reverse order, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import aiohttp
import yaml

from app.decide import footprint
from app.demo import prediction
from app.demo.configs import (
    DEFAULT_SHORT_FOR,
    GPU_OPERATOR_NS,
    POOL_LABEL,
    REPO,
    alertmanager_config,
    cluster_seed,
    quiet_fleet_config,
    workload_pod,
    write_policy,
    write_rules_copy,
    write_user_rules,
)
from app.demo.probe import Delivery, ProbeReceiver
from app.demo.processes import Child, StackError, binary, free_port, http_get, sickbay_command
from app.domain import NodePatch
from app.kube import client as kube_client
from app.kube import errors as kube_errors
from app.kube.port import KubePort
from app.sim.fleet import FleetSim, SimConfig, backfill, datasets, scrape
from app.sim.fleet.fleet import DEFAULT_START
from app.sim.fleet.server import FleetServer, ServerSettings
from app.sim.fleet.workloads import PodRef
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import EVENTS, PODS

__all__ = [
    "DEFAULT_SHORT_FOR",
    "POOL_LABEL",
    "REPO",
    "Delivery",
    "Injection",
    "Stack",
    "StackConfig",
    "StackError",
    "quiet_fleet_config",
    "write_rules_copy",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackConfig:
    nodes: int = 12
    seed: int = 7
    fleet: SimConfig | None = None  # default: quiet_fleet_config()
    tick_s: float = 0.5
    interval: str = "1s"  # Prometheus scrape and rule-evaluation interval
    short_for: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SHORT_FOR))
    group_wait_other: str = "1s"  # hardware classes always use 0s
    group_interval: str = "1s"
    healthy_delay: str = "3s"
    reconcile_interval_s: float = 0.5
    budgets: Mapping[str, Any] = field(
        default_factory=lambda: {
            "max_fraction": 1.0,
            "max_nodes": 1000,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 1000,
            "quarantines_per_minute": 600,
        }
    )
    policy: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # more section overrides
    pool: str = "h100"
    # A deleted pod stays Terminating for its grace period times this (30 s: 0.3 s), as behind a kubelet.
    grace_scale: float = 0.01
    probe: bool = False  # also deliver every notification to an in-process recording receiver
    token: str = "sickbay-e2e-token"  # noqa: S105 - a loopback demo credential
    identity: str = "sickbay-e2e"
    start_timeout_s: float = 60.0
    sickbay_env: Mapping[str, str] = field(default_factory=dict)
    # Simulated DCGM history backfilled into Prometheus before it starts (seconds; 0: none), one sample
    # every `history_step_s`; the fleet must then begin that long before now (`prediction.history_start`).
    history_s: float = 0.0
    history_step_s: float = prediction.STEP_S
    # Sickbay scores risk from this stack's Prometheus every so many seconds (None: it loads the shipped
    # model but scores nothing, as without a Prometheus URL); it starts with no model (`promote_model`).
    prediction_interval_s: float | None = None
    pod_owners: bool = False  # workload pods get owners (a Job per pod; a JobSet and a Job per rank)
    # How Prometheus scrapes each node's exporter: all the plain way, or `mixed`: every third node as
    # prometheus-operator does (honorLabels false, then true) and the plain way with an exporter that maps
    # no pods (`app.sim.fleet.scrape`).
    scrape: Literal["plain", "mixed"] = "plain"
    # A team's own rule (TeamGpuPowerBrake) and route to Sickbay: an alert no Sickbay rule knows.
    user_alerts: bool = False


@dataclass(frozen=True, slots=True)
class Injection:
    """What an injection through the fleet's control API started, and when (perf_counter and wall clock)."""

    at: float
    wall: datetime
    node: str
    gpu: int | None
    mode: str
    result: Mapping[str, Any]


class Stack:
    """`async with Stack(workdir, StackConfig(...)) as stack:` — everything up and ready, then stopped."""

    def __init__(
        self, workdir: Path, config: StackConfig | None = None, *, fleet: FleetSim | None = None
    ) -> None:
        """`fleet`: the simulated fleet to serve (the config's nodes, seed and fleet then do not apply),
        for a caller that prepares its past (`prediction.plant_precursor`) before the stack starts."""
        self.config = config or StackConfig()
        self.workdir = workdir
        self.logs = workdir / "logs"
        if fleet is None:
            cfg = self.config
            start = (
                prediction.history_start(span_s=cfg.history_s, step_s=cfg.history_step_s)
                if cfg.history_s > 0
                else DEFAULT_START
            )
            fleet = FleetSim(
                nodes=cfg.nodes, seed=cfg.seed, config=cfg.fleet or quiet_fleet_config(), start=start
            )
        self.fleet = fleet
        self.scrape_styles: dict[str, scrape.ScrapeStyle] = (
            scrape.mixed_styles(fleet.node_names) if self.config.scrape == "mixed" else {}
        )
        unmapped = frozenset(n for n, style in self.scrape_styles.items() if style == "plain")
        self.fleet_server = FleetServer(
            self.fleet,
            settings=ServerSettings(time_mode="realtime", tick_s=self.config.tick_s, unmapped_nodes=unmapped),
        )
        # Seeded once the fleet's past has run (`start`): the cluster mirrors the fleet as it is now.
        self.kube = KubeApiServer(grace_scale=self.config.grace_scale)
        self.history: datasets.DatasetReport | None = None
        self.backfill: backfill.BackfillStats | None = None
        self.models_dir = workdir / "models"
        self._prometheus_port: int | None = None
        self._backfilling: asyncio.Task[backfill.BackfillStats] | None = None
        self.probe = ProbeReceiver() if self.config.probe else None
        self.sickbay = Child("sickbay", self.logs / "sickbay.log")
        self.alertmanager = Child("alertmanager", self.logs / "alertmanager.log")
        self.prometheus = Child("prometheus", self.logs / "prometheus.log")
        self.kubeconfig = workdir / "kubeconfig"
        self.db = workdir / "sickbay.db"
        self.sickbay_url = ""
        self.alertmanager_url = ""
        self.prometheus_url = ""
        self.rules_file = workdir / "prometheus" / "sickbay-rules.e2e.yaml"
        self.policy_file = workdir / "policy.yaml"
        self._kube_port: kube_client.KubeClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._log_handler: logging.Handler | None = None
        self._log_levels: dict[str, int] = {}
        self._started = time.perf_counter()
        self.timings: dict[str, float] = {}  # seconds each start-up phase took

    # -- lifecycle -----------------------------------------------------------------------------------

    async def __aenter__(self) -> Stack:
        try:
            await self.start()
        except BaseException:
            self.print_logs()
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
            self.print_logs()
        await self.stop()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise StackError("the stack is not started")
        return self._session

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.token}"}

    async def start(self) -> None:
        self._started = time.perf_counter()
        self.logs.mkdir(parents=True, exist_ok=True)
        self._capture_in_process_logs()
        self._session = aiohttp.ClientSession()
        mark = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            self.timings[name] = now - mark
            mark = now

        if self.config.history_s > 0:
            await self._run_history()
            lap("history")
        self._seed_cluster()
        await self.fleet_server.start()
        await self.kube.start()
        self.kube.write_kubeconfig(self.kubeconfig)
        if self.probe is not None:
            await self.probe.start()
        lap("in-process")
        # Sickbay imports for seconds and Prometheus discovers its targets only after ~5 s: overlap them
        # (and the backfill). Sickbay's scoring job is told where Prometheus will listen.
        if self.config.prediction_interval_s is not None:
            self._prometheus_port = free_port()
        self._spawn_sickbay()
        await self._start_alertmanager()
        lap("alertmanager")
        if self._backfilling is not None:
            self.backfill = await self._backfilling
            self._backfilling = None
            lap("backfill")
        await self._start_prometheus()
        lap("prometheus")
        await self._wait_sickbay()
        lap("sickbay")
        await self._connect_client()
        await self._wait_scraped()
        lap("first scrapes")
        log.info(
            "stack ready in %.1fs (%s)",
            time.perf_counter() - self._started,
            ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items()),
        )

    async def stop(self) -> None:
        """Stop everything started, in reverse order; safe to call more than once and after a failed start."""
        if self._backfilling is not None:  # promtool runs in a thread: let it finish, whatever happens
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._backfilling)
            self._backfilling = None
        children = (self.prometheus, self.alertmanager, self.sickbay)
        for child in children:  # all at once: their shutdowns overlap
            child.terminate()
        for child in children:
            child.wait(timeout=15)
        if self._kube_port is not None:
            with contextlib.suppress(Exception):
                await self._kube_port.close()
            self._kube_port = None
        if self.probe is not None:
            await self.probe.stop()
        await self.kube.stop()
        await self.fleet_server.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._log_handler is not None:
            for name, level in self._log_levels.items():
                logger = logging.getLogger(name)
                logger.removeHandler(self._log_handler)
                logger.setLevel(level)
            self._log_handler.close()
            self._log_handler = None

    async def _run_history(self) -> None:
        """Run the fleet through its past (nothing else touches it yet), catch it up with the wall clock,
        and backfill that past into Prometheus' TSDB in the background while the other parts start."""
        cfg = self.config
        directory = self.workdir / "history"
        self.history = await asyncio.to_thread(
            prediction.write_history,
            self.fleet,
            directory,
            span_s=cfg.history_s,
            step_s=cfg.history_step_s,
        )
        self.fleet.step(max(0.0, time.time() - self.fleet.time_s))
        tsdb = self.workdir / "prometheus" / "data"
        self._backfilling = asyncio.create_task(
            asyncio.to_thread(prediction.backfill_history, directory, tsdb), name="stack-backfill"
        )

    def _seed_cluster(self) -> None:
        """The simulated cluster, mirroring the fleet (owners first: a pod's seed entry names its owner)."""
        document = cluster_seed(self.fleet, pool=self.config.pool, owners=self.config.pod_owners)
        pods = document.pop("pods")
        self.kube.load(document)
        self.kube.load({"pods": pods})

    def _capture_in_process_logs(self) -> None:
        handler = logging.FileHandler(self.logs / "in-process.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.INFO)
        for name in ("app.sim", "aiohttp.server"):
            logger = logging.getLogger(name)
            self._log_levels[name] = logger.level
            logger.addHandler(handler)
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
        self._log_handler = handler

    def log_files(self) -> list[Path]:
        return sorted(self.logs.glob("*.log"))

    def print_logs(self, chars: int = 4000, stream: IO[str] | None = None) -> None:
        out = stream or sys.stderr
        for path in self.log_files():
            try:
                text = path.read_text(errors="replace")[-chars:]
            except OSError:
                continue
            print(f"\n===== {path} (last {chars} chars) =====\n{text}", file=out)

    async def _wait_http(self, child: Child, url: str, *, within_s: float) -> bool:
        """True once `url` answers 200; False if the child exited (e.g. its port was taken)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if not child.running:
                return False
            status, _ = await http_get(self.session, url)
            if status == 200:
                return True
            await asyncio.sleep(0.05)
        raise StackError(f"{child.name} not ready after {within_s:.0f}s:\n{child.tail()}")

    async def _start_child(
        self,
        child: Child,
        argv_for_port: Any,
        ready_path: str,
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> str:
        for attempt in range(3):  # a port picked free can be taken before the child binds it: retry
            port = port if attempt == 0 and port is not None else free_port()
            child.start(argv_for_port(port), env=env, cwd=REPO)
            url = f"http://127.0.0.1:{port}"
            if await self._wait_http(child, url + ready_path, within_s=self.config.start_timeout_s):
                return url
            child.wait(timeout=5)
            if "address already in use" not in child.tail().lower():
                break
        raise StackError(f"{child.name} exited during start:\n{child.tail()}")

    def _spawn_sickbay(self, port: int | None = None) -> None:
        """Start `sickbay serve` on a free port (or `port`) without waiting for it (it takes seconds to
        import)."""
        cfg = self.config
        write_policy(self.policy_file, healthy_delay=cfg.healthy_delay, budgets=cfg.budgets, more=cfg.policy)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
        env |= {
            "SICKBAY_AUTH__TOKEN": cfg.token,
            "SICKBAY_POLICY_FILE": str(self.policy_file),
            "SICKBAY_RECONCILE_INTERVAL_S": str(cfg.reconcile_interval_s),
            "SICKBAY_IDENTITY": cfg.identity,
            "SICKBAY_PIPELINE__RECHECK_POLL_S": "0.25",  # second-scale re-checks for a run of seconds
            "PYTHONUNBUFFERED": "1",
            **self._prediction_env(),
            **cfg.sickbay_env,
        }
        port = port or free_port()
        argv = [
            *sickbay_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            str(self.db),
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        self.sickbay.start(argv, env=env, cwd=REPO)
        self.sickbay_url = f"http://127.0.0.1:{port}"

    def _prediction_env(self) -> dict[str, str]:
        """Risk scoring from this stack's Prometheus, starting with an empty models directory."""
        interval = self.config.prediction_interval_s
        if interval is None or self._prometheus_port is None:
            return {}
        self.models_dir.mkdir(parents=True, exist_ok=True)
        return {
            "SICKBAY_PREDICTION__ENABLED": "true",
            "SICKBAY_PREDICTION__PROMETHEUS_URL": f"http://127.0.0.1:{self._prometheus_port}",
            "SICKBAY_PREDICTION__INTERVAL_S": str(interval),
            "SICKBAY_PREDICTION__MODELS_DIR": str(self.models_dir),
            "SICKBAY_PREDICTION__RETRAIN_ENABLED": "false",
        }

    async def _wait_sickbay(self) -> None:
        """Until Sickbay is ready; if its port was taken meanwhile, restart it on another one and point
        Alertmanager at it (configuration rewritten, then reloaded)."""
        for _attempt in range(3):
            if await self._wait_http(
                self.sickbay, self.sickbay_url + "/readyz", within_s=self.config.start_timeout_s
            ):
                return
            self.sickbay.wait(timeout=5)
            if "address already in use" not in self.sickbay.tail().lower():
                break
            self._spawn_sickbay()
            self._write_alertmanager_config()
            async with self.session.post(f"{self.alertmanager_url}/-/reload") as response:
                if response.status != 200:
                    raise StackError(
                        f"Alertmanager did not reload: {response.status} {await response.text()}"
                    )
        raise StackError(f"sickbay exited during start:\n{self.sickbay.tail()}")

    def _write_alertmanager_config(self) -> Path:
        cfg = self.config
        token_file = self.workdir / "alertmanager" / "sickbay-token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(cfg.token)
        token_file.chmod(0o600)
        config = self.workdir / "alertmanager" / "alertmanager.yml"
        document = alertmanager_config(
            sickbay_url=self.sickbay_url,
            token_file=token_file,
            probe_url=self.probe.url if self.probe else None,
            group_wait_other=cfg.group_wait_other,
            group_interval=cfg.group_interval,
            user_route=cfg.user_alerts,
        )
        config.write_text(json.dumps(document, indent=2))  # JSON is YAML: no quoting surprises in matchers
        return config

    async def _start_alertmanager(self) -> None:
        config = self._write_alertmanager_config()
        data = self.workdir / "alertmanager" / "data"

        def argv(port: int) -> list[str]:
            return [
                binary("prometheus-alertmanager", "/usr/bin/prometheus-alertmanager"),
                f"--config.file={config}",
                f"--storage.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=debug",
            ]

        self.alertmanager_url = await self._start_child(self.alertmanager, argv, "/-/ready")

    async def _start_prometheus(self) -> None:
        cfg = self.config
        write_rules_copy(self.rules_file, cfg.short_for)
        directory = self.workdir / "prometheus"
        rule_files = [self.rules_file]
        if cfg.user_alerts:
            rule_files.append(write_user_rules(self.workdir / "prometheus" / "team-rules.yaml"))
        path = self.fleet_server.write_prometheus_config(
            directory,
            scrape_interval=cfg.interval,
            rule_files=tuple(rule_files),
            styles=self.scrape_styles,
            exporter_pods=self._exporter_pods(),
        )
        document = yaml.safe_load(path.read_text())
        document["global"]["evaluation_interval"] = cfg.interval
        document["global"]["scrape_timeout"] = cfg.interval
        am_address = self.alertmanager_url.removeprefix("http://")
        document["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am_address]}]}]}
        path.write_text(yaml.safe_dump(document, sort_keys=False))

        def argv(port: int) -> list[str]:
            return [
                binary("prometheus", "/usr/bin/prometheus"),
                f"--config.file={path}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.retention.time={retention_d}d",
                "--log.level=info",
            ]

        retention_d = 1 + math.ceil(cfg.history_s / 86400.0)  # the backfilled past must outlive retention
        wanted = self._prometheus_port
        self.prometheus_url = await self._start_child(self.prometheus, argv, "/-/ready", port=wanted)
        if wanted is not None and not self.prometheus_url.endswith(f":{wanted}"):
            # Its port was taken meanwhile: Sickbay's scoring job must be told the new one (same listener).
            self._prometheus_port = int(self.prometheus_url.rsplit(":", 1)[1])
            self.sickbay.stop()
            self._spawn_sickbay(port=int(self.sickbay_url.rsplit(":", 1)[1]))

    def _exporter_pods(self) -> dict[str, scrape.ExporterPod]:
        """The dcgm-exporter DaemonSet's pod on each node, as the simulated cluster named it."""
        found: dict[str, scrape.ExporterPod] = {}
        for index, node in enumerate(self.fleet.node_names):
            pods = self.kube.store.items(PODS, namespace=GPU_OPERATOR_NS)
            name = next(
                (p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName") == node), None
            )
            if name is not None:
                found[node] = scrape.ExporterPod(GPU_OPERATOR_NS, name, scrape.pod_ip(index))
        return found

    def maps_pods(self, node: str) -> bool:
        """Whether `node`'s exporter labels its series with the pod using each GPU."""
        return node not in self.fleet_server.settings.unmapped_nodes

    def exporter_pod(self, node: str) -> str:
        """The name of the exporter pod that serves `node`'s metrics."""
        return self._exporter_pods()[node].name

    async def _connect_client(self) -> None:
        self._kube_port = await kube_client.connect(kubeconfig=str(self.kubeconfig), qps=1000.0, burst=1000)

    @property
    def cluster(self) -> KubePort:
        """Sickbay's own Kubernetes port (`app.kube`) on the simulated cluster, for reading it back."""
        if self._kube_port is None:
            raise StackError("the stack is not started")
        return self._kube_port

    async def _wait_scraped(self) -> None:
        """Every target up and scraped a few times, the rules loaded, and Alertmanager discovered."""
        expected = self.config.nodes + 1
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            up = await self.query("count(count_over_time(up[1m]) >= 3 and up == 1)")
            rules = await self._prom_json("/api/v1/rules")
            ams = await self._prom_json("/api/v1/alertmanagers")
            ready = (
                bool(up)
                and int(float(up[0]["value"][1])) >= expected
                and bool(rules.get("groups"))
                and bool(ams.get("activeAlertmanagers"))
            )
            if ready:
                return
            if time.monotonic() > deadline:
                raise StackError(
                    f"Prometheus never scraped all {expected} targets (up: {up}, rules: "
                    f"{len(rules.get('groups', []))} groups, alertmanagers: {ams})"
                )
            for child in (self.prometheus, self.alertmanager, self.sickbay):
                if not child.running:
                    raise StackError(f"{child.name} exited:\n{child.tail()}")
            await asyncio.sleep(0.2)

    # -- talking to the parts ------------------------------------------------------------------------

    async def _prom_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        status, body = await http_get(self.session, self.prometheus_url + path, params=params or {})
        if status != 200:
            return {}
        data: dict[str, Any] = json.loads(body).get("data") or {}
        return data

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """A PromQL instant query's result vector (empty on any error)."""
        data = await self._prom_json("/api/v1/query", {"query": promql})
        result: list[dict[str, Any]] = data.get("result") or []
        return result

    async def inject(self, node: str, gpu: int | None, mode: str, **fields: Any) -> Injection:
        """Start a fault through the fleet's control API (`POST /inject`)."""
        body = {"node": node, "gpu": gpu, "mode": mode, **fields}
        wall = datetime.now(UTC)
        at = time.perf_counter()
        async with self.session.post(f"{self.fleet_server.url}/inject", json=body) as response:
            result = await response.json()
            if response.status != 200:
                raise StackError(f"inject {body} failed: {response.status} {result}")
        return Injection(at=at, wall=wall, node=node, gpu=gpu, mode=mode, result=result)

    async def actions(self, limit: int = 1000) -> dict[str, Any]:
        """Sickbay's journal (`GET /api/v1/actions`): items (faults with plans) and outcomes."""
        async with self.session.get(
            f"{self.sickbay_url}/api/v1/actions", params={"limit": str(limit)}, headers=self.headers
        ) as response:
            data: dict[str, Any] = await response.json()
            return data

    async def sickbay_metrics(self) -> str:
        """Sickbay's `/metrics` text (empty on any error)."""
        status, body = await http_get(self.session, f"{self.sickbay_url}/metrics", headers=self.headers)
        return body.decode(errors="replace") if status == 200 else ""

    async def sickbay_get(self, path: str) -> Any:
        async with self.session.get(f"{self.sickbay_url}{path}", headers=self.headers) as response:
            return await response.json()

    async def annotate_node(self, node: str, key: str, value: str) -> None:
        """Set one annotation on a node (read, then write guarded by its resourceVersion; retried on 409)."""
        for _ in range(10):
            current = await self.cluster.get_node(node)
            try:
                await self.cluster.patch_node(
                    NodePatch(
                        node=node, resource_version=current.resource_version, annotations=((key, value),)
                    )
                )
                return
            except kube_errors.ConflictError:
                continue
        raise StackError(f"could not annotate {node}: it kept changing")

    async def remediation_done(self, node: str) -> None:
        """What a remediator does when finished: repair the node in the fleet (replace what must be
        replaced, reboot) and set `sickbay.io/remediation-done` on the Node."""
        self.repair(node)
        await self.annotate_node(node, footprint.REMEDIATION_DONE, "true")

    def repair(self, node: str) -> None:
        """What a remediator does: replace the GPUs that need it and reboot the node (in the fleet)."""
        self.fleet.repair(node)

    def gpu_pod(self, node: str, gpu: int) -> PodRef | None:
        """The workload the exporter attributes this GPU to right now."""
        return self.fleet.node(node).gpus[gpu].pod

    def attach_workload(
        self, node: str, gpu: int, *, namespace: str, name: str, job: str | None = None
    ) -> PodRef:
        """A new single-GPU workload lands on a GPU: in the fleet (the exporter attributes the GPU to it)
        and as a pod in the cluster (what its controller would have created)."""
        state = self.fleet.node(node).gpus[gpu]
        ref = PodRef(namespace, name, "main")
        state.pod = ref
        state.util = 90.0
        self.kube.load({"pods": [workload_pod(ref, node=node, gpus=1, job=job or name, gang=False)]})
        return ref

    async def validate_model(self, version: str, note: str) -> dict[str, Any]:
        """Validate a model version on this fleet as an operator would (`sickbay model validate --force`):
        without it the proactive ladder runs in shadow, taints nothing, and the scene has nothing to show."""
        body = {"version": version, "force": True, "who": "demo", "note": note}
        async with self.session.post(
            f"{self.sickbay_url}/api/v1/model/validate", json=body, headers=self.headers
        ) as response:
            data: dict[str, Any] = await response.json()
            if response.status != 200 or data.get("mode") != "acting":
                raise StackError(f"could not validate model {version}: {response.status} {data}")
            return data

    def promote_model(self, source: Path = REPO / "models") -> prediction.ModelInfo:
        """Install the trained model in Sickbay's models directory; its next scoring cycle loads it."""
        return prediction.promote_model(source, self.models_dir)

    def events(self, *, reason: str) -> list[dict[str, Any]]:
        """Events with this reason in the simulated cluster, oldest first (read in process)."""
        found = [e for e in self.kube.store.items(EVENTS) if e.get("reason") == reason]
        return sorted(found, key=lambda e: str(e.get("firstTimestamp") or e.get("eventTime") or ""))

    def exporter_instance_up(self, node: str) -> bool:
        return self.fleet.node(node).exporter_up(self.fleet.time_s)

    @property
    def uptime_s(self) -> float:
        return time.perf_counter() - self._started

    def kubectl_hint(self) -> str:
        return f"kubectl --kubeconfig {self.kubeconfig} get nodes"
