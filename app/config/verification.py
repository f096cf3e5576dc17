"""The `verification` section of `rules/policy.yaml`: the Job run on a remediated node before its release.

Kept out of `rules.py` so that module stays one screen of models; `rules.Policy.verification` is this.
The Job itself is a YAML template beside the policy (`rules/verification-job.yaml` by default: DCGM's
diagnostic, `dcgmi diag -r <level>`); `app.decide.verification` fills in what pins it to the node.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.config import errors
from app.config.durations import Duration

DEFAULT_TEMPLATE = "verification-job.yaml"
# Where the shipped policy and template live (the rules directory of the checkout or image).
DEFAULT_POLICY_DIR = Path(__file__).resolve().parents[2] / "rules"


class VerificationPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Off by default: the Job needs an image the cluster can pull (NVIDIA's DCGM image from nvcr.io) and a
    # namespace to run in; a cluster without them would never release a node. `rules/policy.yaml` says so.
    enabled: bool = False
    # DCGM's suite level (docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/
    # dcgmi-diag.html): 1 "quick deployment checks, normally lasting seconds", 2 "medium validation,
    # normally lasting approximately two minutes"; 3 and 4 take 15 minutes and more, for an administrator.
    level: Literal[1, 2, 3, 4] = 2
    # activeDeadlineSeconds of the Job: past it Kubernetes fails the Job (reason DeadlineExceeded).
    deadline: Duration = timedelta(minutes=10)
    # This many failed verifications in a row escalate the node to `replace`.
    max_failures: int = Field(default=2, ge=1)
    # Where the Jobs run (Sickbay's own namespace: its Role grants the Job calls there).
    namespace: str = Field(default="sickbay", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    # The Job template, relative to the policy file's directory (or absolute).
    template: str = DEFAULT_TEMPLATE
    # ttlSecondsAfterFinished: Kubernetes deletes a finished Job this long after it ended.
    keep_finished: Duration = timedelta(hours=1)

    @model_validator(mode="after")
    def _positive(self) -> VerificationPolicy:
        if self.deadline <= timedelta(0):
            raise ValueError("verification.deadline must be positive")
        return self


def load_template(policy: VerificationPolicy, *, policy_dir: Path) -> str:
    """The Job template's text (checked to be one YAML mapping), read once at start-up; "" when
    verification is off, so a cluster that does not use it needs no template."""
    if not policy.enabled:
        return ""
    path = Path(policy.template)
    path = path if path.is_absolute() else policy_dir / path
    try:
        text = path.read_text(encoding="utf-8")
        parsed = yaml.safe_load(text)
    except OSError as exc:
        raise errors.ConfigError(f"cannot read the verification template {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"the verification template {path} is not valid YAML: {exc}") from None
    containers = (((parsed or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers")
    if not isinstance(parsed, dict) or not containers:
        raise errors.ConfigError(f"the verification template {path} must be a Job with a container")
    return text
