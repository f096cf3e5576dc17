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

from tests.contract.conftest import eventually, unique


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2025-01-01T00:00:00.000000Z",
            "renewTime": "2025-01-01T00:00:00.000000Z",
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
