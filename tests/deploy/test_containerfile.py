"""The Containerfile builds the image the manifests run, and agrees with them: the tag, the user id, the
entrypoint and commands, the ports, the probes' routes, and the paths (rules and model baked in where the
installed code looks for them; every writable path a volume, so the root filesystem can be read-only).

Checked statically here; tests/deploy/test_image_build.py lays the wheel out as the image would and, where
a builder and the base image are at hand, builds the image.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from aiohttp import web
from prometheus_client import CollectorRegistry

from app.agent import server as agent_server
from app.agent.settings import AgentSettings
from app.cli import build_parser
from app.config import settings as settings_module
from app.predict import baseline
from app.service.runtime import routes
from tests.deploy import containerfile, support

CONTAINERFILE = support.ROOT / "Containerfile"
IMAGE_REPOSITORY = "ghcr.io/sickbay/sickbay"
VENV = PurePosixPath("/opt/sickbay")
ROOT_ONLY = {"agent"}  # reads the kubelet's root-only pod-resources socket (agent-daemonset.yaml)

FILE = containerfile.parse(CONTAINERFILE)
RUNTIME = FILE.runtime
ENV = containerfile.merged(RUNTIME, "ENV", FILE.args)
LABELS = containerfile.merged(RUNTIME, "LABEL", FILE.args)
# https://github.com/opencontainers/image-spec/blob/main/annotations.md, "Pre-Defined Annotation Keys"
OCI_KEYS = frozenset(
    {"created", "authors", "url", "documentation", "source", "version", "revision", "vendor", "licenses"}
    | {"ref.name", "title", "description", "base.digest", "base.name"}
)
PYPROJECT = tomllib.loads((support.ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _containers(overlay: str) -> Iterator[tuple[support.Obj, support.Obj]]:
    """(workload, container) for every container of the overlay that runs Sickbay's image."""
    for obj in support.render(overlay):
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in support.pod_spec(obj)["containers"]:
            if container["image"].partition(":")[0] == IMAGE_REPOSITORY:
                yield obj, container


def _all_containers() -> list[tuple[str, support.Obj, support.Obj]]:
    found = [(o, w, c) for o in support.OVERLAY_NAMES for w, c in _containers(o)]
    assert found, "no manifest runs the image"
    return found


def site_packages() -> PurePosixPath:
    """The venv's site-packages, for the Python of the base image's tag."""
    match = re.search(r":(\d+)\.(\d+)", RUNTIME.base)
    assert match, f"the base image {RUNTIME.base} has no Python version in its tag"
    return VENV / "lib" / f"python{match.group(1)}.{match.group(2)}" / "site-packages"


def _in_image(repo_path: Path) -> PurePosixPath:
    """Where a path of this checkout lies in the image: the wheel puts `app/` into site-packages, and the
    Containerfile copies what sits beside it (rules/, models/) there too."""
    return site_packages() / repo_path.relative_to(support.ROOT).as_posix()


def _under(path: str, directories: set[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(d) for d in directories)


# ------------------------------------------------------------------------------------------ the definition


def test_the_base_is_a_slim_python_pinned_to_a_release() -> None:
    bases = {stage.base for stage in FILE.stages}
    assert len(bases) == 1, f"builder and runtime on different bases: {bases}"
    assert re.fullmatch(r"docker\.io/library/python:3\.11\.\d+-slim-\w+", RUNTIME.base), RUNTIME.base
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert FILE.stages[0].name == "builder"
    assert len(FILE.stages) == 2


def test_the_labels_follow_the_oci_annotations() -> None:
    assert set(LABELS) <= {f"org.opencontainers.image.{key}" for key in OCI_KEYS}
    project = PYPROJECT["project"]
    assert LABELS["org.opencontainers.image.title"] == project["name"]
    assert LABELS["org.opencontainers.image.description"] == project["description"]
    assert LABELS["org.opencontainers.image.version"] == project["version"]
    assert LABELS["org.opencontainers.image.licenses"] == project["license"]
    assert LABELS["org.opencontainers.image.base.name"] == RUNTIME.base


def test_the_image_is_the_one_the_manifests_and_make_image_name() -> None:
    tag = f"{IMAGE_REPOSITORY}:{PYPROJECT['project']['version']}"
    assert LABELS["org.opencontainers.image.ref.name"] == tag
    makefile = (support.ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(rf"^IMAGE \?= {re.escape(tag)}$", makefile, re.MULTILINE), "Makefile IMAGE"
    assert re.search(r"--file Containerfile --tag \$\(IMAGE\)", makefile)
    images = {(overlay, c["name"]): c["image"] for overlay, _, c in _all_containers()}
    assert set(images.values()) == {tag}, images
    names = {name for _, name in images}
    assert names == {"sickbay", "agent"}


def test_the_context_ignore_files_admit_what_is_copied() -> None:
    ignore = (support.ROOT / ".containerignore").read_text(encoding="utf-8")
    # docker reads .dockerignore, podman and buildah .containerignore first.
    assert (support.ROOT / ".dockerignore").read_text(encoding="utf-8") == ignore
    admitted = {line[1:].rstrip("/") for line in ignore.splitlines() if line.startswith("!")}
    assert "*" in ignore.splitlines()
    copied = {
        s.rstrip("/") for stage in FILE.stages for srcs in containerfile.copies(stage).values() for s in srcs
    }
    assert copied == admitted


# ----------------------------------------------------------------------------------- against the manifests


def test_the_image_user_is_the_deployments_and_the_agent_is_root_by_number() -> None:
    user, _, group = RUNTIME.last("USER").text.partition(":")
    # Numeric, so that the kubelet's runAsNonRoot check can tell the user is not root.
    assert user.isdigit(), user
    assert group.isdigit(), group
    created = " ".join(i.text for i in RUNTIME.all("RUN"))
    assert f"--uid {user} " in created
    assert f"--gid {group} " in created
    for overlay, workload, container in _all_containers():
        pod = support.pod_spec(workload).get("securityContext", {})
        own = container.get("securityContext", {})
        uid = own.get("runAsUser", pod.get("runAsUser", int(user)))
        where = f"{overlay}/{container['name']}"
        if container["name"] in ROOT_ONLY:
            assert uid == 0, where
            assert own["runAsNonRoot"] is False, where
            continue
        assert (uid, pod.get("runAsGroup")) == (int(user), int(group)), where
        assert own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where


def test_the_entrypoint_is_the_console_script_and_the_commands_parse() -> None:
    assert containerfile.exec_form(RUNTIME.last("ENTRYPOINT")) == ["sickbay"]
    assert PYPROJECT["project"]["scripts"]["sickbay"] == "app.cli:main"
    assert ENV["PATH"].split(":")[0] == str(VENV / "bin")
    cmd = containerfile.exec_form(RUNTIME.last("CMD"))
    commands = {tuple(cmd)} | {tuple(c.get("args", [])) for _, _, c in _all_containers()}
    assert ("serve",) in commands
    assert ("agent",) in commands
    for command in commands:
        parsed = build_parser().parse_args(list(command))
        assert isinstance(parsed, argparse.Namespace), command
        assert parsed.handler, command


def test_the_exposed_ports_are_the_container_ports() -> None:
    exposed = {int(p.partition("/")[0]) for i in RUNTIME.all("EXPOSE") for p in i.text.split()}
    declared = {p["containerPort"] for _, _, c in _all_containers() for p in c.get("ports", [])}
    assert exposed == declared
    assert {
        settings_module.Settings.model_fields["listen_port"].default,
        AgentSettings.model_fields["listen_port"].default,
    } == exposed


def _served_paths(command: str) -> set[str]:
    """The routes of the web application a command serves."""
    if command == "serve":
        app = web.Application()
        routes.add_routes(app)
    else:
        app = agent_server.build_app(render_gpu_metrics=str, registry=CollectorRegistry())
    return {resource.canonical for resource in app.router.resources()}


def test_every_probe_asks_a_route_of_the_command_on_an_exposed_port() -> None:
    probed = 0
    for overlay, _, container in _all_containers():
        (command,) = container["args"]
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            if kind not in container:
                continue
            get = container[kind]["httpGet"]
            where = f"{overlay}/{container['name']} {kind}"
            assert get["path"] in _served_paths(command), where
            assert ports.get(get["port"], get["port"]) in ports.values(), where
            probed += 1
    assert probed >= len(support.OVERLAY_NAMES) * 4  # three on the service, one on the agent


def test_rules_and_model_are_baked_in_where_the_installed_code_looks() -> None:
    copied = containerfile.copies(RUNTIME)
    shipped = {
        "rules": settings_module.RULES_DIR,
        "models": settings_module.PredictionSettings().models_dir,
    }
    for source, repo_dir in shipped.items():
        destination = _in_image(repo_dir)
        assert copied.get(f"{destination}/") == [f"{source}/"], f"{source}/ must go to {destination}/"
    # What the defaults name is there: policy, catalog, retraining baseline, the current model.
    defaults = settings_module.Settings.model_fields
    for path in (
        defaults["policy_file"].default,
        defaults["xid_catalog_file"].default,
        baseline.DEFAULT_FILE,
        shipped["models"] / "CURRENT.json",
    ):
        assert Path(path).is_file(), path


def test_writable_paths_are_volumes_and_env_paths_exist() -> None:
    home, workdir = ENV["HOME"], RUNTIME.last("WORKDIR").text
    created = re.findall(r"install -d .*? (/\S+(?: /\S+)*)$", " ".join(i.text for i in RUNTIME.all("RUN")))
    baked = {
        str(_in_image(settings_module.RULES_DIR)),
        str(_in_image(settings_module.RULES_DIR.parent / "models")),
    }
    for overlay, _workload, container in _all_containers():
        mounts = container.get("volumeMounts", [])
        writable = {m["mountPath"] for m in mounts if not m.get("readOnly")}
        everywhere = {m["mountPath"] for m in mounts} | baked
        where = f"{overlay}/{container['name']}"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
        if container["name"] == "sickbay":
            assert _under(home, writable), where
            assert _under(workdir, writable), where
        # Every writable volume has its directory in the image (so a plain `podman run` works too).
        assert writable <= set(" ".join(created).split()) | {"/tmp"}, where
        for name, entry in support.env_of(container).items():
            value = str(entry.get("value", ""))
            if value.startswith("/"):
                assert _under(value, everywhere), f"{where}: {name}={value} is in no volume or baked path"
                if name.endswith(("_DIR", "__PATH")) or "SPOOL" in name:
                    assert _under(value, writable), f"{where}: {name}={value} is not writable"
