"""The image, built: the builder stage's wheel laid out as the runtime stage installs it (always), and the
real build with `make image` followed by `sickbay --help` in the image (where a builder and the base image
are at hand: this environment reaches no container registry, so it skips, saying why).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from tests.deploy import containerfile, support
from tests.deploy.test_containerfile import FILE, RUNTIME, site_packages

# ------------------------------------------------------------------------------------ the image's layout

# Run inside the laid-out site-packages: what `sickbay` finds there with no configuration at all.
_LAYOUT_PROBE = """
import sys
from pathlib import Path
import app
from app.config import rules, settings
from app.predict import baseline, registry
from app.service import scoring_job
site = Path(sys.argv[1])
assert Path(app.__file__).is_relative_to(site), app.__file__
fields = settings.Settings.model_fields
rules.load_policy(fields["policy_file"].default)
rules.load_catalog(fields["xid_catalog_file"].default)
assert baseline.DEFAULT_FILE.is_file(), baseline.DEFAULT_FILE
print(registry.load_current(scoring_job.SHIPPED_MODELS).card.version)
"""


@pytest.mark.slow
def test_the_wheel_in_the_images_layout_finds_its_rules_and_model(tmp_path: Path) -> None:
    """The builder stage's wheel, unpacked as the runtime stage installs it, with the runtime stage's COPYs
    done into the same place: `sickbay --help` runs, and the defaults find policy, catalog, baseline and
    the current model. What a build would show, short of the base image this environment cannot pull."""
    context = tmp_path / "context"
    for stage in FILE.stages[:-1]:
        for sources in containerfile.copies(stage).values():
            for source in sources:
                origin = support.ROOT / source
                if origin.is_dir():
                    shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    context.mkdir(exist_ok=True)
                    shutil.copy(origin, context / source)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(
            f"the wheel cannot be built here (pip needs setuptools>=77 from an index): {built.stderr[-300:]}"
        )
    (wheel,) = wheels.glob("sickbay-*.whl")
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel) as archive:  # a pure-Python wheel installs by unpacking
        archive.extractall(site)
    for destination, sources in containerfile.copies(RUNTIME).items():
        (source,) = sources
        target = site / PurePosixPath(destination).relative_to(site_packages())
        shutil.copytree(support.ROOT / source, target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SICKBAY_")}
    env |= {"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", _LAYOUT_PROBE, str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    current = json.loads((support.ROOT / "models" / "CURRENT.json").read_text(encoding="utf-8"))["current"]
    assert probe.stdout.strip() == current
    helped = subprocess.run(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert helped.returncode == 0, helped.stderr
    assert "usage: sickbay" in helped.stdout


# ----------------------------------------------------------------------------------------- the real build


def _builder() -> str:
    for name in ("podman", "buildah", "docker"):
        path = shutil.which(name)
        if (
            path
            and subprocess.run([path, "info"], capture_output=True, timeout=30, check=False).returncode == 0
        ):
            return path
    pytest.skip(
        "no working image builder: podman or buildah (Debian packages, no daemon) or docker with its daemon; "
        "`make image` builds with the first of them it finds"
    )


@pytest.mark.slow
def test_the_image_builds_and_runs_sickbay_help() -> None:
    builder = _builder()
    pulled = subprocess.run(
        [builder, "pull", RUNTIME.base], capture_output=True, text=True, timeout=300, check=False
    )
    if pulled.returncode != 0:
        pytest.skip(f"the base image {RUNTIME.base} cannot be pulled: {pulled.stderr.strip()[-300:]}")
    tag = "localhost/sickbay-test:containerfile"
    env = {**os.environ, "IMAGE": tag, "CONTAINER_BUILDER": builder}
    built = subprocess.run(
        ["make", "image"],
        cwd=support.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    runner = (
        builder
        if not builder.endswith("buildah")
        else (shutil.which("podman") or pytest.skip("buildah builds, podman runs"))
    )
    ran = subprocess.run(
        [runner, "run", "--rm", "--read-only", "--user", "65532:65532", tag, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "usage: sickbay" in ran.stdout
    assert "serve" in ran.stdout
