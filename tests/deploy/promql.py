"""Just enough PromQL reading for the dashboard test: Grafana variables substituted, metric names and the
label names a selector uses. Parsing itself (is the expression valid?) is promtool's job."""

from __future__ import annotations

import re

# What Grafana puts in for its built-in variables, and for the dashboard's own (`$node` is a regex).
GRAFANA_VARIABLES = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "node": ".*",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.\"])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
     "group_right", "inf", "nan", "Inf", "NaN", "atan2"}
)  # fmt: skip
_NAME_MATCHER = re.compile(r'__name__\s*(=~|=)\s*"([^"]*)"')
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")


def substitute(expr: str) -> str:
    """The expression with every Grafana variable replaced; KeyError names an unknown one."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in GRAFANA_VARIABLES:
            raise KeyError(f"unknown Grafana variable ${name} in {expr!r}")
        return GRAFANA_VARIABLES[name]

    return _VARIABLE.sub(value, expr)


def metric_names(expr: str) -> set[str]:
    """Every metric an expression selects: bare names and `__name__` matchers (alternations split)."""
    names: set[str] = set()
    for op, value in _NAME_MATCHER.findall(expr):
        names.update(value.split("|") if op == "=~" else [value])
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    for match in _IDENT.finditer(text):
        ident, call = match.group(1), match.group(2)
        if call or ident in _KEYWORDS:
            continue
        names.add(ident)
    return names


def selector_labels(expr: str) -> dict[str, set[str]]:
    """metric name -> label names its `{...}` matchers use (only selectors written with a bare name)."""
    out: dict[str, set[str]] = {}
    for name, body in _SELECTOR.findall(expr):
        if not name:
            continue
        labels = set(_MATCHER_LABEL.findall(_STRING.sub('""', body)))
        out.setdefault(name, set()).update(labels)
    return out
