"""The Prometheus rule bundle, its promtool tests and the Alertmanager route, checked with the real tools.

`promtool` and `amtool` come from Debian's `prometheus` and `prometheus-alertmanager` packages, which
`make test` installs (scripts/install-system-packages.sh); the tests that run them skip only when a tool
is not on PATH. The static tests read the YAML files with PyYAML and hold the bundle to the label
contract Sickbay's classifier relies on and to the XID catalog in rules/xid-catalog.yaml.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "prometheus" / "sickbay-rules.yaml"
RULE_TESTS = sorted((ROOT / "rules" / "prometheus" / "tests").glob("*.yaml"))
CATALOG = ROOT / "rules" / "xid-catalog.yaml"
POLICY = ROOT / "rules" / "policy.yaml"
RECEIVER = ROOT / "deploy" / "alertmanager" / "sickbay-receiver.yaml"
PROMETHEUSRULE = ROOT / "deploy" / "prometheus-rule" / "prometheusrule.yaml"
GENERATOR = ROOT / "deploy" / "prometheus-rule" / "gen_prometheusrule.py"

CLASSES = frozenset(
    {
        "ignore",
        "restart-workload",
        "reset-gpu",
        "reboot-node",
        "replace",
        "depends",
        "transient",
        "driver-mismatch",
    }
)
FATAL_CLASSES = frozenset({"reset-gpu", "reboot-node", "replace", "depends"})
SEVERITIES = frozenset({"critical", "warning", "info"})
WEBHOOK_URL = "http://sickbay.sickbay.svc:8080/api/v1/alerts"
RUNBOOK = re.compile(r"^https://\S+/docs/runbooks\.md#[a-z0-9]+(-[a-z0-9]+)*$")
XID_SELECTOR = re.compile(r'xid(=~|!~)"([0-9|]+)"')
# The `node` normalisation every expression over raw exporter series applies (or inherits from the
# XID recording rule): the first non-empty host label wins.
HOST_JOIN = '"sickbay_host", ";", "node", "kubernetes_node", "Hostname", "hostname"'
TOOL_TIMEOUT_S = 120


# --- helpers ---------------------------------------------------------------------------------------


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _load(RULES)["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _records() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "record" in rule]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} is not on PATH: install Debian's prometheus / prometheus-alertmanager packages "
            "(scripts/install-system-packages.sh, run by `make test`)"
        )
    return path


def _run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False, cwd=ROOT
    )


def _assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    command = " ".join(str(a) for a in proc.args)
    assert proc.returncode == 0, (
        f"`{command}` exited with {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


def _xid_selector(expr: str) -> tuple[str, frozenset[int]] | None:
    """The first `xid=~"…"` / `xid!~"…"` matcher of an expression: its operator and XID set."""
    match = XID_SELECTOR.search(expr)
    if match is None:
        return None
    return match.group(1), frozenset(int(x) for x in match.group(2).split("|"))


def _unknown_xid_class() -> str:
    """The class the shipped policy gives an XID the catalog does not list."""
    return str(_load(POLICY)["classification"]["unknown_xid"])


def _catalog() -> dict[int, str]:
    return {int(xid): entry["class"] for xid, entry in _load(CATALOG)["xids"].items()}


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_prometheusrule", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alert_cases() -> Iterator[tuple[str, bool]]:
    """(alertname, fires) for every `alert_rule_test` case of every promtool test file."""
    for path in RULE_TESTS:
        for test in _load(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                yield case["alertname"], bool(case.get("exp_alerts"))


def _expr_tests() -> Iterator[str]:
    for path in RULE_TESTS:
        for test in _load(path)["tests"]:
            for case in test.get("promql_expr_test", []):
                yield case["expr"]


# --- the real tools --------------------------------------------------------------------------------


def test_promtool_check_rules_accepts_the_bundle() -> None:
    _assert_ok(_run([_tool("promtool"), "check", "rules", str(RULES)]))


def test_there_are_promtool_tests_and_they_load_the_bundle() -> None:
    assert RULE_TESTS, "no promtool test files in rules/prometheus/tests/"
    for path in RULE_TESTS:
        # recorded-levels.yaml loads a copy of the bundle's recorded-series rules at a 1d interval
        # (tests/predict/test_recorded_rules.py holds the copy equal to the bundle).
        expected = (
            "recorded-levels.rules.yml" if path.name == "recorded-levels.yaml" else "../sickbay-rules.yaml"
        )
        assert _load(path)["rule_files"] == [expected], path.name


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    _assert_ok(_run([_tool("promtool"), "test", "rules", str(test_file)]))


def test_amtool_check_config_accepts_the_receiver() -> None:
    _assert_ok(_run([_tool("amtool"), "check-config", str(RECEIVER)]))


@pytest.mark.parametrize("sickbay_class", sorted(CLASSES))
def test_alertmanager_routes_every_class_to_sickbay(sickbay_class: str) -> None:
    proc = _run(
        [
            _tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={RECEIVER}",
            "--verify.receivers=sickbay",
            f"sickbay_class={sickbay_class}",
            "alertname=GpuTest",
            "node=gpu-node-1",
            "gpu=0",
        ]
    )
    _assert_ok(proc)


def test_alertmanager_keeps_other_alerts_away_from_sickbay() -> None:
    proc = _run(
        [
            _tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={RECEIVER}",
            "--verify.receivers=default",
            "alertname=KubePodCrashLooping",
        ]
    )
    _assert_ok(proc)


def test_generated_prometheusrule_passes_promtool(tmp_path: Path) -> None:
    groups = {"groups": _load(PROMETHEUSRULE)["spec"]["groups"]}
    extracted = tmp_path / "prometheusrule-groups.yaml"
    extracted.write_text(yaml.safe_dump(groups, sort_keys=False), encoding="utf-8")
    _assert_ok(_run([_tool("promtool"), "check", "rules", str(extracted)]))


# --- the label contract ----------------------------------------------------------------------------


def test_alert_names_are_unique() -> None:
    names = [a["alert"] for a in _alerts()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_every_alert_carries_the_labels_sickbay_reads(alert: dict[str, Any]) -> None:
    labels = alert.get("labels", {})
    annotations = alert.get("annotations", {})
    assert labels.get("sickbay_class") in CLASSES, f"sickbay_class={labels.get('sickbay_class')!r}"
    assert labels.get("severity") in SEVERITIES, f"severity={labels.get('severity')!r}"
    for key in ("summary", "description", "runbook_url"):
        assert annotations.get(key), f"annotation {key} is missing"
    assert RUNBOOK.match(annotations["runbook_url"]), annotations["runbook_url"]
    # The static labels are all strings: Prometheus rejects anything else, and the classifier reads text.
    assert all(isinstance(v, str) for v in labels.values()), labels


def test_runbook_anchors_are_distinct() -> None:
    anchors = [a["annotations"]["runbook_url"].rsplit("#", 1)[1] for a in _alerts()]
    assert len(anchors) == len(set(anchors)), sorted(a for a in anchors if anchors.count(a) > 1)


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_every_alert_normalises_the_node_label(alert: dict[str, Any]) -> None:
    expr = alert["expr"]
    if "kube_node_status" in expr:
        return  # kube-state-metrics already labels the node `node`
    uses_normalised_rule = re.search(r"\bsickbay:[a-z_]+:[a-z_]+\b", expr) is not None
    assert HOST_JOIN in expr or uses_normalised_rule, "the expression never derives `node`"


def test_normalised_recording_rules_derive_node() -> None:
    for record in _records():
        if record["record"].startswith("gpu:"):
            # The predictor's per-GPU long windows aggregate nothing away: the exporter's host labels
            # (Hostname or hostname) pass through as they are, which the reader reads either way.
            assert not re.search(r"\bby\s*\(", record["expr"]), record["record"]
        elif record["record"].startswith("sickbay:dcgm_xid_errors:by_xid"):
            assert "sickbay:dcgm_xid_errors:last" in record["expr"]
        else:
            assert HOST_JOIN in record["expr"], record["record"]


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_fatal_classes_page_and_others_do_not(alert: dict[str, Any]) -> None:
    labels = alert["labels"]
    if labels["sickbay_class"] == "ignore":
        assert labels["severity"] == "info"
    if labels["severity"] == "critical":
        assert labels["sickbay_class"] in FATAL_CLASSES


def test_policy_alert_names_agree_with_the_bundle() -> None:
    by_name = {a["alert"]: a["labels"]["sickbay_class"] for a in _alerts()}
    policy = _load(POLICY).get("alerts", {})
    for name, cls in policy.items():
        if name in by_name:
            assert by_name[name] == cls, f"{name}: bundle says {by_name[name]}, policy says {cls}"


# --- the XID catalog -------------------------------------------------------------------------------


def test_xid_alerts_follow_the_catalog() -> None:
    catalog = _catalog()
    seen: dict[int, str] = {}
    excluded: frozenset[int] | None = None
    for alert in _alerts():
        selector = _xid_selector(alert["expr"])
        if selector is None:
            continue
        op, xids = selector
        cls = alert["labels"]["sickbay_class"]
        if op == "!~":
            unknown = _unknown_xid_class()
            assert cls == unknown, (
                f"{alert['alert']}: unknown XIDs are {unknown} by classification.unknown_xid"
            )
            excluded = xids
            continue
        for xid in xids:
            assert xid not in seen, f"XID {xid} is matched by two alerts"
            seen[xid] = cls
    assert seen == catalog, _mapping_diff(seen, catalog)
    assert excluded == frozenset(catalog), "the unclassified-XID alert must exclude exactly the catalog"


def _mapping_diff(got: dict[int, str], want: dict[int, str]) -> str:
    lines = [
        f"XID {xid}: rules {got.get(xid)!r}, catalog {want.get(xid)!r}"
        for xid in sorted(set(got) | set(want))
        if got.get(xid) != want.get(xid)
    ]
    return "XID classes differ:\n" + "\n".join(lines)


def test_hardware_xid_alerts_fire_at_once() -> None:
    for alert in _alerts():
        selector = _xid_selector(alert["expr"])
        if selector is not None and alert["labels"]["sickbay_class"] in FATAL_CLASSES:
            assert alert.get("for", "0s") == "0s", alert["alert"]


# --- every rule is tested, firing and not firing ---------------------------------------------------


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_every_alert_has_firing_and_quiet_promtool_cases(alert: dict[str, Any]) -> None:
    outcomes = {fires for name, fires in _alert_cases() if name == alert["alert"]}
    assert True in outcomes, "no promtool case where it fires"
    assert False in outcomes, "no promtool case where it stays quiet"


def test_every_recording_rule_has_a_promtool_expression_test() -> None:
    exprs = list(_expr_tests())
    for record in _records():
        assert any(record["record"] in e for e in exprs), record["record"]


def test_promtool_cases_name_existing_alerts() -> None:
    names = {a["alert"] for a in _alerts()}
    unknown = {name for name, _ in _alert_cases()} - names
    assert not unknown, f"promtool tests for alerts the bundle does not define: {sorted(unknown)}"


# --- the Alertmanager snippet ----------------------------------------------------------------------


def _sickbay_routes() -> list[dict[str, Any]]:
    config = _load(RECEIVER)
    return [r for r in config["route"]["routes"] if r.get("receiver") == "sickbay"]


def _classes_of(route: dict[str, Any]) -> frozenset[str]:
    (matcher,) = route["matchers"]
    match = re.fullmatch(r'sickbay_class=~"([a-z|-]+)"', matcher)
    assert match is not None, matcher
    return frozenset(match.group(1).split("|"))


def test_fatal_route_sends_at_once_grouped_per_gpu() -> None:
    fatal = [r for r in _sickbay_routes() if _classes_of(r) == FATAL_CLASSES]
    assert len(fatal) == 1, "exactly one route for the fatal hardware classes"
    route = fatal[0]
    assert route["group_wait"] == "0s"
    assert {"alertname", "node", "gpu"} <= set(route["group_by"])
    assert route.get("continue") is True


def test_other_classes_route_with_a_normal_group_wait() -> None:
    others = [r for r in _sickbay_routes() if _classes_of(r) != FATAL_CLASSES]
    assert len(others) == 1
    route = others[0]
    assert _classes_of(route) == CLASSES - FATAL_CLASSES
    assert route["group_wait"] not in ("0s", "0")
    assert {"alertname", "node", "gpu"} <= set(route["group_by"])


def test_webhook_receiver_reaches_sickbay_with_a_bearer_token_file() -> None:
    (receiver,) = [r for r in _load(RECEIVER)["receivers"] if r["name"] == "sickbay"]
    (webhook,) = receiver["webhook_configs"]
    assert webhook["url"] == WEBHOOK_URL
    assert webhook["send_resolved"] is True
    assert webhook["max_alerts"] == 0
    authorization = webhook["http_config"]["authorization"]
    assert authorization["type"] == "Bearer"
    assert authorization["credentials_file"].startswith("/")
    assert "credentials" not in authorization, "the token belongs in a file, not in the config"


# --- the PrometheusRule ----------------------------------------------------------------------------


def test_committed_prometheusrule_is_generated_from_the_rule_file() -> None:
    generator = _load_generator()
    assert PROMETHEUSRULE.read_text(encoding="utf-8") == generator.render(), (
        "deploy/prometheus-rule/prometheusrule.yaml is stale: run "
        "`python deploy/prometheus-rule/gen_prometheusrule.py`"
    )


def test_prometheusrule_wraps_the_same_groups() -> None:
    rule = _load(PROMETHEUSRULE)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == _load(RULES)["groups"]
