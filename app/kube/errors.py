"""Typed errors of the Kubernetes port, so callers branch on meaning rather than on HTTP codes."""

from __future__ import annotations


class KubeError(Exception):
    """Any failure talking to the API server."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(KubeError):
    """404: the object is gone (for an eviction: the pod is already gone, which is success)."""


class ConflictError(KubeError):
    """409: our read `resourceVersion` is stale, or the object already exists; re-read and recompute."""


class TooManyRequestsError(KubeError):
    """429: throttled, or (for an eviction) a PodDisruptionBudget forbids it now; retry after `retry_after`."""

    def __init__(self, message: str, *, retry_after: float | None = None, budget: bool = False) -> None:
        super().__init__(message, status=429)
        self.retry_after = retry_after
        self.budget = budget


class ForbiddenError(KubeError):
    """403: RBAC does not grant the call; retrying will not help."""


class UnavailableError(KubeError):
    """5xx, timeouts, connection errors: the API server could not answer now; retrying may help."""


class InvalidNameError(KubeError):
    """A name that is not a Kubernetes name (`..`, `a/b`, uppercase): refused before any request is sent."""
