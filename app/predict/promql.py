"""The PromQL the reader sends and how it reads the answer's labels back.

Metrics DCGM 4.6 renamed are selected under both names (`{__name__=~"OLD|NEW"}`); a batch of hosts is
one regex matcher per host label spelling, so a read stays one query per metric. A series names its host
by any of `features.HOST_COLUMNS`; `gpu_identity` and `host_ref` accept every spelling. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.predict import features


def selector(metric: str, matchers: Sequence[str] = (), *, offset_s: float = 0.0) -> str:
    """The PromQL selector for a source metric and its DCGM 4.6 name, if it has one.

    With `matchers` (label matchers such as `Hostname=~"a|b"`), the series that match any of them: one
    selector per matcher joined with `or` — still one query, whatever the number of hosts. `offset_s`:
    each selector's values that long before (an `offset` modifies a selector, not an expression).
    """
    names = [metric, *(old for old, new in features.ALIASES.items() if new == metric)]
    offset = f" offset {round(offset_s * 1000)}ms" if offset_s else ""
    if not matchers:
        return (metric if len(names) == 1 else '{__name__=~"' + "|".join(names) + '"}') + offset
    if len(names) == 1:
        return " or ".join(f"{metric}{{{m}}}{offset}" for m in matchers)
    name = '__name__=~"' + "|".join(names) + '"'
    return " or ".join(f"{{{name}, {m}}}{offset}" for m in matchers)


def host_matchers(hosts: Iterable[HostRef]) -> list[str]:
    """Label matchers selecting these hosts' series: one regex matcher per host label spelling."""
    by_label: dict[str, list[str]] = {}
    for host in hosts:
        values = by_label.setdefault(host.label, [])
        if host.value not in values:
            values.append(host.value)
    return [
        f'{label}=~"{_string("|".join(_regex(v) for v in values))}"' for label, values in by_label.items()
    ]


def _regex(value: str) -> str:
    """`value` as a literal in an RE2 regular expression."""
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in value)


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _string(text: str) -> str:
    """`text` inside a double-quoted PromQL string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True, slots=True, order=True)
class HostRef:
    """A host as the series name it: the node name features use, and the label (and raw value) naming it."""

    node: str
    label: str
    value: str


def host_ref(labels: Mapping[str, str]) -> HostRef | None:
    """The host a series' labels name, as `gpu_identity` reads it, with the label that names it."""
    label = next((name for name in features.HOST_COLUMNS if labels.get(name)), None)
    value = labels[label] if label is not None else None
    if label is None or not isinstance(value, str):
        return None
    node = value.rsplit(":", 1)[0] if label == "instance" and ":" in value else value
    return HostRef(node=node, label=label, value=value)


def gpu_identity(labels: Mapping[str, str]) -> tuple[str, int, str] | None:
    """(node, gpu, uuid) from a series' labels, accepting every host spelling; None without host or gpu."""
    host = next((labels[name] for name in features.HOST_COLUMNS if labels.get(name)), None)
    gpu = labels.get("gpu")
    if not isinstance(host, str) or not isinstance(gpu, str) or not gpu.isdigit():
        return None
    if host == labels.get("instance") and "node" not in labels:
        host = host.rsplit(":", 1)[0] if ":" in host else host
    return host, int(gpu), labels.get("UUID") or labels.get("uuid") or ""
