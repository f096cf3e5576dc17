"""A real Alertmanager (Debian's 0.25) delivers to a real `sickbay serve` over its webhook.

Checks the contract end to end: bearer auth through `http_config.authorization`, one inbox row per
(fingerprint, startsAt, status) — the resolved notification is its own row, a repeat notification is a
duplicate and stores nothing — and every row is classified into the journal.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"
TOKEN = "am-delivery-token"
REPEAT_NODE = "gpu-node-5"  # routed with a short repeat_interval, so Alertmanager re-sends it

pytestmark = [
    pytest.mark.slow,
    # amtool stamps startsAt/endsAt from Python's clock and Alertmanager checks them against its own.
    pytest.mark.real_clock,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (Path(ALERTMANAGER).exists() and Path(AMTOOL).exists()),
        reason="needs Debian's prometheus-alertmanager and amtool (scripts/install-system-packages.sh)",
    ),
]

# label sets posted with amtool → the class the journal must give them
ALERTS: list[tuple[dict[str, str], str]] = [
    (
        {
            "alertname": "GpuXidFatal",
            "node": "gpu-node-1",
            "gpu": "3",
            "xid": "79",
            "sickbay_class": "reboot-node",
        },
        "reboot-node",
    ),
    (
        {
            "alertname": "GpuXidFatal",
            "node": "gpu-node-2",
            "gpu": "0",
            "xid": "79",
            "sickbay_class": "reboot-node",
        },
        "reboot-node",
    ),
    (
        {
            "alertname": "GpuXidReset",
            "node": "gpu-node-3",
            "gpu": "5",
            "xid": "64",
            "sickbay_class": "reset-gpu",
        },
        "reset-gpu",
    ),
    (
        {
            "alertname": "GpuXidApplication",
            "node": "gpu-node-4",
            "gpu": "1",
            "xid": "13",
            "sickbay_class": "restart-workload",
            "namespace": "training",
            "pod": "llm-pretrain-worker-2",
        },
        "restart-workload",
    ),
    (
        {
            "alertname": "GpuXidReset",
            "node": REPEAT_NODE,
            "gpu": "2",
            "xid": "119",
            "sickbay_class": "reset-gpu",
        },
        "reset-gpu",
    ),
]
RESOLVED_NODE = "gpu-node-1"

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 30.0, every: float = 0.1) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last probe: {last!r}")


def get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def inbox_rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db, timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "SELECT seq, source, fingerprint, starts_at, status, node, state FROM inbox ORDER BY seq"
        ).fetchall()
        return [dict(r) for r in rows]


def fault_seqs(db: Path) -> list[int]:
    with sqlite3.connect(db, timeout=10) as conn:
        return [r[0] for r in conn.execute("SELECT inbox_seq FROM faults ORDER BY inbox_seq")]


def alertmanager_config(webhook_url: str, *, ca_file: Path | None = None) -> str:
    """The route and receiver; with `ca_file`, the webhook's `http_config` trusts that CA (HTTPS)."""
    route = {
        "receiver": "sickbay",
        "group_by": ["..."],  # every alert is its own group, so each notification carries one alert
        "group_wait": "0s",
        "group_interval": "1s",
        "repeat_interval": "4h",
        "routes": [
            {
                "receiver": "sickbay",
                "matchers": [f'node="{REPEAT_NODE}"'],
                "group_by": ["..."],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "2s",
            }
        ],
    }
    receivers = [
        {
            "name": "sickbay",
            "webhook_configs": [
                {
                    "url": webhook_url,
                    "send_resolved": True,
                    "http_config": {
                        "authorization": {"type": "Bearer", "credentials": TOKEN},
                        **({"tls_config": {"ca_file": str(ca_file)}} if ca_file else {}),
                    },
                }
            ],
        }
    ]
    # JSON is YAML: no quoting surprises in label matchers.
    return json.dumps({"route": route, "receivers": receivers}, indent=2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class Alertmanager:
    url: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        _stop(self.proc)


@pytest.fixture
def alertmanager(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[Callable[[str], Alertmanager]]:
    """Factory: start Alertmanager for a webhook URL (gossip off, loopback only), stopped at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(webhook_url: str, *, ca_file: Path | None = None) -> Alertmanager:
        config = tmp_path / "alertmanager.yml"
        config.write_text(alertmanager_config(webhook_url, ca_file=ca_file))
        log = tmp_path / "alertmanager.log"
        for _ in range(3):
            port = free_port()
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    [
                        ALERTMANAGER,
                        f"--config.file={config}",
                        f"--storage.path={tmp_path / 'am-data'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--cluster.listen-address=",
                        "--log.level=debug",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                if get(f"{url}/-/ready")[0] == 200:
                    return Alertmanager(url=url, proc=proc)
                time.sleep(0.05)
            if proc.poll() is None:
                break
        raise RuntimeError(f"Alertmanager did not start:\n{log.read_text(errors='replace')[-4000:]}")

    try:
        yield start
    finally:
        for proc in procs:
            _stop(proc)


def amtool_add(am_url: str, labels: dict[str, str], *, start: datetime, end: datetime | None = None) -> None:
    args = [
        AMTOOL,
        "alert",
        "add",
        f"--alertmanager.url={am_url}",
        "--timeout=10s",
        f"--start={start.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        *([f"--end={end.strftime('%Y-%m-%dT%H:%M:%SZ')}"] if end else []),
        "--annotation=summary=integration test",
        *(f"{k}={v}" for k, v in labels.items()),
    ]
    done = subprocess.run(args, capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, f"amtool failed: {done.stdout!r} {done.stderr!r}"


def test_alertmanager_delivers_each_alert_once_per_status(sickbay_server, alertmanager):
    server = sickbay_server(token=TOKEN)
    am = alertmanager(f"{server.url}/api/v1/alerts")
    starts_at = (datetime.now(UTC) - timedelta(minutes=2)).replace(microsecond=0)

    for labels, _ in ALERTS:
        amtool_add(am.url, labels, start=starts_at)

    # Alertmanager's own fingerprints: the inbox must be keyed by exactly these.
    def am_alerts() -> dict[str, str] | None:
        status, body = get(f"{am.url}/api/v2/alerts")
        found = {a["labels"]["node"]: a["fingerprint"] for a in json.loads(body)} if status == 200 else {}
        return found if len(found) == len(ALERTS) else None

    fingerprints = wait_for("Alertmanager to list every alert", am_alerts)
    firing = wait_for(
        "every firing alert in the inbox",
        lambda: (rows := inbox_rows(server.db)) and len(rows) >= len(ALERTS) and rows,
    )
    assert {r["fingerprint"] for r in firing} == set(fingerprints.values())

    # Resolve one: same labels and start, an end in the past. Alertmanager sends it with status resolved.
    resolved_labels = next(labels for labels, _ in ALERTS if labels["node"] == RESOLVED_NODE)
    amtool_add(am.url, resolved_labels, start=starts_at, end=datetime.now(UTC) - timedelta(seconds=1))
    wait_for(
        "the resolved notification in the inbox",
        lambda: any(r["status"] == "resolved" for r in inbox_rows(server.db)),
    )
    # The repeat route re-sends gpu-node-5 every ~2s; each re-send must be answered as a duplicate.
    wait_for(
        "a repeat notification answered as a duplicate",
        lambda: metric(get(f"{server.url}/metrics")[1].decode(), "sickbay_alerts_duplicate_total") >= 1,
    )

    _, am_metrics = get(f"{am.url}/metrics")
    am_text = am_metrics.decode()
    assert metric(am_text, "alertmanager_notifications_failed_total", integration="webhook") == 0, (
        "Alertmanager saw a failed delivery (auth? 5xx?)"
    )
    sent = metric(am_text, "alertmanager_notifications_total", integration="webhook")
    assert sent >= len(ALERTS) + 2  # each firing alert, the resolved one, at least one repeat
    am.stop()  # from here on nothing is in flight: the counts below are settled

    rows = inbox_rows(server.db)
    keys = Counter((r["fingerprint"], r["starts_at"], r["status"]) for r in rows)
    assert all(n == 1 for n in keys.values()), f"stored more than once: {keys}"
    assert len(rows) == len(ALERTS) + 1, rows  # five firing rows and one resolved row, nothing else
    assert all(r["source"] == "alertmanager" for r in rows)
    by_node = {r["node"]: r for r in rows if r["status"] == "firing"}
    assert set(by_node) == {labels["node"] for labels, _ in ALERTS}
    for node, row in by_node.items():
        assert row["fingerprint"] == fingerprints[node]
        assert datetime.fromisoformat(row["starts_at"]) == starts_at  # Alertmanager's startsAt, unchanged
    (resolved,) = (r for r in rows if r["status"] == "resolved")
    assert resolved["node"] == RESOLVED_NODE
    assert resolved["fingerprint"] == fingerprints[RESOLVED_NODE]
    assert datetime.fromisoformat(resolved["starts_at"]) == starts_at  # the same alert, now resolved
    assert resolved["seq"] > by_node[RESOLVED_NODE]["seq"]

    # Each notification carries one alert (group_by '...'): every delivery stored it or was a duplicate.
    sb_text = get(f"{server.url}/metrics")[1].decode()
    deliveries = metric(
        sb_text, "sickbay_http_request_duration_seconds_count", route="/api/v1/alerts", code="200"
    )
    received = metric(sb_text, "sickbay_alerts_received_total", source="alertmanager")
    duplicates = metric(sb_text, "sickbay_alerts_duplicate_total", source="alertmanager")
    assert received == len(rows)
    assert duplicates >= 1
    assert deliveries == received + duplicates
    assert deliveries >= sent - 1  # Alertmanager counts a notification just before it sends it
    assert metric(sb_text, "sickbay_alerts_rejected_total") == 0

    # The pipeline classified every stored row exactly once, and the journal says what it decided.
    def all_processed() -> bool:
        current = inbox_rows(server.db)
        return all(r["state"] == "done" for r in current) and fault_seqs(server.db) == [
            r["seq"] for r in current
        ]

    wait_for("the pipeline to process every inbox row", all_processed)
    _, body = get(f"{server.url}/api/v1/actions?limit=1000")
    entries = json.loads(body)["items"]
    assert len(entries) == len(rows)
    for labels, fault_class in ALERTS:
        (mine,) = (e for e in entries if e["node"] == labels["node"] and e["status"] == "firing")
        assert mine["xid"] == int(labels["xid"])
        assert mine["gpu"] == int(labels["gpu"])
        assert mine["class"] == fault_class, mine
        assert mine["source"] == "alertmanager"
    (gone,) = (e for e in entries if e["status"] == "resolved")
    assert (gone["node"], gone["class"]) == (RESOLVED_NODE, "reboot-node")
    assert gone["reason"].startswith("resolved:")
    app_fault = next(e for e in entries if e["xid"] == 13)
    assert all(a["kind"] != "quarantine" for a in app_fault["plan"]["actions"])  # the node stays in the pool
    fatal = next(e for e in entries if e["xid"] == 79 and e["status"] == "firing")
    assert any(a["kind"] == "quarantine" for a in fatal["plan"]["actions"])  # XID 79 takes the node out
