"""The service's own commands: `serve`, `explain`, and `breaker` and `model`, which talk to a running one.

Arguments only. `app.cli.service` (serve, explain) and `app.cli.remote` (breaker, model) run them and are
imported when their command runs, so declaring these loads neither the service nor a Kubernetes client.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the webhook, the inbox and the pipeline",
        description="Run the webhook, the inbox and the pipeline (settings: --config, $SICKBAY_CONFIG, "
        "SICKBAY_* variables; these flags override them).",
    )
    serve.add_argument("--host", help="listen address (overrides settings)")
    serve.add_argument("--port", type=int, help="listen port (overrides settings)")
    serve.add_argument("--db", type=Path, help="SQLite inbox/journal path (overrides settings)")
    serve.add_argument(
        "--kubeconfig", help="act on the cluster of this kubeconfig (enables Kubernetes access)"
    )
    serve.add_argument(
        "--dry-run", action="store_true", default=None, help="journal what would be done, write nothing"
    )
    serve.set_defaults(handler="app.cli.service:serve")


def add_operator_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`breaker`, `model` and `explain`: what an operator asks of a running service, or of a payload."""
    _add_breaker(sub)
    _add_model(sub)
    explain = sub.add_parser(
        "explain",
        help="show what Sickbay would do with a payload, and why (no writes)",
        description="Show what Sickbay would do with a payload, and why: classify, observe and plan as "
        "serve does, writing nothing.",
    )
    explain.add_argument(
        "payload", type=Path, help="Alertmanager webhook JSON (version 4) or agent GPU events"
    )
    explain.add_argument("--format", choices=("table", "json"), default="table")
    explain.add_argument("--kubeconfig", help="read the cluster (read-only) to plan exactly as serve would")
    explain.set_defaults(handler="app.cli.service:explain")


def _add_breaker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    breaker = sub.add_parser(
        "breaker",
        help="show or reset the blast-radius breaker of a running service",
        description="Show or reset the blast-radius breaker of a running service (GET or POST "
        "/api/v1/breaker).",
    )
    actions = breaker.add_subparsers(required=True, metavar="ACTION")
    for action, text in (
        ("status", "open or closed, and how many nodes are quarantined"),
        ("reset", "close the breaker now (POST /api/v1/breaker/reset)"),
    ):
        parser = actions.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        _add_service_arguments(parser)
        parser.set_defaults(handler="app.cli.remote:breaker", action=action)


def _add_model(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    model = sub.add_parser(
        "model",
        help="shadow mode of a running service: show it, validate the model on this fleet, or back to shadow",
        description="Shadow mode of a running service's risk model (/api/v1/model).",
    )
    actions = model.add_subparsers(required=True, metavar="ACTION")
    status = actions.add_parser(
        "status", help="shadow or acting, and why", description="Shadow or acting, and why."
    )
    validate = actions.add_parser(
        "validate",
        help="act once a backtest over this fleet's own history passes now (exit 3: it stays in shadow)",
        description="Act once a backtest over this fleet's own history passes now (--force: without "
        "one). Exit code 3 when the model stays in shadow.",
    )
    validate.add_argument("--force", action="store_true", help="validate on your word, without a backtest")
    shadow = actions.add_parser(
        "shadow",
        help="record only, until validated again",
        description="Back to shadow: record what the model would do, act on none of it, until validated "
        "again.",
    )
    shadow.set_defaults(force=False)
    for parser in (validate, shadow):
        parser.add_argument("--version", help="the model version (default: the one the service runs)")
        parser.add_argument("--note", default="", help="why, for the validation log")
    for action, parser in (("status", status), ("validate", validate), ("shadow", shadow)):
        _add_service_arguments(parser)
        parser.add_argument(
            "--timeout", type=float, default=900.0, help="seconds to wait (a backtest reads weeks of history)"
        )
        parser.set_defaults(handler="app.cli.remote:model", action=action)


def _add_service_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the service's base URL (default {DEFAULT_URL})")
    parser.add_argument(
        "--token", help="an operator's bearer token (default: $SICKBAY_AUTH__OPERATOR__TOKEN)"
    )
