"""Leader election on a Lease, through the real client, against the simulator (or a real cluster).

Short timings (1 s lease, 0.6 s renew deadline, 0.2 s retry period) keep the suite fast; every assertion about
time is a bound derived from those settings, not a sleep-and-hope.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from app.kube.client import KubeClient
from app.kube.leader import LeaderElector
from tests.contract.conftest import eventually, unique

LEASE = 1.0
RENEW_DEADLINE = 0.6
RETRY = 0.2
JITTER = 0.2


@dataclass
class Candidate:
    """One elector with its `run()` task and a record of when its leader work ran."""

    elector: LeaderElector
    active: set[str]  # shared between candidates: identities whose leader work is running now
    overlaps: list[set[str]]
    task: asyncio.Task[None] | None = None
    started: int = 0
    stopped: int = 0

    @property
    def identity(self) -> str:
        return self.elector.identity

    def start(self, work: Callable[[], Awaitable[None]] | None = None) -> None:
        self.task = asyncio.create_task(self.elector.run(work or self._lead, self._stop))

    async def _lead(self) -> None:
        self.started += 1
        self.active.add(self.identity)
        if len(self.active) > 1:
            self.overlaps.append(set(self.active))
        try:
            await asyncio.Event().wait()
        finally:
            self.active.discard(self.identity)

    async def _stop(self) -> None:
        self.stopped += 1

    async def crash(self) -> None:
        """Stop without releasing: the lease stays with this identity until it expires."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@dataclass
class Election:
    api: aclient.ApiClient
    namespace: str
    lease: str = field(default_factory=lambda: unique("sickbay-leader"))
    active: set[str] = field(default_factory=set)
    overlaps: list[set[str]] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)

    def add(
        self,
        identity: str | None = None,
        *,
        api: aclient.ApiClient | None = None,
        work: Callable[[], Awaitable[None]] | None = None,
        **timing: Any,
    ) -> Candidate:
        settings = {
            "lease_duration": LEASE,
            "renew_deadline": RENEW_DEADLINE,
            "retry_period": RETRY,
            "jitter": JITTER,
        }
        elector = LeaderElector(
            # Unpaced: a candidate renewing every 0.05 s makes 40 requests a second, past the default 20 qps.
            KubeClient(api or self.api, qps=1000, burst=1000),
            name=self.lease,
            namespace=self.namespace,
            identity=identity or unique("replica"),
            **(settings | timing),
        )
        candidate = Candidate(elector, self.active, self.overlaps)
        candidate.start(work)
        self.candidates.append(candidate)
        return candidate

    def leaders(self) -> list[Candidate]:
        return [c for c in self.candidates if c.elector.is_leader()]

    async def leader(self, timeout: float = 5.0) -> Candidate:
        async def one() -> bool:
            return len(self.leaders()) == 1

        await eventually(one, timeout=timeout, interval=0.01)
        return self.leaders()[0]


@pytest.fixture
async def election(api_client: aclient.ApiClient, namespace: str) -> AsyncIterator[Election]:
    made = Election(api_client, namespace)
    yield made
    for candidate in made.candidates:
        if candidate.task is not None:
            candidate.task.cancel()
    await asyncio.gather(*(c.task for c in made.candidates if c.task is not None), return_exceptions=True)


async def read_lease(coordination: aclient.CoordinationV1Api, election: Election) -> Any:
    return await coordination.read_namespaced_lease(election.lease, election.namespace)


async def watch_for_split_brain(election: Election, stop: asyncio.Event, seen: list[int]) -> None:
    """Sample every few milliseconds how many candidates believe they lead."""
    while not stop.is_set():
        seen.append(len(election.leaders()))
        await asyncio.sleep(0.005)


async def test_two_candidates_elect_exactly_one_leader(
    election: Election, coordination: aclient.CoordinationV1Api
) -> None:
    a, b = election.add("replica-a"), election.add("replica-b")
    leader = await election.leader()
    follower = b if leader is a else a

    samples: list[int] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(watch_for_split_brain(election, stop, samples))
    await asyncio.sleep(3 * RETRY)  # several renewals and follower polls
    stop.set()
    await monitor

    assert set(samples) == {1}
    assert leader.elector.is_leader()
    assert not follower.elector.is_leader()
    assert (leader.started, follower.started) == (1, 0)
    assert election.active == {leader.identity}
    lease = await read_lease(coordination, election)
    assert lease.spec.holder_identity == leader.identity
    assert lease.spec.lease_duration_seconds == 1
    assert lease.spec.renew_time is not None
    assert lease.spec.acquire_time is not None
    assert follower.elector.leader_identity == leader.identity


async def test_crashed_leader_is_replaced_after_the_lease_expires(
    election: Election, coordination: aclient.CoordinationV1Api
) -> None:
    first = election.add()
    await election.leader()
    second = election.add()
    await asyncio.sleep(2 * RETRY)  # the follower has seen the leader renew

    loop = asyncio.get_running_loop()
    await first.crash()
    crashed_at = loop.time()
    assert first.stopped == 1  # its work was stopped, but the lease was not released
    assert (await read_lease(coordination, election)).spec.holder_identity == first.identity

    taken = await election.leader(timeout=5)
    waited = loop.time() - crashed_at
    assert taken is second
    # Not before the lease can have expired (the last renewal was at most one retry period before the crash),
    # and within one lease plus two follower polls.
    assert LEASE - RETRY - 0.05 <= waited <= LEASE + 2 * RETRY * (1 + JITTER) + 0.3
    lease = await read_lease(coordination, election)
    assert lease.spec.holder_identity == second.identity
    assert lease.spec.lease_transitions == 1


async def test_released_lease_is_taken_within_one_retry_period(
    election: Election, coordination: aclient.CoordinationV1Api
) -> None:
    first = election.add()
    await election.leader()
    second = election.add()
    await asyncio.sleep(RETRY)

    loop = asyncio.get_running_loop()
    await first.elector.release()
    released_at = loop.time()
    assert first.stopped == 1
    assert not first.elector.is_leader()
    assert first.task is not None
    assert first.task.done()

    taken = await election.leader(timeout=5)
    assert taken is second
    assert loop.time() - released_at <= RETRY * (1 + JITTER) + 0.15
    lease = await read_lease(coordination, election)
    assert lease.spec.holder_identity == second.identity
    assert lease.spec.lease_transitions == 1


async def test_leader_whose_work_fails_steps_down_and_hands_over(election: Election) -> None:
    failures: list[str] = []

    async def broken() -> None:
        failures.append("crashed")
        raise RuntimeError("the leader's loop crashed")

    async def failed() -> bool:
        return bool(failures)

    first = election.add("replica-fails", work=broken)
    await eventually(failed, timeout=5, interval=0.01)
    await asyncio.sleep(0.05)  # the failure is noticed and the lease released
    assert not first.elector.is_leader()
    first.task and first.task.cancel()
    second = election.add("replica-ok")
    taken = await election.leader(timeout=RETRY * (1 + JITTER) + 0.5)
    assert taken is second  # released at once, not after a lease duration
    assert first.stopped == 1


def partition(api: aclient.ApiClient) -> Callable[[], None]:
    """Cut one client off the API server (its requests fail to connect); returns the function that heals it."""
    host = api.configuration.host
    api.configuration.host = "http://127.0.0.1:9"

    def heal() -> None:
        api.configuration.host = host

    return heal


async def test_no_split_brain_across_twenty_rounds_of_contention(
    election: Election, cluster: Any, api_client: aclient.ApiClient
) -> None:
    """Three candidates; each round the leader is released, crashed or cut off from the API server.

    Fast timings (0.05 s retry period) keep twenty rounds short; a partitioned leader must stop believing it
    leads (and stop its work) before anyone else can take over.
    """
    fast = {"retry_period": 0.05, "renew_deadline": 0.4, "lease_duration": 1.0}
    isolated: dict[str, aclient.ApiClient] = {}

    async def own_client() -> aclient.ApiClient:
        return aclient.ApiClient(copy.deepcopy(api_client.configuration))

    async def add() -> Candidate:
        identity = unique("replica")
        isolated[identity] = await own_client()
        return election.add(identity, api=isolated[identity], **fast)

    for _ in range(3):
        await add()
    samples: list[int] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(watch_for_split_brain(election, stop, samples))
    leaders: list[str] = []
    try:
        for round_number in range(20):
            leader = await election.leader(timeout=5)
            leaders.append(leader.identity)
            how = ("partition", "crash")[round_number % 2] if round_number % 7 == 3 else "release"
            if how == "release":
                await leader.elector.release()
            elif how == "crash":
                await leader.crash()
            else:
                heal = partition(isolated[leader.identity])

                async def stepped_down(c: Candidate = leader) -> bool:
                    return not c.elector.is_leader()

                await eventually(stepped_down, timeout=3)
                await election.leader(timeout=5)
                heal()
                await leader.crash()
            election.candidates.remove(leader)
            await add()
    finally:
        stop.set()
        await monitor
        for client in isolated.values():
            await client.close()

    assert max(samples) == 1, "two candidates believed they led at the same moment"
    assert election.overlaps == [], f"leader work overlapped: {election.overlaps}"
    assert len(set(leaders)) == 20  # every round elected a different, fresh replica
