"""Who is calling Sickbay, asked of the API server: TokenReview, SubjectAccessReview and a pod's node.

`review_token` sends `authentication.k8s.io/v1` TokenReview with `spec.audiences`, so a token minted for
another audience (the API server's own, say) is not authenticated; `review_access` sends
`authorization.k8s.io/v1` SubjectAccessReview for a user's resource attributes; `pod_node` reads one
pod's `spec.nodeName` (for a pod-bound token from a cluster older than 1.30, whose user carries no node).
Each is one short call with a single retry, paced on a bucket of its own (see `KubeClient`): a caller
waits on it, so the API server being down becomes `UnavailableError` in seconds, not after the
remediation path's long backoff, and a flood of made-up tokens never spends remediation's budget. It
decides nothing.
"""

from __future__ import annotations

from typing import Any

from kubernetes.aio import client as k8s

from app.domain.identity import AccessRequest, AccessReview, TokenReview, UserInfo
from app.kube import errors, names
from app.kube.retries import RetryPolicy
from app.kube.transport import Transport

# One retry, short attempts: the request being authenticated is waiting.
REVIEW_RETRY = RetryPolicy(attempts=2, base=0.1, cap=0.5, timeout=3.0)
# The reviews' own pacing (`KubeClient` gives them a bucket apart from remediation's): verdicts are cached,
# so a fleet of agents needs about one review per agent per cache TTL (1,000 agents, 60 s: 17/s).
REVIEW_QPS = 20.0
REVIEW_BURST = 40


def _user(raw: Any) -> UserInfo | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("username"), str):
        return None
    extra = raw.get("extra") if isinstance(raw.get("extra"), dict) else {}
    pairs = tuple(
        sorted(
            (str(key), tuple(str(v) for v in values))
            for key, values in (extra or {}).items()
            if isinstance(values, list)
        )
    )
    groups = raw.get("groups") if isinstance(raw.get("groups"), list) else []
    return UserInfo(
        username=raw["username"],
        uid=str(raw.get("uid") or ""),
        groups=tuple(str(g) for g in groups or []),
        extra=pairs,
    )


def token_review(body: dict[str, Any]) -> TokenReview:
    """A TokenReview answer's `status` as a value; a malformed one is not authenticated."""
    status = body.get("status") if isinstance(body.get("status"), dict) else {}
    status = status or {}
    user = _user(status.get("user"))
    authenticated = status.get("authenticated") is True and user is not None
    audiences = status.get("audiences") if isinstance(status.get("audiences"), list) else []
    return TokenReview(
        authenticated=authenticated,
        user=user if authenticated else None,
        error=str(status.get("error") or ""),
        audiences=tuple(str(a) for a in audiences or []),
    )


class ReviewCalls:
    def __init__(self, transport: Transport, *, retry: RetryPolicy = REVIEW_RETRY) -> None:
        self._transport = transport
        self._retry = retry
        self._authn = k8s.AuthenticationV1Api(transport.api)
        self._authz = k8s.AuthorizationV1Api(transport.api)

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
        body = k8s.V1TokenReview(
            api_version="authentication.k8s.io/v1",
            kind="TokenReview",
            spec=k8s.V1TokenReviewSpec(token=token, audiences=list(audiences)),
        )
        timeout = self._retry.timeout
        answer = await self._transport.send(
            "CREATE TokenReview",
            lambda: self._authn.create_token_review_without_preload_content(body, _request_timeout=timeout),
            retry=self._retry,
        )
        return token_review(answer)

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview:
        attributes = k8s.V1ResourceAttributes(
            verb=request.verb,
            group=request.group,
            resource=request.resource,
            name=request.name or None,
            namespace=request.namespace or None,
        )
        body = k8s.V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1",
            kind="SubjectAccessReview",
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user.username,
                uid=user.uid or None,
                groups=list(user.groups),
                extra={key: list(values) for key, values in user.extra} or None,
                resource_attributes=attributes,
            ),
        )
        timeout = self._retry.timeout
        answer = await self._transport.send(
            f"CREATE SubjectAccessReview for {request.verb} {request.resource}.{request.group}",
            lambda: self._authz.create_subject_access_review_without_preload_content(
                body, _request_timeout=timeout
            ),
            retry=self._retry,
        )
        status = answer.get("status") if isinstance(answer.get("status"), dict) else {}
        status = status or {}
        return AccessReview(allowed=status.get("allowed") is True, reason=str(status.get("reason") or ""))

    async def pod_node(self, namespace: str, name: str) -> str | None:
        """The node a pod is bound to; None when the pod is gone or not scheduled."""
        names.check_pod(namespace, name)
        timeout = self._retry.timeout
        core = self._transport.core
        try:
            pod = await self._transport.send(
                f"GET pod {namespace}/{name}",
                lambda: core.read_namespaced_pod_without_preload_content(
                    name, namespace, _request_timeout=timeout
                ),
                retry=self._retry,
            )
        except errors.NotFoundError:
            return None
        spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
        node = (spec or {}).get("nodeName")
        return node if isinstance(node, str) and node else None
