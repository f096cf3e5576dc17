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
import logging
import math
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import aiohttp

from app.demo import launch, prediction
from app.demo.configs import (
    DEFAULT_SHORT_FOR,
    POOL_LABEL,
    REPO,
    cluster_seed,
    quiet_fleet_config,
    write_policy,
    write_rules_copy,
    write_user_rules,
)
from app.demo.controls import Injection, StackControls
from app.demo.probe import Delivery, ProbeReceiver
from app.demo.processes import Child, StackError, free_port, start_on_free_port, wait_http
from app.demo.stack_config import StackConfig
from app.kube import client as kube_client
from app.sim.fleet import FleetSim, backfill, datasets, scrape
from app.sim.fleet.fleet import DEFAULT_START
from app.sim.fleet.server import FleetServer, ServerSettings
from app.sim.kubeapi import KubeApiServer

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


class Stack(StackControls):
    """`async with Stack(workdir, StackConfig(...)) as stack:` — everything up and ready, then stopped.

    What a started stack offers its scenes (queries, injections, Sickbay's API) is `StackControls`'.
    """

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
        self._start_sickbay()
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

    def _start_sickbay(self, port: int | None = None) -> None:
        """Start `sickbay serve` on a free port (or `port`) without waiting for it (it takes seconds to
        import)."""
        cfg = self.config
        write_policy(self.policy_file, healthy_delay=cfg.healthy_delay, budgets=cfg.budgets, more=cfg.policy)
        scoring = launch.prediction_env(
            cfg.prediction_interval_s, prometheus_port=self._prometheus_port, models_dir=self.models_dir
        )
        env = launch.sickbay_env(cfg, policy_file=self.policy_file, prediction=scoring)
        port = port or free_port()
        self.sickbay.start(
            launch.sickbay_argv(port, db=self.db, kubeconfig=self.kubeconfig), env=env, cwd=REPO
        )
        self.sickbay_url = f"http://127.0.0.1:{port}"

    async def _wait_sickbay(self) -> None:
        """Until Sickbay is ready; if its port was taken meanwhile, restart it on another one and point
        Alertmanager at it (configuration rewritten, then reloaded)."""
        for _attempt in range(3):
            if await wait_http(
                self.session, self.sickbay, self.sickbay_url + "/readyz", within_s=self.config.start_timeout_s
            ):
                return
            self.sickbay.wait(timeout=5)
            if "address already in use" not in self.sickbay.tail().lower():
                break
            self._start_sickbay()
            self._write_alertmanager_config()
            async with self.session.post(f"{self.alertmanager_url}/-/reload") as response:
                if response.status != 200:
                    raise StackError(
                        f"Alertmanager did not reload: {response.status} {await response.text()}"
                    )
        raise StackError(f"sickbay exited during start:\n{self.sickbay.tail()}")

    def _write_alertmanager_config(self) -> Path:
        return launch.write_alertmanager_config(
            self.workdir,
            self.config,
            sickbay_url=self.sickbay_url,
            probe_url=self.probe.url if self.probe else None,
        )

    async def _start_alertmanager(self) -> None:
        config = self._write_alertmanager_config()
        data = self.workdir / "alertmanager" / "data"
        self.alertmanager_url = await start_on_free_port(
            self.session,
            self.alertmanager,
            lambda port: launch.alertmanager_argv(config, data, port),
            "/-/ready",
            within_s=self.config.start_timeout_s,
            cwd=REPO,
        )

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
            exporter_pods=launch.exporter_pods(self.fleet, self.kube),
        )
        launch.point_prometheus(path, interval=cfg.interval, alertmanager_url=self.alertmanager_url)
        retention_d = 1 + math.ceil(cfg.history_s / 86400.0)  # the backfilled past must outlive retention
        wanted = self._prometheus_port
        self.prometheus_url = await start_on_free_port(
            self.session,
            self.prometheus,
            lambda port: launch.prometheus_argv(path, directory / "data", port, retention_d=retention_d),
            "/-/ready",
            within_s=cfg.start_timeout_s,
            cwd=REPO,
            port=wanted,
        )
        if wanted is not None and not self.prometheus_url.endswith(f":{wanted}"):
            # Its port was taken meanwhile: Sickbay's scoring job must be told the new one (same listener).
            self._prometheus_port = int(self.prometheus_url.rsplit(":", 1)[1])
            self.sickbay.stop()
            self._start_sickbay(port=int(self.sickbay_url.rsplit(":", 1)[1]))

    async def _connect_client(self) -> None:
        self._kube_port = await kube_client.connect(kubeconfig=str(self.kubeconfig), qps=1000.0, burst=1000)

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
