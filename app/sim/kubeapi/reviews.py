"""TokenReview and SubjectAccessReview, as kube-apiserver answers them, over identities a test registers.

The shapes follow the API reference (authentication.k8s.io/v1 TokenReview,
https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-review-v1/;
authorization.k8s.io/v1 SubjectAccessReview,
https://kubernetes.io/docs/reference/kubernetes-api/authorization-resources/subject-access-review-v1/) and
the server's code: both are create-only and never stored; the answer is the request with `status` filled
in, 201 Created (kubernetes/kubernetes pkg/registry/authentication/tokenreview/storage.go and
pkg/registry/authorization/subjectaccessreview/rest.go). An empty token is 400 "token is required for
TokenReview in authentication"; an unknown token answers `status: {user: {}, error: ...}` with
`authenticated` omitted (Go's omitempty on false); a token whose audiences miss the requested ones
(default: the API server's own) is not authenticated. A pod-bound ServiceAccount token's user carries
`authentication.kubernetes.io/pod-name` and, since 1.30 (ServiceAccountTokenPodNodeInfo),
`.../node-name` in `extra`, as in https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/
("Verifying and inspecting private claims"). A SubjectAccessReview needs a user or groups and exactly one of
resourceAttributes and nonResourceAttributes; it is allowed when a registered grant matches, with a reason
worded as the RBAC authorizer words it, and otherwise `allowed: false` with no reason (no opinion).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from app.sim.kubeapi import errors
from app.sim.kubeapi.resources import SUBJECTACCESSREVIEWS, JsonObj

API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Identity:
    """Who a registered token is: a TokenReview's `status.user`, and the audiences it was minted for."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    audiences: tuple[str, ...] = (API_AUDIENCE,)

    def user(self) -> JsonObj:
        user: JsonObj = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            user["uid"] = self.uid
        if self.extra:
            user["extra"] = {k: list(v) for k, v in self.extra.items()}
        return user


@dataclass(frozen=True)
class Grant:
    """RBAC stand-in: `subject` (a user name or a group) may `verb` on group/resource ("*" matches any)."""

    subject: str
    verb: str
    group: str
    resource: str
    name: str = "*"

    def allows(self, user: str, groups: list[str], attrs: JsonObj) -> bool:
        if self.subject != user and self.subject not in groups:
            return False
        wanted = (
            (self.verb, attrs.get("verb", "")),
            (self.group, attrs.get("group", "")),
            (self.resource, attrs.get("resource", "")),
            (self.name, attrs.get("name", "")),
        )
        return all(mine in ("*", theirs) for mine, theirs in wanted)


class Reviews:
    """The tokens and grants of one simulated cluster."""

    def __init__(self) -> None:
        self.tokens: dict[str, Identity] = {}
        self.grants: list[Grant] = []

    def register_token(self, token: str, identity: Identity) -> None:
        self.tokens[token] = identity

    def forget_token(self, token: str) -> None:
        self.tokens.pop(token, None)

    def grant(self, grant: Grant) -> None:
        self.grants.append(grant)

    def token_review(self, body: Any) -> JsonObj:
        review = _review_object(body, "TokenReview", "authentication.k8s.io/v1")
        spec = review.get("spec") if isinstance(review.get("spec"), dict) else {}
        token = (spec or {}).get("token") or ""
        if not isinstance(token, str) or not token:
            raise errors.bad_request("token is required for TokenReview in authentication")
        wanted = [str(a) for a in (spec or {}).get("audiences") or []] or [API_AUDIENCE]
        identity = self.tokens.get(token)
        status: JsonObj
        if identity is None:
            status = {
                "user": {},
                "error": "[invalid bearer token, square/go-jose: error in cryptographic primitive]",
            }
        elif not set(wanted) & set(identity.audiences):
            status = {
                "user": {},
                "error": f"[invalid bearer token, token audiences {list(identity.audiences)!r} is invalid for "
                f"the target audiences {wanted!r}]",
            }
        else:
            status = {
                "authenticated": True,
                "user": identity.user(),
                "audiences": [a for a in wanted if a in identity.audiences],
            }
        review["status"] = status
        return review

    def access_review(self, body: Any) -> JsonObj:
        review = _review_object(body, "SubjectAccessReview", "authorization.k8s.io/v1")
        spec = review.get("spec") if isinstance(review.get("spec"), dict) else None
        if spec is None:
            raise errors.bad_request("the body of the request has no SubjectAccessReview spec")
        user = spec.get("user") or ""
        groups = [str(g) for g in spec.get("groups") or []]
        attrs = spec.get("resourceAttributes")
        non_resource = spec.get("nonResourceAttributes")
        causes: list[tuple[str, str, str]] = []
        if not user and not groups:
            causes.append(
                (
                    "FieldValueInvalid",
                    "spec.user",
                    'Invalid value: "": at least one of user or group must be specified',
                )
            )
        if (attrs is None) == (non_resource is None):
            causes.append(
                (
                    "FieldValueInvalid",
                    "spec.resourceAttributes",
                    "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            )
        if causes:
            raise errors.invalid(SUBJECTACCESSREVIEWS, "", causes=causes)
        match = next(
            (g for g in self.grants if isinstance(attrs, dict) and g.allows(str(user), groups, attrs)), None
        )
        if match is None:
            review["status"] = {"allowed": False}
        else:
            review["status"] = {
                "allowed": True,
                "reason": f'RBAC: allowed by ClusterRoleBinding "sim-{match.subject}" of ClusterRole '
                f'"sim-{match.verb}-{match.resource}" to User "{user}"',
            }
        return review


def _review_object(body: Any, kind: str, api_version: str) -> JsonObj:
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request is not a {kind}")
    review: JsonObj = copy.deepcopy(body)
    review["kind"] = kind
    review["apiVersion"] = api_version
    metadata = review.get("metadata") if isinstance(review.get("metadata"), dict) else {}
    review["metadata"] = {**(metadata or {}), "creationTimestamp": None}
    return review
