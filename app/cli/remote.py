"""What `sickbay breaker` and `sickbay model` run: a call to a running service's API, its answer in a line.

`app.cli.commands` declares their arguments (`action` is the sub-command). Exit codes: 0 answered, 1 the
service refused or could not be reached, 3 `model validate` left the model in shadow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any


def breaker(args: argparse.Namespace) -> int:
    path = "/api/v1/breaker" + ("/reset" if args.action == "reset" else "")
    state = _ask(args, path, method="POST" if args.action == "reset" else "GET", timeout=10)
    if state is None:
        return 1
    word = "OPEN" if state["open"] else "closed"
    print(
        f"breaker {word}: {state['quarantined']}/{state['nodes']} nodes quarantined"
        + (f"; {state['reason']}" if state["open"] else "")
    )
    return 0


def model(args: argparse.Namespace) -> int:
    if args.action == "status":
        state = _ask(args, "/api/v1/model", method="GET", timeout=args.timeout)
    else:
        who = os.environ.get("USER") or "cli"
        payload = {"force": bool(args.force), "note": args.note, "who": f"cli:{who}"}
        if args.version:
            payload["version"] = args.version
        state = _ask(
            args, f"/api/v1/model/{args.action}", method="POST", timeout=args.timeout, payload=payload
        )
    if state is None:
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


OPERATOR_TOKEN_ENV = "SICKBAY_AUTH__OPERATOR__TOKEN"  # noqa: S105 - the variable's name, not a secret


def _ask(
    args: argparse.Namespace,
    path: str,
    *,
    method: str,
    timeout: float,
    payload: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The service's JSON answer; None once the refusal or the unreachable URL is said on stderr."""
    # An operator's token: the webhook's (SICKBAY_AUTH__TOKEN) may post alerts only (issue 16).
    token = args.token or os.environ.get(OPERATOR_TOKEN_ENV, "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = None if payload is None else json.dumps(payload).encode()
    if method == "POST":  # the service answers 415 to a POST that does not say JSON, body or not
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(  # noqa: S310 - the operator names the URL
        args.url.rstrip("/") + path, data=body, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        print(f"sickbay: {exc.code} {exc.read().decode(errors='replace')}", file=sys.stderr)
        return None
    except urllib.error.URLError as exc:
        print(f"sickbay: cannot reach {args.url}: {exc.reason}", file=sys.stderr)
        return None
    return answer
