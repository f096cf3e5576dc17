"""Who may call what (`app.ingest.callers`), against a fake API server: each role's credential lets in only
that role, with the status and message a caller is told; verdicts on known tokens are cached for their
TTL, an unknown token's 401 is not; a review the API server cannot answer is a 503, never an acceptance.

Time is the injected clock's; the reviewer is a fake of the runtime's `KubeReviewer`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.config.settings import AuthSettings
from app.domain.identity import (
    NODE_NAME_KEY,
    POD_NAME_KEY,
    AccessRequest,
    AccessReview,
    TokenReview,
    UserInfo,
)
from app.ingest import callers
from app.ingest.callers import Caller, Callers, Refused, UnavailableError, foreign_nodes

AGENT_SA = "system:serviceaccount:sickbay:sickbay-agent"
WEBHOOK = "Bearer wh-secret"
OPERATOR = "Bearer op-secret"
OLD_OPERATOR = "Bearer op-old"
READER = "Bearer rd-secret"
AGENT = "Bearer ag-secret"
OLD_AGENT = "Bearer ag-old"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeReviewer:
    """The API server: tokens it knows, what RBAC allows, where pods run; or down (`down` set)."""

    users: dict[str, UserInfo] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # token -> TokenReview status.error
    allowed: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (user, verb, res) -> reason
    denied_reason: str = ""
    pods: dict[tuple[str, str], str | None] = field(default_factory=dict)
    down: str | None = None  # review_token raises UnavailableError with this text
    access_down: str | None = None
    pods_down: str | None = None
    token_calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    access_calls: list[tuple[str, AccessRequest]] = field(default_factory=list)
    pod_calls: list[tuple[str, str]] = field(default_factory=list)

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
        self.token_calls.append((token, audiences))
        if self.down is not None:
            raise UnavailableError(self.down)
        user = self.users.get(token)
        if user is None:
            return TokenReview(authenticated=False, error=self.errors.get(token, ""))
        return TokenReview(authenticated=True, user=user, audiences=audiences)

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview:
        self.access_calls.append((user.username, request))
        if self.access_down is not None:
            raise UnavailableError(self.access_down)
        reason = self.allowed.get((user.username, request.verb, request.resource))
        if reason is None:
            return AccessReview(allowed=False, reason=self.denied_reason)
        return AccessReview(allowed=True, reason=reason)

    async def pod_node(self, namespace: str, name: str) -> str | None:
        self.pod_calls.append((namespace, name))
        if self.pods_down is not None:
            raise UnavailableError(self.pods_down)
        return self.pods.get((namespace, name))


def settings(**overrides: Any) -> AuthSettings:
    base: dict[str, Any] = {"mode": "bearer", "token": "wh-secret"}
    return AuthSettings.model_validate({**base, **overrides})


def agent_user(node: str | None = "gpu-1", pod: str | None = None, name: str = AGENT_SA) -> UserInfo:
    extra: list[tuple[str, tuple[str, ...]]] = []
    if node is not None:
        extra.append((NODE_NAME_KEY, (node,)))
    if pod is not None:
        extra.append((POD_NAME_KEY, (pod,)))
    return UserInfo(username=name, extra=tuple(sorted(extra)))


async def refusal(call: Awaitable[Caller]) -> Refused:
    with pytest.raises(Refused) as caught:
        await call
    return caught.value


def sync_refusal(header: str | None, auth: Callers) -> Refused:
    with pytest.raises(Refused) as caught:
        auth.alertmanager(header)
    return caught.value


# -- Alertmanager --------------------------------------------------------------------------------------


def test_the_webhook_token_posts_alerts() -> None:
    auth = Callers(settings(), reviewer=None)
    assert auth.alertmanager(WEBHOOK) == Caller(role="alertmanager", name="alertmanager", node=None)
    assert not auth.off


def test_basic_auth_posts_alerts() -> None:
    auth = Callers(settings(mode="basic", token=None, username="am", password="pw"), reviewer=None)
    assert auth.alertmanager("Basic YW06cHc=") == Caller(role="alertmanager", name="alertmanager")
    assert sync_refusal("Basic YW06eHg=", auth) == Refused(401, "unauthorized", "bad credentials")


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing Authorization header"),
        ("", "missing Authorization header"),
        ("Basic x", "expected a Bearer token"),
        ("Bearer nope", "bad token"),
        (AGENT, "bad token"),  # the agents' token is not a static one in serviceaccount mode
    ],
)
def test_alerts_without_the_webhook_token_are_401(header: str | None, message: str) -> None:
    auth = Callers(settings(agents={"token": "ag-secret"}, operator={"token": "op-secret"}), reviewer=None)
    assert sync_refusal(header, auth) == Refused(401, "unauthorized", message)


@pytest.mark.parametrize("header", [OPERATOR, OLD_OPERATOR, READER, AGENT, OLD_AGENT])
def test_another_callers_token_may_not_post_alerts(header: str) -> None:
    auth = Callers(
        settings(
            agents={"mode": "token", "token": "ag-secret", "previous_token": "ag-old"},
            operator={"token": "op-secret", "previous_token": "op-old"},
            reads={"token": "rd-secret"},
        ),
        reviewer=None,
    )
    assert sync_refusal(header, auth) == Refused(
        403, "forbidden", "this credential may not post alerts; Alertmanager has its own (auth.token)"
    )


def test_auth_off_lets_every_caller_in_anonymously() -> None:
    auth = Callers(settings(mode="none", token=None, reads={"required": True}), reviewer=None)
    assert auth.off
    assert auth.alertmanager(None) == Caller(role="alertmanager", name="alertmanager")


async def test_auth_off_lets_agents_operators_and_readers_in() -> None:
    reviewer = FakeReviewer()
    auth = Callers(settings(mode="none", token=None, reads={"required": True}), reviewer=reviewer)
    assert await auth.agent(None) == Caller(role="agent", name="anonymous", node=None)
    assert await auth.operator(None, resource="breakers") == Caller(role="operator", name="anonymous")
    assert await auth.reader(None) == Caller(role="reader", name="anonymous")
    assert reviewer.token_calls == []


# -- agents --------------------------------------------------------------------------------------------


def serviceaccount_callers(
    reviewer: FakeReviewer | None, clock: Clock | None = None, **agents: Any
) -> Callers:
    return Callers(
        settings(agents={"audience": "sickbay-push", **agents}, operator={"token": "op-secret"}),
        reviewer=reviewer,
        clock=clock or Clock(),
    )


async def test_an_agent_is_bound_to_the_node_in_its_token() -> None:
    reviewer = FakeReviewer(users={"ag-sa": agent_user(node="gpu-7")})
    auth = serviceaccount_callers(reviewer)
    assert await auth.agent("Bearer ag-sa") == Caller(role="agent", name=AGENT_SA, node="gpu-7")
    assert reviewer.token_calls == [("ag-sa", ("sickbay-push",))]
    assert reviewer.pod_calls == [], "the node in the token is enough"


async def test_without_the_node_in_the_token_its_pods_node_is_read() -> None:
    reviewer = FakeReviewer(
        users={"ag-sa": agent_user(node=None, pod="agent-x1")}, pods={("sickbay", "agent-x1"): "gpu-3"}
    )
    auth = serviceaccount_callers(reviewer)
    assert await auth.agent("Bearer ag-sa") == Caller(role="agent", name=AGENT_SA, node="gpu-3")
    assert reviewer.pod_calls == [("sickbay", "agent-x1")]


async def test_an_empty_node_value_falls_back_to_the_pod() -> None:
    user = UserInfo(username=AGENT_SA, extra=((NODE_NAME_KEY, ()), (POD_NAME_KEY, ("agent-x1",))))
    reviewer = FakeReviewer(users={"ag-sa": user}, pods={("sickbay", "agent-x1"): "gpu-4"})
    assert await serviceaccount_callers(reviewer).agent("Bearer ag-sa") == Caller("agent", AGENT_SA, "gpu-4")


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing Authorization header: expected the agent's Bearer token"),
        ("", "missing Authorization header: expected the agent's Bearer token"),
        ("Basic YW06cHc=", "expected the agent's Bearer token"),
        ("Bearer   ", "expected the agent's Bearer token"),
    ],
)
async def test_an_agent_without_a_bearer_token_is_401(header: str | None, message: str) -> None:
    reviewer = FakeReviewer()
    refused = await refusal(serviceaccount_callers(reviewer).agent(header))
    assert refused == Refused(401, "unauthorized", message)
    assert reviewer.token_calls == []


async def test_the_webhook_token_may_not_post_agent_events() -> None:
    reviewer = FakeReviewer()
    refused = await refusal(serviceaccount_callers(reviewer).agent(WEBHOOK))
    assert refused == Refused(
        403, "forbidden", "the webhook's credentials may post alerts only, not agent events"
    )
    assert reviewer.token_calls == []


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("", "the Kubernetes API did not accept the token for audience 'sickbay-push'"),
        (
            "token expired",
            "the Kubernetes API did not accept the token for audience 'sickbay-push': token expired",
        ),
    ],
)
async def test_a_token_the_api_server_does_not_know_is_401_and_not_cached(error: str, message: str) -> None:
    reviewer = FakeReviewer(errors={"made-up": error})
    auth = serviceaccount_callers(reviewer)
    for _ in range(2):
        assert await refusal(auth.agent("Bearer made-up")) == Refused(401, "unauthorized", message)
    assert len(reviewer.token_calls) == 2, "an unknown token's 401 is asked again, never cached"
    assert len(auth._agents) == 0


async def test_an_authenticated_review_without_a_user_is_401() -> None:
    class NoUser(FakeReviewer):
        async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
            return TokenReview(authenticated=True, user=None)

    refused = await refusal(serviceaccount_callers(NoUser()).agent("Bearer x"))
    assert refused == Refused(
        401, "unauthorized", "the Kubernetes API did not accept the token for audience 'sickbay-push'"
    )


async def test_another_service_account_is_403_and_the_verdict_cached() -> None:
    other = "system:serviceaccount:default:builder"
    reviewer = FakeReviewer(users={"sa-other": agent_user(name=other)})
    auth = serviceaccount_callers(reviewer)
    expected = Refused(
        403,
        "forbidden",
        f"'{other}' may not post agent events: only the agents' ServiceAccount ({AGENT_SA}) may",
    )
    assert await refusal(auth.agent("Bearer sa-other")) == expected
    assert await refusal(auth.agent("Bearer sa-other")) == expected
    assert len(reviewer.token_calls) == 1, "a known token's 403 is cached"


async def test_a_token_bound_to_no_pod_names_no_node() -> None:
    expected = Refused(
        403,
        "forbidden",
        "the token is not bound to a pod, so it names no node: send the pod's projected ServiceAccount "
        "token (audience 'sickbay-push')",
    )
    reviewer = FakeReviewer(users={"t": agent_user(node=None, pod=None)})
    assert await refusal(serviceaccount_callers(reviewer).agent("Bearer t")) == expected
    assert reviewer.pod_calls == []


async def test_a_pod_but_no_namespace_names_no_node() -> None:
    """A user with a pod but not of the `system:serviceaccount:ns:name` form (only reachable when the
    configured ServiceAccount itself is malformed, so the check is exercised on `_pod_node` directly)."""
    auth = serviceaccount_callers(FakeReviewer())
    verdict = await auth._pod_node(UserInfo(username="alice", extra=((POD_NAME_KEY, ("p",)),)))
    assert isinstance(verdict, Refused)
    assert (verdict.status, verdict.reason) == (403, "forbidden")
    assert verdict.message.startswith("the token is not bound to a pod")


async def test_a_pod_that_runs_nowhere_is_403() -> None:
    reviewer = FakeReviewer(users={"t": agent_user(node=None, pod="gone")})
    refused = await refusal(serviceaccount_callers(reviewer).agent("Bearer t"))
    assert refused == Refused(
        403, "forbidden", "the token's pod sickbay/gone no longer exists or runs on no node"
    )
    assert reviewer.pod_calls == [("sickbay", "gone")]


@pytest.mark.parametrize("where", ["token", "pod"])
async def test_an_api_server_that_cannot_answer_is_503_and_not_cached(where: str) -> None:
    reviewer = FakeReviewer(users={"t": agent_user(node=None, pod="p")}, pods={("sickbay", "p"): "gpu-2"})
    if where == "token":
        reviewer.down = "timed out after 5s"
    else:
        reviewer.pods_down = "timed out after 5s"
    auth = serviceaccount_callers(reviewer)
    refused = await refusal(auth.agent("Bearer t"))
    assert refused == Refused(
        503,
        "unavailable",
        "cannot verify the agent's token with the Kubernetes API: timed out after 5s; retry",
    )
    assert refused.__cause__ is None
    reviewer.down = reviewer.pods_down = None
    assert await auth.agent("Bearer t") == Caller("agent", AGENT_SA, "gpu-2"), "the 503 was not cached"


async def test_agents_without_a_kubernetes_connection_are_503() -> None:
    refused = await refusal(serviceaccount_callers(None).agent("Bearer t"))
    assert refused == Refused(
        503,
        "unavailable",
        "agent tokens cannot be verified: this service has no Kubernetes connection (kube.enabled is "
        "false); enable it or set auth.agents.mode; retry",
    )


async def test_an_agents_verdict_is_cached_for_its_ttl() -> None:
    clock = Clock()
    reviewer = FakeReviewer(users={"t": agent_user(node="gpu-1")})
    auth = serviceaccount_callers(reviewer, clock, cache_ttl_s=60)
    assert await auth.agent("Bearer t") == Caller("agent", AGENT_SA, "gpu-1")
    reviewer.users["t"] = agent_user(node="gpu-9")
    clock.now += 59.9
    assert await auth.agent("Bearer t") == Caller("agent", AGENT_SA, "gpu-1"), "cached"
    assert len(reviewer.token_calls) == 1
    clock.now += 0.1
    assert await auth.agent("Bearer t") == Caller("agent", AGENT_SA, "gpu-9"), "reviewed again after the TTL"
    assert len(reviewer.token_calls) == 2


async def test_the_agents_cache_is_bounded_by_its_size() -> None:
    reviewer = FakeReviewer(users={"a": agent_user(node="n-a"), "b": agent_user(node="n-b")})
    auth = serviceaccount_callers(reviewer, cache_size=1)
    await auth.agent("Bearer a")
    await auth.agent("Bearer b")
    assert len(auth._agents) == 1
    await auth.agent("Bearer a")
    assert [t for t, _ in reviewer.token_calls] == ["a", "b", "a"], "a was pushed out by b"


async def test_agent_mode_none_lets_any_agent_in() -> None:
    auth = Callers(settings(agents={"mode": "none"}), reviewer=None)
    assert await auth.agent(None) == Caller("agent", "anonymous", None)
    assert await auth.agent(WEBHOOK) == Caller("agent", "anonymous", None)


def static_agent_callers(reviewer: FakeReviewer | None = None) -> Callers:
    return Callers(
        settings(
            agents={"mode": "token", "token": "ag-secret", "previous_token": "ag-old"},
            operator={"token": "op-secret"},
            reads={"token": "rd-secret"},
        ),
        reviewer=reviewer or FakeReviewer(),
    )


@pytest.mark.parametrize("header", [AGENT, OLD_AGENT, "bearer ag-secret"])
async def test_a_static_agent_token_lets_in_an_agent_of_any_node(header: str) -> None:
    assert await static_agent_callers().agent(header) == Caller("agent", "agent-token", None)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (OPERATOR, Refused(403, "forbidden", "this credential may not post agent events")),
        (READER, Refused(403, "forbidden", "this credential may not post agent events")),
        (
            WEBHOOK,
            Refused(403, "forbidden", "the webhook's credentials may post alerts only, not agent events"),
        ),
        ("Bearer guess", Refused(401, "unauthorized", "bad token")),
        (
            None,
            Refused(401, "unauthorized", "missing Authorization header: expected the agent's Bearer token"),
        ),
    ],
)
async def test_a_static_agent_token_refuses_the_others(header: str | None, expected: Refused) -> None:
    reviewer = FakeReviewer()
    assert await refusal(static_agent_callers(reviewer).agent(header)) == expected
    assert reviewer.token_calls == []


async def test_a_previous_agent_token_is_not_an_agent_outside_token_mode() -> None:
    """In serviceaccount mode a configured static agent token is nobody's: reviewed like any other."""
    reviewer = FakeReviewer()
    auth = Callers(
        settings(agents={"token": "ag-secret"}, operator={"token": "op-secret"}), reviewer=reviewer
    )
    assert await refusal(auth.agent(AGENT)) == Refused(
        401, "unauthorized", "the Kubernetes API did not accept the token for audience 'sickbay'"
    )
    assert reviewer.token_calls == [("ag-secret", ("sickbay",))]


# -- operators and readers -----------------------------------------------------------------------------


def operator_callers(
    reviewer: FakeReviewer | None = None, clock: Clock | None = None, **overrides: Any
) -> Callers:
    base: dict[str, Any] = {
        "operator": {"token": "op-secret", "previous_token": "op-old", "kubernetes": True, "cache_ttl_s": 30},
        "reads": {"required": True, "token": "rd-secret"},
        "agents": {"mode": "token", "token": "ag-secret"},
    }
    return Callers(settings(**{**base, **overrides}), reviewer=reviewer, clock=clock or Clock())


@pytest.mark.parametrize("header", [OPERATOR, OLD_OPERATOR])
@pytest.mark.parametrize("resource", sorted(callers.WRITE_RESOURCES))
async def test_the_operator_token_writes_and_reads(header: str, resource: str) -> None:
    reviewer = FakeReviewer()
    auth = operator_callers(reviewer)
    assert await auth.operator(header, resource=resource) == Caller("operator", "operator-token", None)
    assert await auth.reader(header) == Caller("operator", "operator-token", None)
    assert reviewer.token_calls == []


def test_the_write_resources_and_the_read_resource() -> None:
    assert sorted(callers.WRITE_RESOURCES) == ["breakers", "models"]
    assert callers.READ_RESOURCE == "status"
    assert callers.GROUP == "sickbay.io"


async def test_an_unknown_operator_resource_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"^no such operator resource 'status'$"):
        await operator_callers().operator(OPERATOR, resource="status")
    with pytest.raises(ValueError, match="no such operator resource 'nodes'"):
        await Callers(settings(mode="none", token=None), reviewer=None).operator(None, resource="nodes")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            None,
            Refused(401, "unauthorized", "missing Authorization header: expected an operator's Bearer token"),
        ),
        ("Basic YW06cHc=", Refused(401, "unauthorized", "expected an operator's Bearer token")),
        (
            WEBHOOK,
            Refused(
                403,
                "forbidden",
                "the webhook's credentials may post alerts only, not update breakers.sickbay.io",
            ),
        ),
        (READER, Refused(403, "forbidden", "the reader's credential may not update breakers.sickbay.io")),
        (AGENT, Refused(403, "forbidden", "the agent's credential may not update breakers.sickbay.io")),
    ],
)
async def test_writes_refuse_other_callers(header: str | None, expected: Refused) -> None:
    reviewer = FakeReviewer()
    assert await refusal(operator_callers(reviewer).operator(header, resource="breakers")) == expected
    assert reviewer.token_calls == []


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (READER, Caller("reader", "reader-token", None)),
        (OPERATOR, Caller("operator", "operator-token", None)),
    ],
)
async def test_reads_take_the_read_or_the_operator_token(header: str, expected: Caller) -> None:
    assert await operator_callers().reader(header) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            None,
            Refused(401, "unauthorized", "missing Authorization header: expected an operator's Bearer token"),
        ),
        (
            WEBHOOK,
            Refused(
                403, "forbidden", "the webhook's credentials may post alerts only, not get status.sickbay.io"
            ),
        ),
        (AGENT, Refused(403, "forbidden", "the agent's credential may not get status.sickbay.io")),
    ],
)
async def test_reads_refuse_other_callers(header: str | None, expected: Refused) -> None:
    assert await refusal(operator_callers(FakeReviewer()).reader(header)) == expected


async def test_reads_need_no_credential_unless_required() -> None:
    auth = operator_callers(reads={"required": False, "token": "rd-secret"})
    assert await auth.reader(None) == Caller("reader", "anonymous", None)


async def test_without_kubernetes_a_wrong_token_is_401_and_no_operator_at_all_403() -> None:
    with_token = operator_callers(FakeReviewer(), operator={"token": "op-secret"})
    assert await refusal(with_token.operator("Bearer guess", resource="models")) == Refused(
        401, "unauthorized", "bad token"
    )
    nobody = operator_callers(FakeReviewer(), operator={}, reads={"required": True})
    for call, what in (
        (nobody.operator("Bearer guess", resource="models"), "update models.sickbay.io"),
        (nobody.reader("Bearer guess"), "get status.sickbay.io"),
    ):
        assert await refusal(call) == Refused(
            403,
            "forbidden",
            f"no operator credential is configured, so no one may {what}: set auth.operator.token "
            "or auth.operator.kubernetes",
        )


async def test_a_kubernetes_user_rbac_allows_is_an_operator() -> None:
    alice = UserInfo(username="alice", groups=("ops",))
    reviewer = FakeReviewer(users={"k-alice": alice}, allowed={("alice", "update", "models"): "bound"})
    auth = operator_callers(reviewer)
    assert await auth.operator("Bearer k-alice", resource="models") == Caller("operator", "alice", None)
    assert reviewer.token_calls == [("k-alice", ())], "no audience: the API server's own tokens"
    assert reviewer.access_calls == [
        ("alice", AccessRequest(verb="update", group="sickbay.io", resource="models"))
    ]


async def test_a_kubernetes_user_rbac_allows_to_get_status_is_a_reader() -> None:
    reviewer = FakeReviewer(users={"k-bob": UserInfo("bob")}, allowed={("bob", "get", "status"): ""})
    auth = operator_callers(reviewer)
    assert await auth.reader("Bearer k-bob") == Caller("reader", "bob", None)
    assert reviewer.access_calls == [
        ("bob", AccessRequest(verb="get", group="sickbay.io", resource="status"))
    ]


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("", "RBAC does not allow 'bob' to update breakers.sickbay.io"),
        ("no binding", "RBAC does not allow 'bob' to update breakers.sickbay.io (no binding)"),
    ],
)
async def test_a_user_rbac_denies_is_403_and_cached(reason: str, message: str) -> None:
    reviewer = FakeReviewer(users={"k-bob": UserInfo("bob")}, denied_reason=reason)
    auth = operator_callers(reviewer)
    for _ in range(2):
        assert await refusal(auth.operator("Bearer k-bob", resource="breakers")) == Refused(
            403, "forbidden", message
        )
    assert len(reviewer.token_calls) == 1


async def test_an_allowed_write_does_not_allow_another_resource_or_a_read() -> None:
    reviewer = FakeReviewer(users={"k-alice": UserInfo("alice")}, allowed={("alice", "update", "models"): ""})
    auth = operator_callers(reviewer)
    assert await auth.operator("Bearer k-alice", resource="models") == Caller("operator", "alice")
    assert (await refusal(auth.operator("Bearer k-alice", resource="breakers"))).status == 403
    assert (await refusal(auth.reader("Bearer k-alice"))).status == 403
    assert len(reviewer.access_calls) == 3, "each (verb, resource) has its own verdict"


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("", "the Kubernetes API did not accept the token"),
        ("expired", "the Kubernetes API did not accept the token: expired"),
    ],
)
async def test_an_operator_token_unknown_to_kubernetes_is_401_and_not_cached(
    error: str, message: str
) -> None:
    reviewer = FakeReviewer(errors={"guess": error})
    auth = operator_callers(reviewer)
    for _ in range(2):
        assert await refusal(auth.operator("Bearer guess", resource="models")) == Refused(
            401, "unauthorized", message
        )
    assert len(reviewer.token_calls) == 2
    assert reviewer.access_calls == []
    assert len(auth._operators) == 0


async def test_an_operator_review_authenticated_without_a_user_is_401() -> None:
    class NoUser(FakeReviewer):
        async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
            return TokenReview(authenticated=True, user=None)

    reviewer = NoUser()
    refused = await refusal(operator_callers(reviewer).operator("Bearer x", resource="models"))
    assert refused == Refused(401, "unauthorized", "the Kubernetes API did not accept the token")
    assert reviewer.access_calls == []


@pytest.mark.parametrize("where", ["token", "access"])
async def test_an_operator_check_the_api_server_cannot_answer_is_503_not_cached(where: str) -> None:
    reviewer = FakeReviewer(users={"k": UserInfo("alice")}, allowed={("alice", "update", "breakers"): ""})
    setattr(reviewer, "down" if where == "token" else "access_down", "HTTP 503 from the API server")
    auth = operator_callers(reviewer)
    refused = await refusal(auth.operator("Bearer k", resource="breakers"))
    assert refused == Refused(
        503,
        "unavailable",
        "cannot check the operator with the Kubernetes API: HTTP 503 from the API server; retry",
    )
    assert refused.__cause__ is None
    reviewer.down = reviewer.access_down = None
    assert await auth.operator("Bearer k", resource="breakers") == Caller("operator", "alice")


async def test_operators_without_a_kubernetes_connection_are_503() -> None:
    refused = await refusal(operator_callers(None).operator("Bearer k", resource="breakers"))
    assert refused == Refused(
        503,
        "unavailable",
        "operator tokens cannot be verified: this service has no Kubernetes connection (kube.enabled is "
        "false); retry",
    )


async def test_an_operators_verdict_is_cached_for_the_operator_ttl() -> None:
    clock = Clock()
    reviewer = FakeReviewer(users={"k": UserInfo("alice")}, allowed={("alice", "update", "breakers"): ""})
    auth = operator_callers(
        reviewer,
        clock,
        operator={"kubernetes": True, "cache_ttl_s": 30},
        agents={"mode": "serviceaccount", "cache_ttl_s": 600},
    )
    assert await auth.operator("Bearer k", resource="breakers") == Caller("operator", "alice")
    del reviewer.allowed[("alice", "update", "breakers")]
    clock.now += 29.9
    assert await auth.operator("Bearer k", resource="breakers") == Caller("operator", "alice")
    assert len(reviewer.access_calls) == 1
    clock.now += 0.1
    assert (await refusal(auth.operator("Bearer k", resource="breakers"))).status == 403
    assert len(reviewer.access_calls) == 2, "reviewed again once the operator TTL (not the agents') is up"


async def test_the_operators_cache_keeps_1024_verdicts() -> None:
    users = {f"k{i}": UserInfo(f"u{i}") for i in range(1025)}
    reviewer = FakeReviewer(users=users, allowed={(f"u{i}", "update", "models"): "" for i in range(1025)})
    auth = operator_callers(reviewer)
    for i in range(1025):
        await auth.operator(f"Bearer k{i}", resource="models")
    assert len(auth._operators) == 1024
    await auth.operator("Bearer k1", resource="models")
    assert len(reviewer.token_calls) == 1025, "k1 is still cached"
    await auth.operator("Bearer k0", resource="models")
    assert len(reviewer.token_calls) == 1026, "k0, the oldest, was pushed out"


async def test_an_agent_and_an_operator_verdict_on_one_token_are_kept_apart() -> None:
    """The same token reviewed as an agent and as an operator: neither verdict answers for the other."""
    reviewer = FakeReviewer(
        users={"t": agent_user(node="gpu-1")}, allowed={(AGENT_SA, "update", "models"): ""}
    )
    auth = operator_callers(reviewer, agents={"mode": "serviceaccount"})
    assert await auth.agent("Bearer t") == Caller("agent", AGENT_SA, "gpu-1")
    assert await auth.operator("Bearer t", resource="models") == Caller("operator", AGENT_SA)
    assert len(reviewer.token_calls) == 2


# -- events for other nodes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "events", "foreign"),
    [
        (None, [{"node": "gpu-2"}], []),
        ("gpu-1", [{"node": "gpu-1"}, {"gpu": 0}, "junk", {"node": None}], []),
        (
            "gpu-1",
            [{"node": "gpu-2"}, {"node": "gpu-1"}, {"node": "gpu-3"}, {"node": "gpu-2"}],
            ["gpu-2", "gpu-3"],
        ),
        ("gpu-1", [{"node": 7}, {"node": "7"}], ["7"]),
    ],
)
def test_foreign_nodes(node: str | None, events: list[object], foreign: list[str]) -> None:
    assert foreign_nodes(Caller("agent", "a", node), events) == foreign


async def test_with_only_a_read_token_a_wrong_read_token_is_401_not_nobody_may() -> None:
    """Reads required, a read token configured, no operator at all: the read token reads, a wrong one is an
    unknown credential (401), not "no one may get status" (which the read token disproves)."""
    auth = operator_callers(FakeReviewer(), operator={}, reads={"required": True, "token": "rd-secret"})
    assert await auth.reader(READER) == Caller("reader", "reader-token", None)
    assert await refusal(auth.reader("Bearer guess")) == Refused(401, "unauthorized", "bad token")
    assert (await refusal(auth.operator(READER, resource="breakers"))).status == 403
    assert (await refusal(auth.operator("Bearer guess", resource="breakers"))).status == 403
