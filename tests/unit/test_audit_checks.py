"""The audit's pure checks: what each one flags, what it leaves alone, and how findings become an exit code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.audit import checks, report
from app.audit.checks import AuditConfig, Kind, Severity, Snapshot
from app.dcgm_fields import OLD_NAME_OF
from app.domain import FailureRule, JobState, NodeState, OwnerRef, PodFacts, PodState, Toleration
from app.kube import convert
from app.kube.jobs import job_state

NOW = datetime(2026, 1, 1, tzinfo=UTC)  # the snapshot's own clock: no real time is read
WINDOW = (
    Toleration(key=checks.NOT_READY, operator="Exists", effect="NoExecute", seconds=300),
    Toleration(key=checks.UNREACHABLE, operator="Exists", effect="NoExecute", seconds=300),
)


def gpu_node(name: str, **labels: str) -> NodeState:
    return NodeState(name=name, gpu_capacity=8, gpu_allocatable=8, labels=tuple(labels.items()))


def pod(name: str, *, node: str = "gpu-0", gpus: int = 1, **facts: object) -> PodState:
    fields = {"tolerations": WINDOW, **facts}
    return PodState(namespace="ml", name=name, node=node, gpu_request=gpus, facts=PodFacts(**fields))  # type: ignore[arg-type]


def kinds(snapshot: Snapshot, config: AuditConfig = AuditConfig()) -> list[tuple[Kind, str]]:  # noqa: B008
    return [(f.kind, f.object) for f in checks.audit(snapshot, config)]


def test_a_well_behaved_gpu_pod_on_a_gpu_node_has_no_finding() -> None:
    assert kinds(Snapshot(now=NOW, nodes=(gpu_node("gpu-0"),), pods=(pod("trainer"),))) == []


def test_cluster_pods_are_never_non_gpu_findings_but_other_non_gpu_pods_on_gpu_nodes_are() -> None:
    daemon = PodState(namespace="ml", name="exporter", node="gpu-0", owners=(OwnerRef("DaemonSet", "x"),))
    system = PodState(namespace="kube-system", name="coredns", node="gpu-0")
    critical = pod("csi", gpus=0, priority=2_000_001_000, priority_class="system-node-critical")
    elsewhere = pod("web", node="cpu-0", gpus=0)
    stray = pod("web-2", gpus=0)
    snapshot = Snapshot(
        now=NOW,
        nodes=(gpu_node("gpu-0"), NodeState(name="cpu-0")),
        pods=(daemon, system, critical, elsewhere, stray),
    )
    assert kinds(snapshot) == [(Kind.NON_GPU_POD, "Pod ml/web-2")]


def test_priority_below_the_threshold_is_low_and_the_threshold_is_configurable() -> None:
    snapshot = Snapshot(now=NOW, nodes=(gpu_node("gpu-0"),), pods=(pod("p", priority=-5),))
    assert kinds(snapshot) == [(Kind.LOW_PRIORITY_POD, "Pod ml/p")]
    assert kinds(snapshot, AuditConfig(low_priority_below=-10)) == []


def test_a_toleration_without_seconds_is_no_window_but_a_keyless_exists_with_seconds_is_one() -> None:
    forever = pod("forever", tolerations=(Toleration(key=checks.NOT_READY, operator="Exists"), WINDOW[1]))
    everything = pod("all", tolerations=(Toleration(operator="Exists", seconds=600),))
    found = checks.audit(Snapshot(now=NOW, nodes=(gpu_node("gpu-0"),), pods=(forever, everything)))
    assert [(f.kind, f.object) for f in found] == [(Kind.POD_NO_READINESS_TOLERATION, "Pod ml/forever")]
    assert checks.UNREACHABLE not in found[0].detail, "only the key without a window is named"


def test_grace_period_below_the_configured_minimum() -> None:
    short = PodState(
        namespace="ml",
        name="p",
        node="gpu-0",
        gpu_request=1,
        grace_period_s=60,
        facts=PodFacts(tolerations=WINDOW),
    )
    snapshot = Snapshot(now=NOW, nodes=(gpu_node("gpu-0"),), pods=(short,))
    assert kinds(snapshot) == []
    assert kinds(snapshot, AuditConfig(min_grace_s=120)) == [(Kind.POD_SHORT_GRACE, "Pod ml/p")]


def test_gpu_jobs_need_both_rules_finished_and_cpu_jobs_are_left_alone() -> None:
    ignore_other = FailureRule(action="Ignore", conditions=("ConfigIssue",))
    codes = FailureRule(action="FailJob", exit_operator="In", exit_codes=(42,))
    jobs = (
        JobState("ml", "bare", gpu_request=8),
        JobState(
            "ml",
            "wrong-condition",
            gpu_request=8,
            failure_rules=(ignore_other, codes),
            has_failure_policy=True,
        ),
        JobState("ml", "finished", gpu_request=8, done=True),
        JobState("ml", "cpu", gpu_request=0),
    )
    assert kinds(Snapshot(now=NOW, jobs=jobs)) == [
        (Kind.JOB_NO_DISRUPTION_RULE, "Job ml/bare"),
        (Kind.JOB_NO_DISRUPTION_RULE, "Job ml/wrong-condition"),
        (Kind.JOB_NO_EXIT_CODE_RULE, "Job ml/bare"),
    ]


def test_version_drift_names_the_odd_node_per_pool_and_skips_unlabelled_nodes() -> None:
    def labelled(name: str, pool: str, major: str) -> NodeState:
        return gpu_node(name, **{"sickbay.io/pool": pool, "nvidia.com/cuda.driver.major": major})

    nodes = (
        labelled("a-0", "a", "550"),
        labelled("a-1", "a", "550"),
        labelled("a-2", "a", "535"),
        labelled("b-0", "b", "535"),  # another pool: its own majority
        gpu_node("a-3", **{"sickbay.io/pool": "a"}),  # no GFD labels: nothing to compare
    )
    plugin = [
        PodState(
            namespace="gpu",
            name=f"dp-{n}",
            node=n,
            owners=(OwnerRef("DaemonSet", "dp"),),
            facts=PodFacts(images=(f"nvcr.io/nvidia/k8s-device-plugin:{tag}",)),
        )
        for n, tag in (("a-0", "v0.17.0"), ("a-1", "v0.17.0"), ("a-3", "v0.16.2"))
    ]
    found = checks.audit(Snapshot(now=NOW, nodes=nodes, pods=tuple(plugin)))
    assert [(f.kind, f.object) for f in found] == [
        (Kind.VERSION_DRIFT, "Node a-2"),
        (Kind.VERSION_DRIFT, "Node a-3"),
    ]
    assert "driver 535" in found[0].detail
    assert "device plugin v0.16.2" in found[1].detail


def test_allocatable_below_capacity() -> None:
    node = NodeState(name="n", gpu_capacity=8, gpu_allocatable=6)
    assert [f.detail for f in checks.audit(Snapshot(now=NOW, nodes=(node,)))] == ["allocatable 6 of 8 GPUs"]


def test_footprint_owned_nodes_are_info_until_held_too_long_and_hand_cordons_are_warnings() -> None:
    def owned(name: str, held: timedelta) -> NodeState:
        since = (NOW - held).isoformat()
        return NodeState(
            name=name,
            unschedulable=True,
            labels=(("sickbay.io/state", "draining"),),
            annotations=(("sickbay.io/owned-by", "sickbay"), ("sickbay.io/since", since)),
        )

    nodes = (
        owned("recent", timedelta(hours=3)),
        owned("stale", timedelta(days=3)),
        NodeState(name="hand", unschedulable=True),
    )
    found = {f.object: f for f in checks.audit(Snapshot(now=NOW, nodes=nodes))}
    assert found["Node recent"].severity is Severity.INFO
    assert found["Node recent"].detail == "draining for 3h00m"
    assert found["Node stale"].severity is Severity.WARNING
    assert found["Node hand"].kind is Kind.HAND_CORDONED
    assert report.exit_code([found["Node recent"]]) == report.EXIT_CLEAN, "info alone passes CI"
    assert report.exit_code(list(found.values())) == report.EXIT_FINDINGS


def test_a_field_exported_under_its_dcgm_4_6_name_is_not_missing() -> None:
    new = next(n for n, old in OLD_NAME_OF.items() if old == "DCGM_FI_DEV_GPU_TEMP")
    needed = {"DCGM_FI_DEV_GPU_TEMP": ("the model",), "DCGM_FI_DEV_XID_ERRORS": ("rules", "the model")}
    snapshot = Snapshot(now=NOW, exported_fields=frozenset({new}), needed_fields=needed, aliases=OLD_NAME_OF)
    found = checks.audit(snapshot)
    assert [(f.kind, f.object) for f in found] == [(Kind.DCGM_FIELD_MISSING, "Metric DCGM_FI_DEV_XID_ERRORS")]
    assert kinds(Snapshot(now=NOW, needed_fields=needed)) == [], "not read from Prometheus: not checked"


def test_counts_carry_every_kind_so_a_metric_has_a_bounded_label_set() -> None:
    counts = report.counts([checks.Finding(Kind.ALLOCATABLE_SHORT, "Node n", "")])
    assert set(counts) == {k.value for k in Kind}
    assert counts[Kind.ALLOCATABLE_SHORT.value] == 1
    assert sum(counts.values()) == 1


def test_pod_and_job_json_as_the_api_server_sends_it() -> None:
    facts = convert.pod_facts(
        {
            "priority": -100,
            "priorityClassName": "preemptible",
            "tolerations": [
                {
                    "key": checks.NOT_READY,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "initContainers": [{"image": "busybox"}],
            "containers": [{"image": "nvcr.io/nvidia/pytorch:24.08-py3"}],
        }
    )
    assert facts == PodFacts(
        priority=-100,
        priority_class="preemptible",
        tolerations=(WINDOW[0],),
        images=("busybox", "nvcr.io/nvidia/pytorch:24.08-py3"),
    )
    job = job_state(
        {
            "metadata": {"namespace": "ml", "name": "j"},
            "spec": {
                "backoffLimit": 2,
                "template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}},
                "podFailurePolicy": {
                    "rules": [
                        {
                            "action": "Ignore",
                            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                        },
                        {
                            "action": "FailJob",
                            "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
                        },
                    ]
                },
            },
            "status": {"active": 4, "conditions": [{"type": "Complete", "status": "False"}]},
        }
    )
    assert job == JobState(
        namespace="ml",
        name="j",
        gpu_request=4,
        backoff_limit=2,
        failure_rules=(
            FailureRule(action="Ignore", conditions=("DisruptionTarget",)),
            FailureRule(action="FailJob", exit_operator="In", exit_codes=(42,)),
        ),
        has_failure_policy=True,
        active=4,
        done=False,
    )
