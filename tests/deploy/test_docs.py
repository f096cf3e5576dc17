"""The operator docs stay true to the code and the rule bundle: every alert's runbook_url anchor exists
in docs/runbooks.md, every Event reason and `sickbay.io/` key the service uses is explained in
docs/operators-guide.md, the guide lists the dcgm-exporter counters the bundle needs, and the docs' own
links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy import support

DOCS = support.ROOT / "docs"
RUNBOOKS = DOCS / "runbooks.md"
GUIDE = DOCS / "operators-guide.md"
# Test and demo code, not what runs in a cluster.
NOT_SERVICE = ("app/sim/", "app/demo/")
EVENT_REASON = re.compile(r"""["'](Sickbay[A-Z][A-Za-z]+)["']""")
SICKBAY_KEY = re.compile(r"sickbay\.io/[a-z][a-z0-9-]*")
COUNTER_LINE = re.compile(r"^#\s+(DCGM_\w+),\s*(?:counter|gauge)\b", re.MULTILINE)


def _alerts() -> list[dict[str, object]]:
    bundle = yaml.safe_load(support.RULES.read_text(encoding="utf-8"))
    return [rule for group in bundle["groups"] for rule in group["rules"] if "alert" in rule]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    explicit = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    headings = {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}
    return explicit | headings


def _service_sources() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(support.ROOT)), path.read_text(encoding="utf-8"))
        for path in sorted((support.ROOT / "app").rglob("*.py"))
        if not str(path.relative_to(support.ROOT)).startswith(NOT_SERVICE)
    ]


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_every_runbook_url_points_at_a_section_of_the_runbooks(alert: dict[str, object]) -> None:
    url = str(alert["annotations"]["runbook_url"])  # type: ignore[index]
    path, _, anchor = url.partition("#")
    assert path.endswith("/docs/runbooks.md"), url
    assert anchor in anchors(RUNBOOKS), f"docs/runbooks.md has no anchor #{anchor} for {alert['alert']}"
    text = RUNBOOKS.read_text(encoding="utf-8")
    after = text[text.index(f'<a id="{anchor}"></a>') :]
    heading = re.search(r"^## (.+)$", after, re.MULTILINE)
    assert heading is not None
    assert heading.group(1) == alert["alert"], "the section after the anchor is not this alert's"
    section = after[heading.end() :].split("\n## ", 1)[0]
    assert f"**Class** `{alert['labels']['sickbay_class']}`" in section  # type: ignore[index]


def test_the_runbooks_have_no_section_for_an_alert_that_does_not_exist() -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^## (Gpu\w+)$", text, re.MULTILINE))
    assert documented == {str(a["alert"]) for a in _alerts()}


def test_every_event_reason_the_service_writes_is_explained() -> None:
    reasons = {reason for _, text in _service_sources() for reason in EVENT_REASON.findall(text)}
    assert reasons, "found no Event reasons in app/: the pattern is out of date"
    guide = GUIDE.read_text(encoding="utf-8")
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in guide)
    assert not missing, f"Event reasons used in app/ but not explained in docs/operators-guide.md: {missing}"


def test_every_sickbay_io_key_the_service_uses_is_explained() -> None:
    keys = {key for _, text in _service_sources() for key in SICKBAY_KEY.findall(text)}
    assert "sickbay.io/unhealthy" in keys
    guide = GUIDE.read_text(encoding="utf-8")
    missing = sorted(key for key in keys if f"`{key}" not in guide)
    assert not missing, (
        f"sickbay.io/ keys used in app/ but not explained in docs/operators-guide.md: {missing}"
    )


def test_the_guide_lists_the_counters_the_rule_bundle_needs() -> None:
    header = support.RULES.read_text(encoding="utf-8").split("\ngroups:", 1)[0]
    counters = COUNTER_LINE.findall(header)
    assert len(counters) >= 10, "the bundle header's counters list was not found"
    guide = GUIDE.read_text(encoding="utf-8")
    assert [c for c in counters if c not in guide] == []


def test_the_guide_covers_the_operators_tasks() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    for needle in (
        "deploy/overlays/dry-run",
        "deploy/overlays/default",
        "deploy/overlays/prometheus-operator",
        "deploy/overlays/persistent-journal",
        "sickbay explain",
        "GET /api/v1/actions",
        "podFailurePolicy",
        "alertmanagerConfigMatcherStrategy",
        "sickbay.io/managed=false",
        "kubectl uncordon",
        "budgets:",
        "GpuHealthy",
    ):
        assert needle in guide, needle
    for name in support.OVERLAY_NAMES:
        assert f"deploy/overlays/{name}" in guide


@pytest.mark.parametrize("doc", [GUIDE, RUNBOOKS, DOCS / "architecture.md"], ids=lambda p: p.name)
def test_links_between_the_docs_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path) if path else doc
        assert resolved.exists(), f"{doc.name}: broken link {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{doc.name}: no anchor #{anchor} in {resolved.name}"
