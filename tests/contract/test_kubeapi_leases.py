"""coordination.k8s.io Leases and the official client's leader election on top of them."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import kubernetes
import pydantic
import pytest
from kubernetes.aio import client as aclient
from kubernetes.aio.leaderelection.electionconfig import Config
from kubernetes.aio.leaderelection.leaderelection import LeaderElection
from kubernetes.aio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.aio.leaderelection.resourcelock.leaselock import LeaseLock
from kubernetes.leaderelection import electionconfig as sync_config
from kubernetes.leaderelection import leaderelection as sync_election
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock as SyncLeaseLock

from app.kube import convert
from tests.contract.conftest import eventually, unique

# The typed client parses these strings into datetimes and sends them back through isoformat(), which
# drops a zero fraction; a whole-second value would go out as `…T00:00:00+00:00`, which a real API server
# refuses (see the MicroTime tests below). Half a second survives the round trip.
LEASE_TIME = "2025-01-01T00:00:00.500000Z"


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": LEASE_TIME,
            "renewTime": LEASE_TIME,
        },
    }


async def test_lease_create_get_replace_and_stale_replace(
    coordination: aclient.CoordinationV1Api, namespace: str
) -> None:
    name = unique("sickbay-leader")
    created = await coordination.create_namespaced_lease(namespace, lease(name, "replica-a"))
    with pytest.raises(aclient.ApiException) as duplicate:
        await coordination.create_namespaced_lease(namespace, lease(name, "replica-b"))
    assert duplicate.value.status == 409
    assert json.loads(duplicate.value.body)["reason"] == "AlreadyExists"

    read = await coordination.read_namespaced_lease(name, namespace)
    assert read.spec.holder_identity == "replica-a"
    read.spec.holder_identity = "replica-b"
    replaced = await coordination.replace_namespaced_lease(name, namespace, read)
    assert replaced.spec.holder_identity == "replica-b"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)

    created.spec.holder_identity = "replica-c"  # still carries the first resourceVersion
    with pytest.raises(aclient.ApiException) as stale:
        await coordination.replace_namespaced_lease(name, namespace, created)
    assert stale.value.status == 409
    assert json.loads(stale.value.body)["reason"] == "Conflict"

    patched = await coordination.patch_namespaced_lease(
        name, namespace, {"spec": {"leaseDurationSeconds": 30}}
    )
    assert patched.spec.lease_duration_seconds == 30
    assert patched.spec.holder_identity == "replica-b"


class CreatableLeaseLock(LeaseLock):
    """kubernetes v37's async LeaseLock.create passes `pretty=True` where the generated API wants a string,
    so pydantic rejects every create before a request is sent and the elector's task dies. Same call, fixed."""

    async def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        body = aclient.V1Lease(
            metadata=aclient.V1ObjectMeta(name=name), spec=self.update_lease(election_record)
        )
        try:
            await self.api_instance.create_namespaced_lease(namespace, body)
        except aclient.ApiException:
            return False
        return True


async def test_async_lease_lock_create_is_broken_in_the_client(
    api_client: aclient.ApiClient, namespace: str
) -> None:
    """Documents the client bug the workaround above exists for; when this fails, drop CreatableLeaseLock."""
    now = str(datetime.datetime.now())
    lock = LeaseLock(unique("broken"), namespace, "replica-a", api_client)
    with pytest.raises(pydantic.ValidationError):
        await lock.create(lock.name, namespace, LeaderElectionRecord("replica-a", "3", now, now))


async def test_leader_election_elects_one_and_fails_over(
    api_client: aclient.ApiClient, namespace: str
) -> None:
    name = unique("sickbay")
    leading: list[str] = []
    stopped: list[str] = []

    def candidate(identity: str) -> LeaderElection:
        async def lead() -> None:
            leading.append(identity)
            await asyncio.Event().wait()

        async def stop() -> None:
            stopped.append(identity)

        lock = CreatableLeaseLock(name, namespace, identity, api_client)
        return LeaderElection(Config(lock, lease_duration=3, renew_deadline=2, retry_period=1,
                                     onstarted_leading=lead, onstopped_leading=stop))  # fmt: skip

    tasks = {ident: asyncio.create_task(candidate(ident).run()) for ident in ("replica-a", "replica-b")}
    try:

        async def one_leader() -> bool:
            return len(leading) == 1

        await eventually(one_leader, timeout=5)
        await asyncio.sleep(1.5)  # a few renew periods: still exactly one leader
        assert len(leading) == 1
        first = leading[0]
        coordination = aclient.CoordinationV1Api(api_client)
        assert (await coordination.read_namespaced_lease(name, namespace)).spec.holder_identity == first

        tasks[first].cancel()  # the leader dies without releasing: the follower must wait out the lease
        follower = next(i for i in tasks if i != first)

        async def took_over() -> bool:
            return leading[-1] == follower

        await eventually(took_over, timeout=8)
        assert (await coordination.read_namespaced_lease(name, namespace)).spec.holder_identity == follower
        assert leading == [first, follower]
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def test_sync_lease_lock_acquire_block_and_take_over(
    sync_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    """The blocking client's LeaseLock, driven one election step at a time (each step is one get + write)."""
    name = unique("sickbay-sync")

    def elector(identity: str) -> sync_election.LeaderElection:
        lock = SyncLeaseLock(name, namespace, identity)
        lock.api_instance = kubernetes.client.CoordinationV1Api(sync_client)
        config = sync_config.Config(lock, 3, 2, 1, lambda: None, lambda: None)
        return sync_election.LeaderElection(config)

    a, b = elector("replica-a"), elector("replica-b")
    assert await asyncio.to_thread(a.try_acquire_or_renew) is True  # creates the lease
    assert await asyncio.to_thread(b.try_acquire_or_renew) is False  # held and fresh
    assert await asyncio.to_thread(a.try_acquire_or_renew) is True  # renews
    assert await asyncio.to_thread(b.try_acquire_or_renew) is False
    await asyncio.sleep(3.2)  # a stops renewing; b's view of the record ages past the lease duration
    assert await asyncio.to_thread(b.try_acquire_or_renew) is True
    assert await asyncio.to_thread(a.try_acquire_or_renew) is False
    api = kubernetes.client.CoordinationV1Api(sync_client)
    held = await asyncio.to_thread(api.read_namespaced_lease, name, namespace)
    assert held.spec.holder_identity == "replica-b"


LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


async def send_raw(
    api_client: aclient.ApiClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    content_type: str = "application/json",
    **path_params: str,
) -> tuple[int, dict[str, Any]]:
    """One request with the body exactly as given: the generated methods would re-serialise its times."""
    params = await api_client.param_serialize(
        method=method,
        resource_path=path,
        path_params=path_params,
        header_params={"Accept": "application/json", "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = await api_client.call_api(*params)
    except aclient.ApiException as error:
        return int(error.status), json.loads(error.body)
    return int(response.status), json.loads(await response.response.read())


def lease_at(name: str, moment: str) -> dict[str, Any]:
    body = lease(name, "replica-a")
    body["spec"]["acquireTime"] = body["spec"]["renewTime"] = moment
    return body


def assert_undecodable(code: int, status: dict[str, Any], value: str) -> None:
    """A MicroTime the decoder refuses: 400, in transformDecodeError's words, with Go's time.Parse error."""
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"].startswith('Lease in version "v1" cannot be handled as a Lease: ')
    assert f'parsing time "{value}"' in status["message"]


# Go's time.Parse(RFC3339Micro, …) takes exactly six fractional digits and a zone (Z or ±hh:mm).
NOT_MICRO_TIMES = [
    "2025-01-01T10:00:00+00:00",  # what isoformat() gives a whole-second aware datetime
    "2025-01-01T10:00:00Z",
    "2025-01-01T10:00:00.123Z",
    "2025-01-01T10:00:00.1234567Z",
    "2025-01-01T10:00:00.123456",  # naive: no zone
]


@pytest.mark.parametrize("value", NOT_MICRO_TIMES)
async def test_lease_time_without_six_fractional_digits_is_400(
    api_client: aclient.ApiClient, coordination: aclient.CoordinationV1Api, namespace: str, value: str
) -> None:
    name = unique("lease")
    code, status = await send_raw(api_client, "POST", LEASES, lease_at(name, value), namespace=namespace)
    assert_undecodable(code, status, value)
    with pytest.raises(aclient.ApiException) as missing:
        await coordination.read_namespaced_lease(name, namespace)
    assert missing.value.status == 404


async def test_lease_time_is_checked_on_replace_and_patch_too(
    api_client: aclient.ApiClient, namespace: str
) -> None:
    name = unique("lease")
    one = LEASES + "/{name}"
    assert (await send_raw(api_client, "POST", LEASES, lease(name, "replica-a"), namespace=namespace))[
        0
    ] == 201
    _, current = await send_raw(api_client, "GET", one, namespace=namespace, name=name)
    whole_second = "2025-01-01T10:00:00+00:00"
    current["spec"]["renewTime"] = whole_second
    code, status = await send_raw(api_client, "PUT", one, current, namespace=namespace, name=name)
    assert_undecodable(code, status, whole_second)

    patch = {"spec": {"renewTime": whole_second}}
    merge = "application/merge-patch+json"
    code, status = await send_raw(
        api_client, "PATCH", one, patch, content_type=merge, namespace=namespace, name=name
    )
    assert (code, status["reason"]) == (422, "Invalid")  # the patch handlers answer NewInvalid on `patch`
    assert status["details"]["causes"][0]["field"] == "patch"
    assert f'parsing time "{whole_second}"' in status["message"]
    _, after = await send_raw(api_client, "GET", one, namespace=namespace, name=name)
    assert after["spec"]["renewTime"] == LEASE_TIME


async def test_lease_time_with_six_digits_in_any_zone_reads_back_in_utc(
    api_client: aclient.ApiClient, namespace: str
) -> None:
    name = unique("lease")
    body = lease_at(name, "2025-01-01T12:30:00.123456+02:00")
    code, created = await send_raw(api_client, "POST", LEASES, body, namespace=namespace)
    assert code == 201
    # MicroTime.MarshalJSON writes the instant back in UTC, six digits, Z
    assert created["spec"]["renewTime"] == created["spec"]["acquireTime"] == "2025-01-01T10:30:00.123456Z"


async def test_typed_client_datetime_on_a_whole_second_is_refused(
    coordination: aclient.CoordinationV1Api, namespace: str
) -> None:
    """The client serialises a datetime with isoformat(), which drops a zero fraction: `…T10:00:00+00:00`."""
    whole = datetime.datetime(2025, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)

    def typed(name: str, moment: datetime.datetime) -> aclient.V1Lease:
        spec = aclient.V1LeaseSpec(holder_identity="replica-a", acquire_time=moment, renew_time=moment)
        return aclient.V1Lease(metadata=aclient.V1ObjectMeta(name=name), spec=spec)

    with pytest.raises(aclient.ApiException) as caught:
        await coordination.create_namespaced_lease(namespace, typed(unique("lease"), whole))
    assert_undecodable(int(caught.value.status), json.loads(caught.value.body), whole.isoformat())
    fractional = whole.replace(microsecond=250_000)  # isoformat() keeps six digits: accepted
    created = await coordination.create_namespaced_lease(namespace, typed(unique("lease"), fractional))
    assert created.spec.renew_time == fractional


@pytest.mark.parametrize("microsecond", [0, 1, 999_999])
async def test_sickbay_leader_lease_times_are_accepted(
    api_client: aclient.ApiClient, namespace: str, microsecond: int
) -> None:
    """app.kube.leader stamps acquireTime and renewTime with convert.format_micro_time: always six digits,
    a whole second included, sent as is (the elector does not go through the generated methods)."""
    moment = datetime.datetime.now(datetime.UTC).replace(microsecond=microsecond)
    stamp = convert.format_micro_time(moment)
    code, created = await send_raw(
        api_client, "POST", LEASES, lease_at(unique("lease"), stamp), namespace=namespace
    )
    assert code == 201
    assert created["spec"]["renewTime"] == stamp
