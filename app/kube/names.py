"""Names reach URL paths: anything that is not a Kubernetes name is refused before a request is built.

`..` would otherwise address the collection or the namespace above it. Raises `InvalidNameError`; the
checks themselves are `app.kubenames`'.
"""

from __future__ import annotations

from collections.abc import Callable

from app import kubenames
from app.kube import errors


def _checked(check: Callable[[str], str | None], value: str, *, what: str) -> None:
    problem = check(value)
    if problem is not None:
        raise errors.InvalidNameError(f"refused to call the API with an invalid {what} name: {problem}")


def check_node(name: str) -> None:
    _checked(kubenames.subdomain_problem, name, what="node")


def check_namespace(name: str) -> None:
    _checked(kubenames.label_problem, name, what="namespace")


def check_pod(namespace: str, name: str) -> None:
    check_namespace(namespace)
    _checked(kubenames.subdomain_problem, name, what="pod")
