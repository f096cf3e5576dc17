"""How the stack launches each child: `sickbay serve`'s environment and command line, Alertmanager's and
Prometheus' configuration files and command lines, and the exporter pods Prometheus' targets name.

Builders only: they write the files a child reads and return what to run; `Stack` starts the children
(`processes.start_on_free_port`) and keeps their URLs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from app.demo.configs import GPU_OPERATOR_NS, alertmanager_config
from app.demo.processes import binary, sickbay_command
from app.demo.stack_config import StackConfig
from app.sim.fleet import FleetSim, scrape
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import PODS


def sickbay_env(cfg: StackConfig, *, policy_file: Path, prediction: dict[str, str]) -> dict[str, str]:
    """This process's environment without its SICKBAY_ settings, then the stack's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
    env |= {
        "SICKBAY_AUTH__TOKEN": cfg.token,
        "SICKBAY_AUTH__OPERATOR__TOKEN": cfg.operator_token,
        "SICKBAY_POLICY_FILE": str(policy_file),
        "SICKBAY_RECONCILE_INTERVAL_S": str(cfg.reconcile_interval_s),
        "SICKBAY_IDENTITY": cfg.identity,
        "SICKBAY_PIPELINE__RECHECK_POLL_S": "0.25",  # second-scale re-checks for a run of seconds
        "PYTHONUNBUFFERED": "1",
        **prediction,
        **cfg.sickbay_env,
    }
    return env


def sickbay_argv(port: int, *, db: Path, kubeconfig: Path) -> list[str]:
    return [
        *sickbay_command(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(db),
        "--kubeconfig",
        str(kubeconfig),
    ]


def prediction_env(
    interval_s: float | None, *, prometheus_port: int | None, models_dir: Path
) -> dict[str, str]:
    """Risk scoring from the stack's Prometheus, starting with an empty models directory (created here)."""
    if interval_s is None or prometheus_port is None:
        return {}
    models_dir.mkdir(parents=True, exist_ok=True)
    return {
        "SICKBAY_PREDICTION__ENABLED": "true",
        "SICKBAY_PREDICTION__PROMETHEUS_URL": f"http://127.0.0.1:{prometheus_port}",
        "SICKBAY_PREDICTION__INTERVAL_S": str(interval_s),
        "SICKBAY_PREDICTION__MODELS_DIR": str(models_dir),
        "SICKBAY_PREDICTION__RETRAIN_ENABLED": "false",
    }


def write_alertmanager_config(
    workdir: Path, cfg: StackConfig, *, sickbay_url: str, probe_url: str | None
) -> Path:
    """Alertmanager's configuration (and the bearer token file it reads) under `workdir/alertmanager`."""
    token_file = workdir / "alertmanager" / "sickbay-token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(cfg.token)
    token_file.chmod(0o600)
    config = workdir / "alertmanager" / "alertmanager.yml"
    document = alertmanager_config(
        sickbay_url=sickbay_url,
        token_file=token_file,
        probe_url=probe_url,
        group_wait_other=cfg.group_wait_other,
        group_interval=cfg.group_interval,
        user_route=cfg.user_alerts,
    )
    config.write_text(json.dumps(document, indent=2))  # JSON is YAML: no quoting surprises in matchers
    return config


def alertmanager_argv(config: Path, data: Path, port: int) -> list[str]:
    return [
        binary("prometheus-alertmanager", "/usr/bin/prometheus-alertmanager"),
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=debug",
    ]


def point_prometheus(path: Path, *, interval: str, alertmanager_url: str) -> None:
    """The fleet's Prometheus configuration, evaluating rules every `interval` and alerting Alertmanager."""
    document = yaml.safe_load(path.read_text())
    document["global"]["evaluation_interval"] = interval
    document["global"]["scrape_timeout"] = interval
    am_address = alertmanager_url.removeprefix("http://")
    document["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am_address]}]}]}
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def prometheus_argv(config: Path, data: Path, port: int, *, retention_d: int) -> list[str]:
    return [
        binary("prometheus", "/usr/bin/prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.retention.time={retention_d}d",
        "--log.level=info",
    ]


def exporter_pods(fleet: FleetSim, kube: KubeApiServer) -> dict[str, scrape.ExporterPod]:
    """The dcgm-exporter DaemonSet's pod on each node, as the simulated cluster named it."""
    found: dict[str, scrape.ExporterPod] = {}
    for index, node in enumerate(fleet.node_names):
        pods = kube.store.items(PODS, namespace=GPU_OPERATOR_NS)
        name = next(
            (p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName") == node), None
        )
        if name is not None:
            found[node] = scrape.ExporterPod(GPU_OPERATOR_NS, name, scrape.pod_ip(index))
    return found
