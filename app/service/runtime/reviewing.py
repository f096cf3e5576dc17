"""The Kubernetes port's reviews, as the intake's callers check needs them: any `KubeError` (the API server
down, slow, or refusing Sickbay's own ServiceAccount the review) becomes `callers.UnavailableError`, which
the caller is told to retry (503). The intake may not import `app.kube`; this adapter is the bridge.
"""

from __future__ import annotations

from app.domain.identity import AccessRequest, AccessReview, TokenReview, UserInfo
from app.ingest import callers
from app.kube import errors, port


class KubeReviewer:
    def __init__(self, reviews: port.ReviewPort) -> None:
        self._reviews = reviews

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
        try:
            return await self._reviews.review_token(token, audiences=audiences)
        except errors.KubeError as exc:
            raise callers.UnavailableError(str(exc)) from exc

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview:
        try:
            return await self._reviews.review_access(user, request)
        except errors.KubeError as exc:
            raise callers.UnavailableError(str(exc)) from exc

    async def pod_node(self, namespace: str, name: str) -> str | None:
        try:
            return await self._reviews.pod_node(namespace, name)
        except errors.KubeError as exc:
            raise callers.UnavailableError(str(exc)) from exc
