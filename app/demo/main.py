"""`sickbay demo` (and `python -m app.demo`): the whole pipeline on loopback, a scripted run of GPU faults,
a live timeline, a summary table and an HTML report.

Installs nothing: it needs Debian's `prometheus` and `prometheus-alertmanager` (the Makefile's `setup`
installs them). Everything it starts — the simulated fleet and Kubernetes API in this process,
Prometheus, Alertmanager and `sickbay serve` as children — is stopped when it ends, on an error, on
Ctrl-C or on SIGTERM. With `--keep` the cluster stays up after the scenario until Ctrl-C, for `kubectl`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from app.demo import prediction, report, verifying
from app.demo.scenario import CastingError, Scenario
from app.demo.stack import Stack, StackConfig, quiet_fleet_config
from app.demo.timeline import Event, Recorder, Scene
from app.sim.fleet import FleetSim, SimConfig

HEALTHY_DELAY_S = 5
BUDGET_NODES = 8
SOFT_PERSIST_S = 6  # a soft signal becomes visible on its node after this long (shipped: 15m)
SCORING_INTERVAL_S = 5.0  # Sickbay's risk scoring cycle (default 5 min)
SUMMARY_TITLE = "Scenes: latency from the metric change to each step"
STYLE = {
    "signal": "bold white",
    "precursor": "dim",
    "alert": "yellow",
    "decision": "cyan",
    "action": "magenta",
    "cluster": "green",
    "note": "white",
}
STATUS_STYLE = {"done": "green", "blocked": "yellow", "timed out": "red", "running": "cyan", "waiting": "dim"}


def demo_fleet_config() -> SimConfig:
    """Injected faults only, an HBM precursor compressed into half a minute (a demo ASSUMPTION), and
    gangs of at most 8 nodes."""
    base = quiet_fleet_config()
    return replace(
        base,
        shapes=replace(base.shapes, hbm_sbe_start_per_h=7200.0, hbm_sbe_end_per_h=150000.0),
        workloads=replace(base.workloads, gang_nodes=(2, 4, 4, 8)),  # gangs leave room for other jobs
    )


def stack_config(nodes: int, seed: int) -> StackConfig:
    return StackConfig(
        nodes=nodes,
        seed=seed,
        fleet=demo_fleet_config(),
        healthy_delay=f"{HEALTHY_DELAY_S}s",
        reconcile_interval_s=0.5,
        budgets={
            "max_fraction": 0.25,
            "max_nodes": BUDGET_NODES,
            "per_pool_max_fraction": 0.25,
            "per_pool_max_nodes": 10,
            "quarantines_per_minute": 30,
        },
        identity="sickbay-demo",
        grace_scale=0.01,
        probe=True,
        token="sickbay-demo-token",  # noqa: S106 - a loopback demo credential
        history_s=prediction.HISTORY_S,
        prediction_interval_s=SCORING_INTERVAL_S,
        pod_owners=True,
        # Every third node scraped as prometheus-operator does (honorLabels false, then true), the rest
        # the plain way from exporters that map no pods; and a team's own alert routed to Sickbay.
        scrape="mixed",
        user_alerts=True,
        policy={
            "transient": {"persist_after": f"{SOFT_PERSIST_S}s"},
            "verification": verifying.policy_section(),
        },
    )


def demo_fleet(config: StackConfig) -> tuple[FleetSim, prediction.Forecast]:
    """The demo's fleet at the start of its simulated past, one GPU's HBM set to degrade in it, and the
    forecast the prediction scenes fill in."""
    start = prediction.history_start(span_s=config.history_s, step_s=config.history_step_s)
    sim = FleetSim(nodes=config.nodes, seed=config.seed, config=config.fleet, start=start)
    precursor = prediction.plant_precursor(sim, history_end=start + config.history_s)
    return sim, prediction.Forecast(precursor=precursor, history_s=config.history_s)


# -- display -----------------------------------------------------------------------------------------


def event_line(event: Event) -> Text:
    text = Text()
    text.append(f"+{event.t:6.2f}s ", style="dim")
    text.append(f"{event.node:<13} ", style="bold")
    text.append(f"{event.kind:<9} ", style=STYLE.get(event.kind, ""))
    text.append(event.text)
    return text


def scene_table(scenes: Sequence[Scene], *, title: str) -> Table:
    table = Table(title=title, expand=True, title_justify="left")
    table.add_column("#", no_wrap=True)
    table.add_column("scene", ratio=3, min_width=28)
    table.add_column("node", no_wrap=True)
    table.add_column("class", no_wrap=True)
    for name in report.SUMMARY_HEADER[4:9]:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("outcome", ratio=2, min_width=12, overflow="fold")
    for scene, row in zip(scenes, report.summary_rows(scenes), strict=True):
        row[-1] = f"[{STATUS_STYLE.get(scene.status, '')}]{escape(row[-1])}[/]"
        table.add_row(*(escape(c) for c in row[:-1]), row[-1])
    return table


class Display:
    """A live view in a terminal; plain lines, one per event, anywhere else (CI logs, pipes)."""

    def __init__(self, console: Console, recorder: Recorder, header: str) -> None:
        self.console = console
        self.recorder = recorder
        self.header = header
        self.live: Live | None = None
        if not console.is_terminal:
            recorder.on_event = lambda event: console.print(event_line(event))

    def render(self) -> Group:
        events = self.recorder.sorted_events()[-16:]
        log = (
            Text("\n").join(event_line(e) for e in events) if events else Text("waiting for the first fault…")
        )
        return Group(
            Panel(Text(self.header), title="Sickbay demo", border_style="blue"),
            Panel(log, title="timeline: signal → alert → decision → action → cluster", border_style="dim"),
            scene_table(self.recorder.scenes, title=SUMMARY_TITLE),
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        if not self.console.is_terminal:
            yield
            return
        with Live(
            self.render(), console=self.console, refresh_per_second=4, get_renderable=self.render
        ) as live:
            self.live = live
            yield
        self.live = None


# -- the run -------------------------------------------------------------------------------------------


def run_notes(config: StackConfig, forecast: prediction.Forecast) -> tuple[str, ...]:
    """How this run differs from a deployment, for the report."""
    return (
        "Prometheus runs on a generated copy of rules/prometheus/sickbay-rules.yaml with shorter `for:` on "
        + ", ".join(f"{k} ({v})" for k, v in sorted(config.short_for.items()))
        + "; everything else is the shipped bundle.",
        f"Policy: rules/policy.yaml with healthy_delay {HEALTHY_DELAY_S}s and a budget of at most "
        f"{BUDGET_NODES} quarantined nodes (and 25% of the pool), so the storm meets the breaker.",
        "The HBM precursor of scene 'HBM degradation' is compressed into half a minute (simulation "
        "ASSUMPTION); the fleet's own random failures are off, only the scripted faults happen.",
        f"Prediction: before Prometheus started, the same simulated fleet ran through its last "
        f"{config.history_s / 3600:.0f} h, backfilled into Prometheus' TSDB every "
        f"{config.history_step_s:.0f} s ({forecast.history_samples:,} samples); one GPU's HBM degrades in "
        "it with the simulator's own precursor shape (ASSUMPTION), no row remapped yet. Sickbay starts "
        f"rules-only and scores every {SCORING_INTERVAL_S:g} s (default 5 min) once the trained model is "
        "promoted, the scene's first step. Its version is validated on this fleet first, the operator's way "
        "(POST /api/v1/model/validate, force, as `sickbay model validate --force` does): a model new to a "
        "fleet runs the proactive ladder in shadow (it records what it would do and taints nothing) until "
        "a backtest over the fleet's own history or an operator validates it; the demo's fleet is the "
        "simulator the model was trained on.",
        "Release scenes: 'delivered' is the resolved notification, 'decision' the node entering "
        "`verifying` once the remediator reported done; the rest of their time is the verification Jobs "
        "(the XID 79 node's first fails, as the simulator's Job controller is told to) and the healthy delay.",
    )


async def run_demo(*, nodes: int, seed: int, out: Path, keep: bool, console: Console) -> int:
    started_wall = datetime.now(UTC)
    started = time.perf_counter()
    workdir = out / "stack"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    config = stack_config(nodes, seed)
    try:
        fleet, forecast = demo_fleet(config)
    except ValueError as exc:
        console.print(f"[red]sickbay demo:[/] {escape(str(exc))}")
        return 2
    console.print(
        f"[bold]Sickbay demo[/]: simulating the fleet's last {config.history_s / 3600:.0f} h "
        f"({nodes} nodes x "
        "8 GPUs) for Prometheus, then starting the fleet and Kubernetes API, Prometheus, Alertmanager and "
        "sickbay serve…"
    )
    async with Stack(workdir, config, fleet=fleet) as stack:
        ready_s = time.perf_counter() - started
        past = ", ".join(
            f"{k} {stack.timings[k]:.1f}s" for k in ("history", "backfill") if k in stack.timings
        )
        console.print(
            f"stack ready in {ready_s:.1f}s ({past}). "
            f"Inspect the cluster: [bold]{escape(stack.kubectl_hint())}[/]"
        )
        recorder = Recorder(stack, datetime.now(UTC))
        try:
            scenario = Scenario(stack, recorder, budget_nodes=BUDGET_NODES, forecast=forecast)
        except CastingError as exc:
            console.print(f"[red]sickbay demo:[/] {escape(str(exc))}")
            return 2
        header = (
            f"{nodes} nodes x 8 GPUs · scrape + rule evaluation every 1s · group_wait 0s (hardware) · "
            f"healthy delay {HEALTHY_DELAY_S}s · budget {BUDGET_NODES} quarantined nodes · risk scoring "
            f"every {SCORING_INTERVAL_S:g}s over {config.history_s / 3600:.0f} h of backfilled history\n"
            f"kubectl: {stack.kubectl_hint()}"
        )
        display = Display(console, recorder, header)
        recorder.start()
        scenario_started = time.perf_counter()
        try:
            with display.running():
                await scenario.run()
                await asyncio.sleep(1.0)
                await recorder.settle()
        finally:
            await recorder.stop()
        scenario_s = time.perf_counter() - scenario_started
        if not console.is_terminal:  # in a terminal, the live view's last frame already shows it
            console.print(scene_table(recorder.scenes, title=SUMMARY_TITLE))
        notes = run_notes(config, forecast)
        breaker = await stack.sickbay_get("/api/v1/breaker")
        if breaker.get("open"):
            console.print(f"[yellow]breaker open[/]: {escape(str(breaker.get('reason')))}")
        info = report.RunInfo(
            started=started_wall,
            nodes=nodes,
            gpus_per_node=stack.fleet.config.hardware.gpus_per_node,
            ready_s=ready_s,
            scenario_s=scenario_s,
            total_s=time.perf_counter() - started,
            kubeconfig=stack.kubeconfig,
            workdir=workdir,
            notes=notes,
        )
        path = report.write_report(
            out / "report.html", info, recorder.scenes, recorder.events, forecast=forecast
        )
        console.print(f"report: [bold]{path}[/]")
        failed = [s for s in recorder.scenes if s.status not in ("done", "blocked")]
        if keep:
            console.print(
                f"The cluster stays up. Try: [bold]{escape(stack.kubectl_hint())}[/]  (Ctrl-C to stop everything)"
            )
            await asyncio.Event().wait()
    console.print(f"everything stopped; the demo took {time.perf_counter() - started:.1f}s")
    if failed:
        console.print(f"[red]{len(failed)} scene(s) did not complete:[/] {', '.join(s.key for s in failed)}")
        console.print(f"logs: {workdir / 'logs'}")
        return 1
    return 0


async def _main(args: argparse.Namespace, console: Console) -> int:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
    return await run_demo(nodes=args.nodes, seed=args.seed, out=args.out, keep=args.keep, console=console)


def run(args: argparse.Namespace) -> int:
    """`sickbay demo` and `python -m app.demo` (`app.demo.commands` declares the flags); the exit status."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console() if sys.stdout.isatty() else Console(width=180)
    try:
        return asyncio.run(_main(args, console))
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("stopped; everything the demo started is stopped" + (" (--keep)" if args.keep else ""))
        return 0 if args.keep else 130
