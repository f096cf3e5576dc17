"""Label and field selectors with Kubernetes' grammar and matching rules.

Sickbay finds pods by `spec.nodeName` and gangs by label, so the simulator must accept what kube-apiserver
accepts and reject what it rejects (a bad selector is a 400, an unsupported field label too). Matching is a
pure function of the object; nothing here touches server state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.sim.kubeapi.errors import ApiError, bad_request

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid label or annotation key, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (max 63 characters)"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    match_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing


NOTHING = LabelSelector(match_nothing=True)

_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|>|<|[^\s=!(),<>]+)")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:  # pragma: no cover - the pattern accepts every non-space character
            raise bad_request(f"unable to parse requirement: unexpected input at {text[pos:]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def _check_key(key: str) -> None:
    problem = label_key_problem(key)
    if problem:
        raise bad_request(f'unable to parse requirement: values[0][{key}]: Invalid value: "{key}": {problem}')


def _check_value(key: str, value: str) -> None:
    problem = label_value_problem(value)
    if problem:
        raise bad_request(
            f'unable to parse requirement: values[0][{key}]: Invalid value: "{value}": {problem}'
        )


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        word = self.peek()
        if word is None:
            raise self.error("unexpected end of selector")
        self.pos += 1
        return word

    def error(self, why: str) -> ApiError:
        return bad_request(f"unable to parse requirement: {why} in {self.text!r}")

    def requirement(self) -> Requirement:
        word = self.take()
        if word == "!":
            key = self.take()
            _check_key(key)
            return Requirement(key, "!")
        key = word
        _check_key(key)
        op = self.peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self.pos += 1
        if op in ("=", "==", "!="):
            value = ""
            if self.peek() not in (None, ","):
                value = self.take()
            _check_value(key, value)
            return Requirement(key, "!=" if op == "!=" else "=", (value,))
        if op in (">", "<"):
            value = self.take()
            if not re.fullmatch(r"-?\d+", value):
                raise self.error(f"for 'Gt', 'Lt' operators, the value must be an integer, got {value!r}")
            return Requirement(key, "gt" if op == ">" else "lt", (value,))
        if op in ("in", "notin"):
            return Requirement(key, op, self.value_set(key))
        raise self.error(f"unknown operator {op!r}")

    def value_set(self, key: str) -> tuple[str, ...]:
        if self.take() != "(":
            raise self.error("expected '(' after set operator")
        values: list[str] = []
        expect_value = True
        while True:
            word = self.take()
            if word == ")":
                if expect_value and values:
                    values.append("")
                break
            if word == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if not expect_value:
                raise self.error("expected ',' or ')' in value set")
            _check_value(key, word)
            values.append(word)
            expect_value = False
        if not values:
            raise self.error("for 'in', 'notin' operators, values set can't be empty")
        return tuple(values)

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        while self.peek() is not None:
            requirements.append(self.requirement())
            word = self.peek()
            if word is None:
                break
            if word != ",":
                raise self.error(f"expected ',' but found {word!r}")
            self.pos += 1
        return LabelSelector(tuple(requirements))


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a `labelSelector` query string; an empty one selects everything."""
    if not text or not text.strip():
        return LabelSelector()
    return _Parser(text).parse()


def selector_from_spec(spec: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels, matchExpressions); None selects nothing, {} selects everything."""
    if spec is None:
        return NOTHING
    requirements = [
        Requirement(k, "=", (str(v),)) for k, v in sorted((spec.get("matchLabels") or {}).items())
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in spec.get("matchExpressions") or []:
        op = ops.get(str(expr.get("operator")))
        if op is None:
            return NOTHING  # an invalid selector matches nothing, as the eviction handler treats it
        requirements.append(
            Requirement(str(expr.get("key")), op, tuple(str(v) for v in expr.get("values") or ()))
        )
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    negate: bool

    def matches(self, actual: str) -> bool:
        return (actual == self.value) != self.negate


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, get_field: Callable[[str], str]) -> bool:
        return all(term.matches(get_field(term.field)) for term in self.terms)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str | None, *, allowed: frozenset[str], resource: str) -> FieldSelector:
    """Parse a `fieldSelector`; a field label the resource doesn't index is a 400, as in Kubernetes."""
    if not text:
        return FieldSelector()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        if not raw:
            continue
        match = re.match(r"^(.*?)(!=|==|=)(.*)$", raw)
        if match is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{raw}'")
        name, op, value = match.group(1).strip(), match.group(2), _unescape(match.group(3))
        if name not in allowed:
            raise bad_request(
                f'Unable to find "{resource}" that match label selector "", field selector "{text}": '
                f"field label not supported: {name}"
            )
        terms.append(FieldTerm(name, value, op == "!="))
    return FieldSelector(tuple(terms))


def field_value(obj: dict[str, Any], label: str) -> str:
    """The string a field selector compares against; absent booleans read "false" as in Kubernetes."""
    if label == "source":
        return str((obj.get("source") or {}).get("component", ""))
    node: Any = obj
    for part in label.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool) or label in ("spec.unschedulable", "spec.hostNetwork"):
        return "true" if node else "false"
    return "" if node is None else str(node)
