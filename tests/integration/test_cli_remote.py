"""`sickbay breaker` and `sickbay model` against a stand-in service: the request each sub-command sends
(method, path, token, body), the line it prints, and its exit code."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app import cli

MODEL = {
    "version": "m1",
    "fleet": "f1",
    "mode": "shadow",
    "reason": "new-version",
    "detail": "no backtest yet",
    "by": "service",
    "since": "2026-01-01T00:00:00Z",
}
BREAKER = {"open": True, "quarantined": 3, "nodes": 10, "reason": "3 of 10 nodes quarantined"}


@dataclass
class Service:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)


@pytest.fixture
def service() -> Iterator[Service]:
    stand_in = Service(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            stand_in.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "auth": self.headers.get("Authorization"),
                    "body": body,
                }
            )
            status, answer = stand_in.answers.get(self.path, (404, {"error": "not_found"}))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()


def test_breaker_status_and_reset(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    service.answers["/api/v1/breaker"] = (200, BREAKER)
    service.answers["/api/v1/breaker/reset"] = (200, {**BREAKER, "open": False})
    assert cli.main(["breaker", "status", "--url", service.url, "--token", "t0k"]) == 0
    assert capsys.readouterr().out == "breaker OPEN: 3/10 nodes quarantined; 3 of 10 nodes quarantined\n"
    assert cli.main(["breaker", "reset", "--url", service.url + "/"]) == 0
    assert capsys.readouterr().out == "breaker closed: 3/10 nodes quarantined\n"
    assert [(r["method"], r["path"], r["auth"], r["body"]) for r in service.requests] == [
        ("GET", "/api/v1/breaker", "Bearer t0k", None),
        ("POST", "/api/v1/breaker/reset", None, None),
    ]


def test_model_status_validate_and_shadow(
    service: Service, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "ops")
    monkeypatch.setenv("SICKBAY_AUTH__TOKEN", "the-webhooks")  # never sent: it may post alerts only
    monkeypatch.setenv("SICKBAY_AUTH__OPERATOR__TOKEN", "from-env")
    service.answers["/api/v1/model"] = (200, MODEL)
    service.answers["/api/v1/model/validate"] = (200, MODEL)  # it stays in shadow
    service.answers["/api/v1/model/shadow"] = (200, MODEL)
    assert cli.main(["model", "status", "--url", service.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model m1 on fleet f1: SHADOW (new-version: no backtest yet; by service since ")
    assert cli.main(["model", "validate", "--url", service.url, "--version", "m1", "--note", "why"]) == 3
    assert cli.main(["model", "validate", "--url", service.url, "--force"]) == 3
    assert cli.main(["model", "shadow", "--url", service.url]) == 0
    sent = [(r["method"], r["path"], r["auth"], r["body"]) for r in service.requests]
    assert sent == [
        ("GET", "/api/v1/model", "Bearer from-env", None),
        (
            "POST",
            "/api/v1/model/validate",
            "Bearer from-env",
            {"force": False, "note": "why", "who": "cli:ops", "version": "m1"},
        ),
        ("POST", "/api/v1/model/validate", "Bearer from-env", {"force": True, "note": "", "who": "cli:ops"}),
        ("POST", "/api/v1/model/shadow", "Bearer from-env", {"force": False, "note": "", "who": "cli:ops"}),
    ]


def test_an_acting_model_after_validate_exits_0(service: Service) -> None:
    service.answers["/api/v1/model/validate"] = (200, {**MODEL, "mode": "acting"})
    assert cli.main(["model", "validate", "--url", service.url, "--force"]) == 0


def test_a_refusal_or_no_service_is_exit_1_in_one_line(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service.answers["/api/v1/model"] = (401, {"error": "unauthorized"})
    assert cli.main(["model", "status", "--url", service.url]) == 1
    assert capsys.readouterr().err == 'sickbay: 401 {"error": "unauthorized"}\n'
    assert cli.main(["breaker", "status", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sickbay: cannot reach http://127.0.0.1:9: ")
    assert len(err.splitlines()) == 1
