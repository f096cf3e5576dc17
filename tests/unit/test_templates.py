"""Pages render through Jinja2 with autoescape: a hostile label is text in every page and every plot."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from app import templates
from app.demo import report
from app.demo.timeline import Event, Scene
from app.templates import svg

HOSTILE = "<script>alert('x')</script>"


def test_a_hostile_label_in_the_demo_report_and_its_charts_is_text() -> None:
    scene = Scene(
        key="a",
        title=HOSTILE,
        label=HOSTILE,
        node="gpu-0" + HOSTILE,
        expect=HOSTILE,
        started=0.0,
        signal=1.0,
        alert=1.5,
        decision=2.0,
        effect=3.0,
        status="done",
    )
    info = report.RunInfo(
        started=datetime(2026, 1, 1, tzinfo=UTC),
        nodes=1,
        gpus_per_node=8,
        ready_s=1.0,
        scenario_s=2.0,
        total_s=3.0,
        kubeconfig=Path("/k"),
        workdir=Path("/w"),
        notes=(HOSTILE,),
    )
    page = report.render(info, [scene], [Event(1.0, HOSTILE, "alert", HOSTILE)])
    assert "<script" not in page
    assert page.count("&lt;script&gt;") >= 8  # notes, summary, both charts' lanes and titles, details, log
    assert page.count("<svg") == 2


def test_the_svg_macros_escape_text_titles_and_attributes() -> None:
    figure = svg.Figure(
        100,
        50,
        [svg.text(1.0, 2.0, HOSTILE, title=HOSTILE, fill='"><script>'), svg.line(0, 0, 1, 1, stroke="#000")],
        legend=[(HOSTILE, "#fff")],
    )
    env = templates.ENVIRONMENT
    html = env.from_string('{% import "svg.html.j2" as svg %}{{ svg.figure(f) }}').render(f=figure)
    assert "<script" not in html
    assert html.count("&lt;script&gt;") == 4
    assert '<text x="1.0" y="2.0" fill="&#34;&gt;&lt;script&gt;">' in html
    assert '<line x1="0" y1="0" x2="1" y2="1" stroke="#000"/>' in html


def test_every_template_is_autoescaped() -> None:
    env = templates.ENVIRONMENT
    names = env.list_templates()
    assert {"base.html.j2", "svg.html.j2", "status.html.j2", "demo_report.html.j2"} <= set(names)
    assert env.autoescape is True
