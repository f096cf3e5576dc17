"""The HTML pages and reports, rendered through Jinja2 with autoescape on.

Every page extends `base.html.j2` and draws its plots with the macros of `svg.html.j2`, from the shapes
`svg` builds. Autoescape is on for every template, so text from an alert label, an annotation or a
result renders as text, never as markup: no renderer escapes by hand. No page carries JavaScript.
"""

from __future__ import annotations

from typing import Any

import jinja2

# One environment for every page; autoescape on for all of them, whatever the file name.
ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("app", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,  # a misspelt name fails the render instead of showing nothing
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render(name: str, /, **context: Any) -> str:
    """Render the template `name` (a file of this package) with `context`."""
    return ENVIRONMENT.get_template(name).render(**context)
