"""Who may call what: one credential per caller, each with only its power.

- Alertmanager (`auth.mode`/`auth.token` or basic auth): may post alerts, nothing else.
- An agent (`auth.agents`): its pod's projected ServiceAccount token, verified by a TokenReview (audience
  `auth.agents.audience`), must be the agents' ServiceAccount, and binds the caller to the node its pod runs
  on: `authentication.kubernetes.io/node-name` in the reviewed user's extra (Kubernetes >= 1.30), else the
  node of the pod named by `authentication.kubernetes.io/pod-name`. The handler then refuses any event
  for another node.
- An operator (`auth.operator`): a static token, or a Kubernetes user RBAC allows `update` on
  `sickbay.io` `breakers` / `models` (TokenReview + SubjectAccessReview). Every write route needs one.
- A reader (`auth.reads`), only when `auth.reads.required`: the read token, an operator token, or a
  Kubernetes user allowed `get` on `sickbay.io` `status`.

`auth.mode: none` turns every check off, as it always has. A credential of another caller is 403 (it is
known, it is not allowed this); none or an unknown one is 401; a review the API server cannot answer now is
503 (retry), never an acceptance. The API server's verdicts on tokens it knows are cached (`verdicts`). No HTTP here: the
routes and the intake handlers turn `Refused` into their JSON answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from app.config.settings import AuthSettings
from app.domain.identity import (
    NODE_NAME_KEY,
    POD_NAME_KEY,
    AccessRequest,
    AccessReview,
    TokenReview,
    UserInfo,
)
from app.ingest import auth
from app.ingest.verdicts import Verdicts, key_of

log = logging.getLogger(__name__)

Role = Literal["alertmanager", "agent", "operator", "reader"]
GROUP = (
    "sickbay.io"  # the API group of the SubjectAccessReviews (no such resource exists; RBAC need not care)
)
# What each write route asks RBAC for: `update` on one of these; reads ask `get` on READ_RESOURCE.
WRITE_RESOURCES = frozenset({"breakers", "models"})
READ_RESOURCE = "status"
_OPERATOR_CACHE_SIZE = 1024


class Reviewer(Protocol):
    """The API server's answers (`app.kube`'s ReviewPort, adapted by the runtime to raise `UnavailableError`)."""

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview: ...

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview: ...

    async def pod_node(self, namespace: str, name: str) -> str | None: ...


class UnavailableError(Exception):
    """The API server could not answer a review now: the caller is told to retry (503), never accepted."""


@dataclass(frozen=True, slots=True)
class Caller:
    role: Role
    name: str  # for logs and the journal: "alertmanager", "agent-token", a Kubernetes user name
    node: str | None = None  # an agent bound to its node; None: any node (a static agent token, auth off)


@dataclass(frozen=True, slots=True)
class Refused(Exception):
    status: int  # 401 unknown, 403 not allowed, 503 cannot tell now
    reason: str
    message: str


def _no_bearer(header: str | None, whose: str) -> str:
    if not header:
        return f"missing Authorization header: expected {whose} Bearer token"
    return f"expected {whose} Bearer token"


def _unauthorized(message: str) -> Refused:
    return Refused(401, "unauthorized", message)


def _forbidden(message: str) -> Refused:
    return Refused(403, "forbidden", message)


def _unavailable(message: str) -> Refused:
    return Refused(503, "unavailable", f"{message}; retry")


class Callers:
    """Checks each request's Authorization header against the one role its route admits."""

    def __init__(
        self,
        settings: AuthSettings,
        *,
        reviewer: Reviewer | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.reviewer = reviewer
        agents = settings.agents
        self._agents: Verdicts[Caller | Refused] = Verdicts(
            ttl_s=agents.cache_ttl_s, size=agents.cache_size, clock=clock
        )
        self._operators: Verdicts[Caller | Refused] = Verdicts(
            ttl_s=settings.operator.cache_ttl_s, size=_OPERATOR_CACHE_SIZE, clock=clock
        )

    @property
    def off(self) -> bool:
        return self.settings.mode == "none"

    # -- Alertmanager ----------------------------------------------------------------------------------

    def alertmanager(self, header: str | None) -> Caller:
        verdict = auth.check(header, self.settings)
        if not verdict.ok:
            token = auth.bearer_token(header)
            if token is not None and self._other_static_role(token, besides="alertmanager"):
                raise _forbidden("this credential may not post alerts; Alertmanager has its own (auth.token)")
            raise _unauthorized(verdict.problem)
        return Caller(role="alertmanager", name="alertmanager")

    def _is_webhook(self, header: str | None) -> bool:
        return self.settings.mode != "none" and auth.check(header, self.settings).ok

    def _other_static_role(self, token: str, *, besides: Role) -> Role | None:
        """Which other caller's static token this is (for a 403 that says so), None for none."""
        s = self.settings
        owners: list[tuple[Role, bool]] = [
            ("operator", auth.matches(token, s.operator.token, s.operator.previous_token)),
            (
                "agent",
                s.agents.mode == "token" and auth.matches(token, s.agents.token, s.agents.previous_token),
            ),
            ("reader", auth.matches(token, s.reads.token)),
        ]
        return next((role for role, owned in owners if owned and role != besides), None)

    # -- agents ----------------------------------------------------------------------------------------

    async def agent(self, header: str | None) -> Caller:
        agents = self.settings.agents
        if self.off or agents.mode == "none":
            return Caller(role="agent", name="anonymous")
        if self._is_webhook(header):
            raise _forbidden("the webhook's credentials may post alerts only, not agent events")
        token = auth.bearer_token(header)
        if token is None:
            raise _unauthorized(_no_bearer(header, "the agent's"))
        if agents.mode == "token":
            if auth.matches(token, agents.token, agents.previous_token):
                return Caller(role="agent", name="agent-token")
            if self._other_static_role(token, besides="agent"):
                raise _forbidden("this credential may not post agent events")
            raise _unauthorized("bad token")
        key = key_of(token, "agent")
        cached = self._agents.get(key)
        if cached is None:
            cached = await self._review_agent(token)
            if _worth_keeping(cached):
                self._agents.put(key, cached)
        if isinstance(cached, Refused):
            raise cached
        return cached

    async def _review_agent(self, token: str) -> Caller | Refused:
        """The verdict on an agent's ServiceAccount token; UnavailableError (not cached) becomes 503."""
        agents = self.settings.agents
        if self.reviewer is None:
            raise _unavailable(
                "agent tokens cannot be verified: this service has no Kubernetes connection (kube.enabled is "
                "false); enable it or set auth.agents.mode"
            )
        try:
            review = await self.reviewer.review_token(token, audiences=(agents.audience,))
            if not review.authenticated or review.user is None:
                detail = f": {review.error}" if review.error else ""
                return _unauthorized(
                    f"the Kubernetes API did not accept the token for audience {agents.audience!r}{detail}"
                )
            user = review.user
            if user.username != agents.service_account:
                return _forbidden(
                    f"{user.username!r} may not post agent events: only the agents' ServiceAccount "
                    f"({agents.service_account}) may"
                )
            node = user.first_extra(NODE_NAME_KEY) or await self._pod_node(user)
        except UnavailableError as exc:
            raise _unavailable(f"cannot verify the agent's token with the Kubernetes API: {exc}") from None
        if isinstance(node, Refused):
            return node
        return Caller(role="agent", name=user.username, node=node)

    async def _pod_node(self, user: UserInfo) -> str | Refused:
        """Before Kubernetes 1.30 the token names its pod, not the node: read the pod's spec.nodeName."""
        assert self.reviewer is not None
        pod = user.first_extra(POD_NAME_KEY)
        namespace = user.service_account_namespace
        if pod is None or namespace is None:
            return _forbidden(
                "the token is not bound to a pod, so it names no node: send the pod's projected "
                f"ServiceAccount token (audience {self.settings.agents.audience!r})"
            )
        node = await self.reviewer.pod_node(namespace, pod)
        if node is None:
            return _forbidden(f"the token's pod {namespace}/{pod} no longer exists or runs on no node")
        return node

    # -- operators and readers -------------------------------------------------------------------------

    async def operator(self, header: str | None, *, resource: str) -> Caller:
        """An operator allowed `update` on `resource` (one of WRITE_RESOURCES)."""
        if resource not in WRITE_RESOURCES:
            raise ValueError(f"no such operator resource {resource!r}")
        if self.off:
            return Caller(role="operator", name="anonymous")
        return await self._privileged(header, verb="update", resource=resource, accept_reader=False)

    async def reader(self, header: str | None) -> Caller:
        if self.off or not self.settings.reads.required:
            return Caller(role="reader", name="anonymous")
        return await self._privileged(header, verb="get", resource=READ_RESOURCE, accept_reader=True)

    async def _privileged(
        self, header: str | None, *, verb: str, resource: str, accept_reader: bool
    ) -> Caller:
        s = self.settings
        what = f"{verb} {resource}.{GROUP}"
        if self._is_webhook(header):
            raise _forbidden(f"the webhook's credentials may post alerts only, not {what}")
        token = auth.bearer_token(header)
        if token is None:
            raise _unauthorized(_no_bearer(header, "an operator's"))
        if auth.matches(token, s.operator.token, s.operator.previous_token):
            return Caller(role="operator", name="operator-token")
        if accept_reader and auth.matches(token, s.reads.token):
            return Caller(role="reader", name="reader-token")
        other = self._other_static_role(token, besides="operator")
        if other is not None:
            raise _forbidden(f"the {other}'s credential may not {what}")
        if not s.operator.kubernetes:
            # A read token alone is a credential readers can present: a wrong one is unknown (401).
            if s.operator.token is None and not (accept_reader and s.reads.token):
                raise _forbidden(
                    f"no operator credential is configured, so no one may {what}: set auth.operator.token "
                    "or auth.operator.kubernetes"
                )
            raise _unauthorized("bad token")
        key = key_of(token, what)
        cached = self._operators.get(key)
        if cached is None:
            cached = await self._review_operator(token, verb=verb, resource=resource)
            if _worth_keeping(cached):
                self._operators.put(key, cached)
        if isinstance(cached, Refused):
            raise cached
        return cached

    async def _review_operator(self, token: str, *, verb: str, resource: str) -> Caller | Refused:
        what = f"{verb} {resource}.{GROUP}"
        if self.reviewer is None:
            raise _unavailable(
                "operator tokens cannot be verified: this service has no Kubernetes connection (kube.enabled "
                "is false)"
            )
        try:
            # No audiences: an operator's token is one the API server itself accepts (kubectl's).
            review = await self.reviewer.review_token(token, audiences=())
            if not review.authenticated or review.user is None:
                detail = f": {review.error}" if review.error else ""
                return _unauthorized(f"the Kubernetes API did not accept the token{detail}")
            access = await self.reviewer.review_access(
                review.user, AccessRequest(verb=verb, group=GROUP, resource=resource)
            )
        except UnavailableError as exc:
            raise _unavailable(f"cannot check the operator with the Kubernetes API: {exc}") from None
        if not access.allowed:
            why = f" ({access.reason})" if access.reason else ""
            return _forbidden(f"RBAC does not allow {review.user.username!r} to {what}{why}")
        return Caller(role="operator" if verb == "update" else "reader", name=review.user.username)


def _worth_keeping(verdict: Caller | Refused) -> bool:
    """Verdicts on tokens the API server knows are cached; an unknown token's 401 is not, so a flood of
    made-up tokens cannot push the agents' verdicts out of the bounded cache (it meets the reviews' own
    rate limit in `app.kube` instead)."""
    return not (isinstance(verdict, Refused) and verdict.status == 401)


def foreign_nodes(caller: Caller, events: list[object]) -> list[str]:
    """The nodes other than the caller's own that these raw events name (none when it is bound to none)."""
    if caller.node is None:
        return []
    found: list[str] = []
    for event in events:
        node = event.get("node") if isinstance(event, dict) else None
        if node is not None and node != caller.node and str(node) not in found:
            found.append(str(node))
    return found
