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


def shape(tag: str, *, text: str = "", title: str = "", **attrs: object) -> Shape:
    """A shape; attribute names take `_` for `-` (`stroke_width` is `stroke-width`), floats one decimal."""
    return Shape(tag, {k.replace("_", "-"): _value(v) for k, v in attrs.items()}, text, title)
