"""The `sickbay` command: the only place that reads argv and the process environment.

Subcommands parse their arguments, load settings, and call into `runtime` (serve) or the pure code
(explain). Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app import explain as explaining
from app import runtime
from app.agent import main as agent_main
from app.classify.signals import Rules
from app.config.errors import ConfigError
from app.config.settings import Settings, load_settings
from app.domain import Signal
from app.ingest import signals
from app.kube import client as kube_client


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["agent"]:
        # The agent is its own deployable with its own flags; it parses the rest of the line itself.
        return agent_main.main_agent(args_list[1:])
    if args_list[:1] == ["demo"]:
        # The demo starts real Prometheus, Alertmanager and simulators; loaded only for this command.
        from app.demo import main_demo  # noqa: PLC0415

        return main_demo(args_list[1:])
    if args_list[:1] in (["train"], ["evaluate"], ["score"], ["backtest"], ["models"]):
        # scikit-learn is loaded only for the model commands.
        from app.predict.cli import main as predict_main  # noqa: PLC0415

        return predict_main(args_list)
    if args_list[:1] == ["simulate"]:
        # Loaded only here: the simulator is for demos and tests, production commands never import it.
        from app.sim.cli import main_simulate  # noqa: PLC0415

        return main_simulate(args_list[1:])
    parser = _parser()
    args = parser.parse_args(args_list)
    try:
        code: int = args.run(args)
    except ConfigError as exc:
        print(f"sickbay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sickbay", description="GPU fault remediation for Kubernetes")
    parser.add_argument("--config", type=Path, help="YAML settings file (default: $SICKBAY_CONFIG)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the webhook, the inbox and the pipeline")
    serve.add_argument("--host", help="listen address (overrides settings)")
    serve.add_argument("--port", type=int, help="listen port (overrides settings)")
    serve.add_argument("--db", type=Path, help="SQLite inbox/journal path (overrides settings)")
    serve.add_argument(
        "--kubeconfig", help="act on the cluster of this kubeconfig (enables Kubernetes access)"
    )
    serve.add_argument(
        "--dry-run", action="store_true", default=None, help="journal what would be done, write nothing"
    )
    serve.set_defaults(run=_serve)

    agent = sub.add_parser(
        "agent",
        help="run the node-local NVML collector (DaemonSet); `sickbay agent --help` for its flags",
        add_help=False,
    )
    agent.set_defaults(run=lambda _: 2)

    for name, text in (
        ("train", "train a degradation model from simulator or Prometheus datasets"),
        ("evaluate", "evaluate the current model on a dataset"),
        ("score", "print the current top-risk GPUs with the features that drove each score"),
        ("backtest", "replay a Prometheus range: when nodes would have been flagged, and was it worth it"),
        ("models", "list the installed risk models (current, previous) or roll back to the previous one"),
    ):
        sub.add_parser(name, help=text, add_help=False).set_defaults(run=lambda _: 2)

    demo = sub.add_parser(
        "demo", help="the whole loop on a simulated cluster, with a live timeline", add_help=False
    )
    demo.set_defaults(run=lambda _: 2)

    simulate = sub.add_parser(
        "simulate", help="simulated GPU fleet and Kubernetes API (demos, datasets, tests)", add_help=False
    )
    simulate.set_defaults(run=lambda _: 2)

    breaker = sub.add_parser("breaker", help="show or reset the blast-radius breaker of a running service")
    breaker.add_argument("action", choices=("status", "reset"))
    breaker.add_argument("--url", default="http://127.0.0.1:8080", help="the service's base URL")
    breaker.add_argument("--token", help="bearer token (default: $SICKBAY_AUTH__TOKEN)")
    breaker.set_defaults(run=_breaker)

    model = sub.add_parser(
        "model",
        help="shadow mode of a running service: show it, validate the model on this fleet, or back to shadow",
    )
    model.add_argument(
        "action",
        choices=("status", "validate", "shadow"),
        help="status: shadow or acting, and why; validate: act once a backtest over this fleet's own history "
        "passes now (--force: without one; exit code 3 when it stays in shadow); shadow: record only, until "
        "validated again",
    )
    model.add_argument("--force", action="store_true", help="validate on your word, without a backtest")
    model.add_argument("--version", help="the model version (default: the one the service runs)")
    model.add_argument("--note", default="", help="why, for the validation log")
    model.add_argument("--url", default="http://127.0.0.1:8080", help="the service's base URL")
    model.add_argument("--token", help="bearer token (default: $SICKBAY_AUTH__TOKEN)")
    model.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait (a backtest reads weeks of history)"
    )
    model.set_defaults(run=_model)

    explain = sub.add_parser("explain", help="show what Sickbay would do with a payload, and why (no writes)")
    explain.add_argument(
        "payload", type=Path, help="Alertmanager webhook JSON (version 4) or agent GPU events"
    )
    explain.add_argument("--format", choices=("table", "json"), default="table")
    explain.add_argument("--kubeconfig", help="read the cluster (read-only) to plan exactly as serve would")
    explain.set_defaults(run=_explain)
    return parser


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.host:
        overrides["listen_host"] = args.host
    if args.port is not None:
        overrides["listen_port"] = args.port
    if args.dry_run:
        overrides["dry_run"] = True
    settings = load_settings(args.config, **overrides)
    if args.kubeconfig:
        kube = settings.kube.model_copy(update={"enabled": True, "kubeconfig": args.kubeconfig})
        settings = settings.model_copy(update={"kube": kube})
    if args.db:
        settings = settings.model_copy(update={"inbox": settings.inbox.model_copy(update={"path": args.db})})
    _setup_logging(settings.log_level)
    app = runtime.build_app(settings)
    web.run_app(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        print=lambda msg: logging.getLogger("sickbay").info("%s", msg),
        access_log=None,
    )
    return 0


def _breaker(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("SICKBAY_AUTH__TOKEN", "")
    path = "/api/v1/breaker" + ("/reset" if args.action == "reset" else "")
    request = urllib.request.Request(  # noqa: S310 - the operator names the URL
        args.url.rstrip("/") + path,
        method="POST" if args.action == "reset" else "GET",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            state = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        print(f"sickbay: {exc.code} {exc.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except urllib.error.URLError as exc:
        print(f"sickbay: cannot reach {args.url}: {exc.reason}", file=sys.stderr)
        return 1
    word = "OPEN" if state["open"] else "closed"
    print(
        f"breaker {word}: {state['quarantined']}/{state['nodes']} nodes quarantined"
        + (f"; {state['reason']}" if state["open"] else "")
    )
    return 0


def _model(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("SICKBAY_AUTH__TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body: bytes | None = None
    path = "/api/v1/model"
    if args.action != "status":
        path += f"/{args.action}"
        who = os.environ.get("USER") or "cli"
        payload = {"force": bool(args.force), "note": args.note, "who": f"cli:{who}"}
        if args.version:
            payload["version"] = args.version
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(  # noqa: S310 - the operator names the URL
        args.url.rstrip("/") + path, data=body, method="POST" if body else "GET", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:  # noqa: S310
            state = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        print(f"sickbay: {exc.code} {exc.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except urllib.error.URLError as exc:
        print(f"sickbay: cannot reach {args.url}: {exc.reason}", file=sys.stderr)
        return 1
    word = "ACTING" if state["mode"] == "acting" else "SHADOW"
    print(
        f"model {state['version']} on fleet {state['fleet']}: {word} ({state['reason']}: {state['detail']}; "
        f"by {state['by']} since {state['since']})"
    )
    figures = state.get("backtest")
    if figures:
        print(
            f"backtest {figures['start']} .. {figures['end']}: {figures['false_alarms']} false alarms in "
            f"{figures['node_days']} node-days ({figures['false_alarms_per_1000_node_days']} per 1,000), "
            f"{figures['caught']} of {figures['failures']} failures caught"
        )
    if state.get("problem"):
        print(f"backtest not run: {state['problem']}")
    return 0 if args.action != "validate" or state["mode"] == "acting" else 3


def _explain(args: argparse.Namespace) -> int:
    # explain serves nothing, so webhook credentials are irrelevant to it.
    settings = load_settings(args.config, auth={"mode": "none"})
    rules_ = runtime.load_rules(settings)
    try:
        raw = args.payload.read_bytes()
    except OSError as exc:
        print(f"sickbay: cannot read {args.payload}: {exc.strerror}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    try:
        batch = explaining.parse_payload(raw, keys=signals.NodeKeys.of(settings), now=now)
    except explaining.ExplainError as exc:
        print(f"sickbay: {args.payload}: {exc}", file=sys.stderr)
        return 2
    items = asyncio.run(
        _explain_with_cluster(batch, rules_=rules_, now=now, kubeconfig=args.kubeconfig, settings=settings)
    )
    if args.format == "json":
        print(explaining.to_json(items))
        return 0
    _print_table(items)
    return 0


async def _explain_with_cluster(
    batch: list[Signal], *, rules_: Rules, now: datetime, kubeconfig: str | None, settings: Settings
) -> list[explaining.Explained]:
    if kubeconfig is None:
        return await explaining.explain(batch, rules_=rules_, now=now)
    # The same client settings as serve, so the same pods count as GPU pods in both.
    kube = await kube_client.connect(
        kubeconfig=kubeconfig, context=settings.kube.context, gpu_resources=settings.kube.gpu_resources
    )
    try:
        return await explaining.explain(batch, rules_=rules_, now=now, kube=kube)
    finally:
        await kube.close()


def _print_table(items: list[explaining.Explained]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = Table(title="What Sickbay would do", show_lines=True, expand=True)
    for column in ("alert", "node", "gpu", "class", "why", "plan"):
        table.add_column(column, overflow="fold")
    for item in items:
        fault, plan = item.fault, item.plan
        signal = fault.signal
        name = signal.name + (f"\nXID {signal.xid}" if signal.xid is not None else "")
        name += "" if signal.firing else "\n(resolved)"
        steps = "\n".join(
            f"[{a.track.value}] {a.kind.value}" + (f" {a.pod}" if a.pod else "") for a in plan.actions
        )
        # Everything here can come from alert labels: escape it so it is shown, never interpreted.
        cells = (
            name,
            signal.node or "-",
            "-" if signal.gpu is None else str(signal.gpu),
            fault.fault_class.value,
            fault.reason,
            f"{plan.summary}\n{steps}",
        )
        table.add_row(*(escape(cell) for cell in cells))
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
