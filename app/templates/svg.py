"""Plots as data: the shapes of an inline SVG figure, which `svg.html.j2` turns into markup.

The plotting code computes geometry and says what each mark means; the template writes the elements and
escapes every text and attribute. A shape's `title` is its hover text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Shape:
    tag: str
    attrs: dict[str, str]
    text: str = ""  # the element's content (for <text>)
    title: str = ""


@dataclass(frozen=True, slots=True)
class Figure:
    width: int
    height: int
    shapes: Sequence[Shape]
    font_size: int = 12
    css_class: str = ""
    # (title, colour) marks along the top; dots for milestones, squares for areas and lines.
    legend: Sequence[tuple[str, str]] = ()
    legend_mark: Literal["dot", "square"] = "dot"


def _value(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _shape(tag: str, attrs: dict[str, object], text: str, title: str) -> Shape:
    return Shape(tag, {k.replace("_", "-"): _value(v) for k, v in attrs.items()}, text, title)


def shape(tag: str, *, text: str = "", title: str = "", **attrs: object) -> Shape:
    """A shape; attribute names take `_` for `-` (`stroke_width` is `stroke-width`), floats one decimal."""
    return _shape(tag, attrs, text, title)


def line(x1: float, y1: float, x2: float, y2: float, *, title: str = "", **style: object) -> Shape:
    return _shape("line", {"x1": x1, "y1": y1, "x2": x2, "y2": y2, **style}, "", title)


def rect(x: float, y: float, width: float, height: float, *, title: str = "", **style: object) -> Shape:
    return _shape("rect", {"x": x, "y": y, "width": width, "height": height, **style}, "", title)


def circle(cx: float, cy: float, r: float, *, title: str = "", **style: object) -> Shape:
    return _shape("circle", {"cx": cx, "cy": cy, "r": r, **style}, "", title)


def text(x: float, y: float, content: str, *, title: str = "", **style: object) -> Shape:
    return _shape("text", {"x": x, "y": y, **style}, content, title)
