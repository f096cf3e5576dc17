"""TokenReview and SubjectAccessReview as the simulator serves them, read by the official client's own
models (so the shapes are the API's) and by `KubeClient`'s review calls.

Simulator-only (the `sim` fixture): a real cluster would need real tokens and bindings. The shapes follow
the API reference and kube-apiserver's code (see app/sim/kubeapi/reviews.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubernetes.aio import client as aclient
from kubernetes.aio.client.exceptions import ApiException

from app.domain.identity import NODE_NAME_KEY, POD_NAME_KEY, AccessRequest, UserInfo
from app.kube.client import KubeClient, connect
from app.sim.kubeapi import KubeApiServer
from tests.contract.conftest import Cluster


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[KubeClient]:
    client = await connect(kubeconfig=str(cluster.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


def _review(token: str, *audiences: str) -> aclient.V1TokenReview:
    spec = aclient.V1TokenReviewSpec(token=token, audiences=list(audiences) or None)
    return aclient.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview", spec=spec)


async def test_a_pod_bound_token_is_its_pod_and_node(
    sim: KubeApiServer, api_client: aclient.ApiClient
) -> None:
    sim.register_pod_token(
        "t1",
        namespace="sickbay",
        service_account="sickbay-agent",
        pod="agent-x",
        node="gpu-00",
        audience="sickbay",
    )
    authn = aclient.AuthenticationV1Api(api_client)
    raw = await authn.create_token_review_without_preload_content(_review("t1", "sickbay"))
    assert raw.status == 201, "created, though never stored"
    answer = aclient.V1TokenReview.from_dict(json.loads(await raw.read()))
    assert answer.status is not None
    assert answer.status.user is not None
    assert answer.status.authenticated is True
    assert answer.status.audiences == ["sickbay"]
    assert answer.status.user.username == "system:serviceaccount:sickbay:sickbay-agent"
    assert answer.status.user.groups == [
        "system:serviceaccounts",
        "system:serviceaccounts:sickbay",
        "system:authenticated",
    ]
    assert answer.status.user.extra == {POD_NAME_KEY: ["agent-x"], NODE_NAME_KEY: ["gpu-00"]}
    assert answer.spec.token == "t1", "the answer is the request with its status filled in"


async def test_unknown_tokens_and_other_audiences_are_not_authenticated(
    sim: KubeApiServer, api_client: aclient.ApiClient
) -> None:
    sim.register_token("for-the-api-server", "alice")
    authn = aclient.AuthenticationV1Api(api_client)
    for token, audiences in (("never-issued", ("sickbay",)), ("for-the-api-server", ("sickbay",))):
        raw = await authn.create_token_review_without_preload_content(_review(token, *audiences))
        status = json.loads(await raw.read())["status"]
        assert "authenticated" not in status, "false is omitted, as Go's omitempty does"
        assert status["user"] == {}
        assert status["error"].startswith("[invalid bearer token")
    # No audiences asked: the API server's own, which alice's token was minted for.
    default = await authn.create_token_review(_review("for-the-api-server"))
    assert default.status is not None
    assert default.status.authenticated is True
    with pytest.raises(ApiException) as empty:
        await authn.create_token_review(_review(""))
    assert empty.value.status == 400
    assert "token is required for TokenReview in authentication" in str(empty.value.body)


async def test_subject_access_reviews_follow_the_grants(
    sim: KubeApiServer, api_client: aclient.ApiClient
) -> None:
    sim.grant("ops", "update", "sickbay.io", "breakers")
    authz = aclient.AuthorizationV1Api(api_client)

    def review(user: str, groups: list[str], resource: str) -> aclient.V1SubjectAccessReview:
        attributes = aclient.V1ResourceAttributes(verb="update", group="sickbay.io", resource=resource)
        spec = aclient.V1SubjectAccessReviewSpec(user=user, groups=groups, resource_attributes=attributes)
        return aclient.V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec
        )

    allowed = await authz.create_subject_access_review(review("carol", ["ops"], "breakers"))
    assert allowed.status is not None
    assert allowed.status.allowed is True
    assert allowed.status.reason.startswith("RBAC: allowed by ClusterRoleBinding")
    denied = await authz.create_subject_access_review(review("carol", ["ops"], "models"))
    assert denied.status is not None
    assert denied.status.allowed is False
    assert not denied.status.reason, "no opinion: no reason"
    with pytest.raises(ApiException) as invalid:
        await authz.create_subject_access_review(review("", [], "breakers"))
    assert invalid.value.status == 422


async def test_the_kube_client_reviews_callers(sim: KubeApiServer, kube: KubeClient) -> None:
    sim.load(
        {
            "namespaces": ["sickbay"],
            "nodes": [{"name": "gpu-{i:02d}", "count": 1, "gpus": 8}],
            "pods": [{"name": "agent-old", "namespace": "sickbay", "node": "gpu-00", "gpus": 0}],
        }
    )
    sim.register_pod_token(
        "t2",
        namespace="sickbay",
        service_account="sickbay-agent",
        pod="agent-old",
        node=None,
        audience="sickbay",
    )
    before = kube.attempts
    review = await kube.review_token("t2", audiences=("sickbay",))
    assert review.authenticated
    assert review.user is not None
    assert review.user.first_extra(POD_NAME_KEY) == "agent-old"
    assert review.user.first_extra(NODE_NAME_KEY) is None
    assert review.user.service_account_namespace == "sickbay"
    assert await kube.pod_node("sickbay", "agent-old") == "gpu-00"
    assert await kube.pod_node("sickbay", "agent-gone") is None
    assert not (await kube.review_token("nope", audiences=("sickbay",))).authenticated

    sim.grant("dave", "get", "sickbay.io", "status")
    dave = UserInfo(username="dave", groups=("system:authenticated",))
    assert (
        await kube.review_access(dave, AccessRequest(verb="get", group="sickbay.io", resource="status"))
    ).allowed
    refused = await kube.review_access(
        dave, AccessRequest(verb="update", group="sickbay.io", resource="breakers")
    )
    assert not refused.allowed
    # Reviews pace on a budget of their own: none of them spent remediation's.
    assert kube.attempts == before
    assert kube.review_transport.attempts == 6


async def test_discovery_lists_the_reviews_as_create_only(
    sim: KubeApiServer, api_client: aclient.ApiClient
) -> None:
    for group, plural in (
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ):
        resources = await aclient.CustomObjectsApi(api_client).get_api_resources(group, "v1")
        (entry,) = [r for r in resources.resources if r.name == plural]
        assert (entry.namespaced, entry.verbs) == (False, ["create"])


async def test_tokens_and_grants_over_the_control_endpoints(sim: KubeApiServer, kube: KubeClient) -> None:
    """`sickbay simulate kube-api` runs in another process: tests and the demo register over HTTP."""
    tokens = [{"token": "t3", "username": "erin", "groups": ["oncall"], "audiences": ["sickbay"]}]
    grants = [{"subject": "oncall", "verb": "update", "group": "sickbay.io", "resource": "models"}]
    async with aiohttp.ClientSession() as session:
        for path, body, answer in (("tokens", tokens, {"registered": 1}), ("grants", grants, {"granted": 1})):
            async with session.post(f"{sim.url}/_sim/{path}", json=body) as response:
                assert (response.status, await response.json()) == (200, answer)
        async with session.post(f"{sim.url}/_sim/tokens", json=[{"username": "no token"}]) as response:
            assert response.status == 400
    review = await kube.review_token("t3", audiences=("sickbay",))
    assert review.user == UserInfo(username="erin", groups=("oncall",))
    access = await kube.review_access(
        review.user, AccessRequest(verb="update", group="sickbay.io", resource="models")
    )
    assert access.allowed
