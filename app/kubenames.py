"""Kubernetes object names, checked the way the API server checks them, before they reach a URL.

A name that came from an alert label is attacker-controlled text. Pod and node names are DNS subdomains
(RFC 1123, at most 253 characters), namespaces DNS labels (at most 63), and path segments `.` and `..`
are never names (apimachinery's `IsValidPathSegmentName`): an HTTP client or proxy may collapse them,
so `pods/..` would address the namespace itself. Pure and standard-library only: intake and the kube
client both check with it.
"""

from __future__ import annotations

import re

# k8s.io/apimachinery/pkg/util/validation: IsDNS1123Subdomain, IsDNS1123Label.
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# Used with fullmatch: `$` would also match before a trailing newline, letting "gpu-a-00\n" through.
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
SUBDOMAIN_MAX = 253
LABEL_MAX = 63


def subdomain_problem(value: str) -> str | None:
    """Why `value` is not a valid pod or node name, or None when it is."""
    if value in (".", ".."):
        return f"{value!r} is a path segment, never a name"
    if len(value) > SUBDOMAIN_MAX:
        return f"{len(value)} characters; Kubernetes allows {SUBDOMAIN_MAX}"
    if not _SUBDOMAIN.fullmatch(value):
        return f"{value!r} is not a lowercase RFC 1123 subdomain"
    return None


def label_problem(value: str) -> str | None:
    """Why `value` is not a valid namespace name, or None when it is."""
    if len(value) > LABEL_MAX:
        return f"{len(value)} characters; Kubernetes allows {LABEL_MAX}"
    if not _DNS_LABEL.fullmatch(value):
        return f"{value!r} is not a lowercase RFC 1123 label"
    return None


class InvalidNameError(ValueError):
    """A name that must not be sent to the API server."""


def require_subdomain(value: str, *, what: str) -> str:
    problem = subdomain_problem(value)
    if problem is not None:
        raise InvalidNameError(f"invalid {what} name: {problem}")
    return value


def require_label(value: str, *, what: str) -> str:
    problem = label_problem(value)
    if problem is not None:
        raise InvalidNameError(f"invalid {what} name: {problem}")
    return value
