"""Who a caller is, as the Kubernetes API server vouches for it: a TokenReview's user and a
SubjectAccessReview's question and answer, in plain values.

The intake (`app.ingest.callers`) decides with these; the Kubernetes port (`app.kube.reviews`) produces
them. Nothing here knows HTTP or Kubernetes' JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

# Set by kube-apiserver on a pod-bound ServiceAccount token's user (the pod always; the node since
# Kubernetes 1.30, feature gate ServiceAccountTokenPodNodeInfo, beta and on by default; KEP-4193).
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A TokenReview's `status.user`; `extra` as sorted (key, values) pairs so the value stays frozen."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def first_extra(self, key: str) -> str | None:
        """The first value of an `extra` key, None when absent or empty."""
        for name, values in self.extra:
            if name == key and values:
                return values[0]
        return None

    @property
    def service_account_namespace(self) -> str | None:
        """`ns` of `system:serviceaccount:ns:name`, None for any other user."""
        if not self.username.startswith(SERVICE_ACCOUNT_PREFIX):
            return None
        namespace, _, name = self.username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        return namespace if namespace and name else None


@dataclass(frozen=True, slots=True)
class TokenReview:
    """A TokenReview's `status`: `user` only when `authenticated`; `error` says why not, if it can."""

    authenticated: bool
    user: UserInfo | None = None
    error: str = ""
    audiences: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """A SubjectAccessReview's `spec.resourceAttributes`: may `user` do `verb` on group/resource[/name]?"""

    verb: str
    group: str
    resource: str
    name: str = ""
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class AccessReview:
    """A SubjectAccessReview's `status`: `allowed`, and the authorizer's `reason` when it gave one."""

    allowed: bool
    reason: str = ""
