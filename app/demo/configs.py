"""What the stack generates before it starts anything: the seed of the simulated cluster (mirroring
the fleet), the test copy of the rule bundle, the policy override and Alertmanager's configuration."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from app.demo import audit_seed
from app.sim.fleet import FleetSim, SimConfig
from app.sim.fleet.workloads import Job, PodRef
from app.sim.kubeapi.builders import pod_template
from app.sim.kubeapi.resources import JOBS, JOBSETS

REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "rules" / "prometheus" / "sickbay-rules.yaml"
POLICY_FILE = REPO / "rules" / "policy.yaml"
HARDWARE_CLASSES = "reset-gpu|reboot-node|replace|depends"
OTHER_CLASSES = "restart-workload|transient|driver-mismatch|ignore"
POOL_LABEL = "sickbay.io/pool"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_LABEL = "batch.kubernetes.io/job-name"
GPU_OPERATOR_NS = "gpu-operator"

# Alerts whose bundle `for:` is too long to see in a run of seconds, and what the stack's copy uses.
DEFAULT_SHORT_FOR: Mapping[str, str] = {
    "GpuMissingFromExporter": "1s",  # bundle: 2m
    "GpuDriverVersionMismatch": "2s",  # bundle: 15m
}


def quiet_fleet_config(config: SimConfig | None = None) -> SimConfig:
    """Injected faults only: no random failures, exporter restarts, maintenance reboots or app XIDs,
    no automatic repair (Sickbay's remediation stands for it), jobs that outlive the run, a short reboot,
    and no row-remap failure on an uncorrectable error (so an HBM failure is `reset-gpu`, not `replace`)."""
    base = config or SimConfig()
    return replace(
        base,
        rates=replace(base.rates, rate_multiplier=0.0),
        ops=replace(
            base.ops,
            exporter_restarts_per_node_day=0.0,
            maintenance_reboots_per_node_day=0.0,
            auto_repair_after_s=None,
            reboot_s=2.0,
        ),
        workloads=replace(
            base.workloads,
            app_xid_buggy_per_day=0.0,
            app_xid_normal_per_day=0.0,
            duration_clip_s=(7 * 86400.0, 14 * 86400.0),
        ),
        traps=replace(base.traps, buggy_job_fraction=0.0),
        shapes=replace(base.shapes, hbm_row_remap_failure_p=0.0, hbm_weak_fraction=0.0),
    )


def write_rules_copy(target: Path, short_for: Mapping[str, str], *, source: Path = RULES_FILE) -> Path:
    """The bundle with shorter `for:` on the named alerts (for a run of seconds); returns its path."""
    document = yaml.safe_load(source.read_text())
    missing = set(short_for)
    for group in document.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert")
            if name in short_for:
                rule["for"] = short_for[name]
                missing.discard(name)
    if missing:
        raise ValueError(f"no alert named {sorted(missing)} in {source}")
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# GENERATED for a run of seconds from {source.name}: shorter `for:` on "
        + ", ".join(f"{k} ({v})" for k, v in sorted(short_for.items()))
        + ". Do not deploy.\n"
    )
    target.write_text(header + yaml.safe_dump(document, sort_keys=False, width=1000))
    return target


def write_policy(
    target: Path, *, healthy_delay: str, budgets: Mapping[str, Any], more: Mapping[str, Any]
) -> Path:
    """The shipped policy with a short healthy delay, the given budgets and other section overrides."""
    data = yaml.safe_load(POLICY_FILE.read_text())
    data["release"] = {**data.get("release", {}), "healthy_delay": healthy_delay}
    data["budgets"] = {**data.get("budgets", {}), **budgets}
    for key, value in more.items():
        data[key] = {**data.get(key, {}), **value}
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


# A team's own alert rule, which Sickbay has no rule for: the HW power brake held on a GPU (clocks event
# reason 0x80), routed to Sickbay by the team's own route. It is the "soft, unknown alert" of the e2e run.
USER_ALERT = "TeamGpuPowerBrake"
USER_TEAM = "ml-platform"


def write_user_rules(target: Path) -> Path:
    """The cluster's own rule file beside Sickbay's bundle (no `sickbay_class`: Sickbay must cope)."""
    reasons = '{__name__=~"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS|DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}'
    document = {
        "groups": [
            {
                "name": "team-ml-platform",
                "rules": [
                    {
                        "alert": USER_ALERT,
                        "expr": f"floor(max without () ({reasons}) / 128) % 2 == 1",
                        "for": "0s",
                        "labels": {"team": USER_TEAM, "severity": "warning"},
                        "annotations": {"summary": "HW power brake on GPU {{ $labels.gpu }}"},
                    }
                ],
            }
        ]
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def alertmanager_config(
    *,
    sickbay_url: str,
    token_file: Path,
    probe_url: str | None,
    group_wait_other: str,
    group_interval: str,
    user_route: bool = False,
) -> dict[str, Any]:
    """Routes as deploy/alertmanager/sickbay-receiver.yaml, with second-scale waits for a run of seconds."""
    group_by = ["alertname", "node", "gpu"]
    timings = (
        (HARDWARE_CLASSES, "0s"),  # fatal hardware classes go out at once
        (OTHER_CLASSES, group_wait_other),
    )
    routes: list[dict[str, Any]] = []
    if probe_url is not None:
        # The probe gets exactly what Sickbay gets, with the same grouping and timing, and lets the
        # alert go on (`continue`) to Sickbay's own route.
        routes += [
            {
                "receiver": "probe",
                "matchers": [f'sickbay_class=~"{classes}"'],
                "group_by": group_by,
                "group_wait": wait,
                "group_interval": group_interval,
                "repeat_interval": "1h",
                "continue": True,
            }
            for classes, wait in timings
        ]
    routes += [
        {
            "receiver": "sickbay",
            "matchers": [f'sickbay_class=~"{classes}"'],
            "group_by": group_by,
            "group_wait": wait,
            "group_interval": group_interval,
            "repeat_interval": "1h",
        }
        for classes, wait in timings
    ]
    if user_route:  # the team sends its own alert to Sickbay too (README: routing your own alerts)
        routes.append(
            {
                "receiver": "sickbay",
                "matchers": [f'team="{USER_TEAM}"'],
                "group_by": group_by,
                "group_wait": group_wait_other,
                "group_interval": group_interval,
                "repeat_interval": "1h",
            }
        )
    receivers: list[dict[str, Any]] = [
        {"name": "default"},
        {
            "name": "sickbay",
            "webhook_configs": [
                {
                    "url": f"{sickbay_url}/api/v1/alerts",
                    "send_resolved": True,
                    "max_alerts": 0,
                    "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
                }
            ],
        },
    ]
    if probe_url is not None:
        receivers.append(
            {"name": "probe", "webhook_configs": [{"url": probe_url, "send_resolved": True, "max_alerts": 0}]}
        )
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "default",
            "group_by": ["alertname"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "receivers": receivers,
    }


def cluster_seed(sim: FleetSim, *, pool: str, owners: bool = False) -> dict[str, Any]:
    """A kube-api seed mirroring the fleet: its nodes (same names) and one pod per workload it placed.

    Gang ranks carry JobSet labels (Sickbay restarts the whole gang), single pods a Job's label; the
    dcgm-exporter DaemonSet runs on every node (never evicted). With `owners`, each single pod is owned by
    its Job and each rank by its own Job, owned by the gang's JobSet (as the JobSet controller makes
    them); the owners are under `objects`, so a seed with owners loads in two steps, pods last.
    """
    gpus = sim.config.hardware.gpus_per_node
    nodes = [
        {
            "name": name,
            "count": 1,
            "gpus": gpus,
            "labels": {POOL_LABEL: pool, "node.kubernetes.io/instance-type": "p5.48xlarge"},
        }
        for name in sim.node_names
    ]
    pods: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for job in sorted(sim.scheduler.running.values(), key=lambda j: j.name):
        for rank, placement in enumerate(job.placements):
            pod = workload_pod(
                placement.pod,
                node=sim.nodes[placement.node].name,
                gpus=len(placement.gpus),
                job=job.name,
                gang=job.gang,
                rank=rank,
            )
            if owners:
                pod["owner"] = {"kind": "Job", "name": rank_job_name(job, rank)}
            pods.append(pod)
        if owners:
            objects += owner_objects(job)
    return {
        "namespaces": [GPU_OPERATOR_NS],
        "nodes": nodes,
        "daemonsets": [
            {
                "name": "nvidia-dcgm-exporter",
                "namespace": GPU_OPERATOR_NS,
                "labels": {"app": "nvidia-dcgm-exporter"},
                "nodes": "all",
            }
        ],
        "pods": pods,
        **({"objects": objects} if objects else {}),
    }


def rank_job_name(job: Job, rank: int) -> str:
    """The Job that owns a rank's pod: the JobSet controller's `<jobset>-<replicatedJob>-<index>`."""
    return f"{job.name}-workers-{rank}" if job.gang else job.name


def owner_objects(job: Job) -> list[dict[str, Any]]:
    """A single pod's Job; or a gang's JobSet and one Job per rank, owned by it."""
    namespace = job.namespace
    jobset_uid = _uid(f"jobset/{namespace}/{job.name}")
    out: list[dict[str, Any]] = []
    if job.gang:
        out.append(
            {
                "apiVersion": JOBSETS.api_version,
                "kind": JOBSETS.kind,
                "metadata": {"name": job.name, "namespace": namespace, "uid": jobset_uid},
                "spec": {"replicatedJobs": [{"name": "workers", "replicas": len(job.placements)}]},
            }
        )
    for rank in range(len(job.placements) if job.gang else 1):
        name = rank_job_name(job, rank)
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": _uid(f"job/{namespace}/{name}"),
        }
        if job.gang:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": JOBSETS.api_version,
                    "kind": JOBSETS.kind,
                    "name": job.name,
                    "uid": jobset_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        template = pod_template({"job-name": name}, gpus=job.gpus_per_pod, restart_policy="Never")
        out.append(
            {
                "apiVersion": JOBS.api_version,
                "kind": JOBS.kind,
                "metadata": metadata,
                "spec": {"template": template, "podFailurePolicy": audit_seed.FAILURE_POLICY},
                "status": {"active": 1 if job.gang else len(job.placements)},
            }
        )
    return out


def _uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"sickbay-demo:{name}"))


def workload_pod(pod: PodRef, *, node: str, gpus: int, job: str, gang: bool, rank: int = 0) -> dict[str, Any]:
    """The seed entry of one workload pod (as the fleet's exporter attributes it)."""
    if gang:
        labels = {
            JOBSET_LABEL: job,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": str(rank),
        }
    else:
        labels = {JOB_LABEL: job, "job-name": job}
    return {"name": pod.name, "namespace": pod.namespace, "node": node, "gpus": gpus, "labels": labels}
