"""The read routes' view of the cluster: one API call per key however many readers, a short cache, its own
budget that refuses rather than queues, and `TokenBucket.try_take`, which it draws on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from app.domain import NodeState
from app.kube import errors
from app.kube.ratelimit import TokenBucket
from app.service.runtime.reads import NodeReads, ReadCache


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class SlowPort:
    """get_node / list_nodes that block until `release` is set, counting calls; `missing` names 404."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[tuple[str, str]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    failing: bool = False

    async def get_node(self, name: str) -> NodeState:
        self.calls.append(("node", name))
        await self.release.wait()
        if self.failing:
            raise errors.UnavailableError("api server down")
        if name in self.missing:
            raise errors.NotFoundError(f"node {name} not found", status=404)
        return NodeState(name=name)

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        self.calls.append(("nodes", label_selector or ""))
        await self.release.wait()
        return [NodeState(name=f"n{len(self.calls)}")]


def reads_on(
    port: SlowPort, clock: Clock, *, ttl: float = 3.0, qps: float = 1.0, burst: int = 2
) -> NodeReads:
    cache = ReadCache(ttl_s=ttl, max_entries=3, clock=clock)
    return NodeReads(port, cache=cache, qps=qps, burst=burst, clock=clock)


async def test_concurrent_readers_of_one_key_share_one_call() -> None:
    port, clock = SlowPort(), Clock()
    reads = reads_on(port, clock)
    waiting = [asyncio.create_task(reads.list_nodes(label_selector="sickbay.io/state")) for _ in range(500)]
    await asyncio.sleep(0)
    port.release.set()
    answers = await asyncio.gather(*waiting)
    assert port.calls == [("nodes", "sickbay.io/state")]
    assert all(a == answers[0] for a in answers)
    assert (reads.counts.calls, reads.counts.hits, reads.counts.refused) == (1, 499, 0)


async def test_answers_come_from_cache_until_the_ttl_then_fresh() -> None:
    port, clock = SlowPort(), Clock()
    port.release.set()
    reads = reads_on(port, clock, ttl=3.0, qps=100.0, burst=10)
    first = await reads.list_nodes()
    clock.now += 2.9
    assert await reads.list_nodes() == first
    assert len(port.calls) == 1
    clock.now += 0.2  # past the TTL: one new call, a new answer
    assert await reads.list_nodes() != first
    assert len(port.calls) == 2


async def test_a_spent_budget_refuses_without_calling_and_refills_with_time() -> None:
    port, clock = SlowPort(), Clock()
    port.release.set()
    reads = reads_on(port, clock, qps=1.0, burst=2)
    assert (await reads.get_node("a")).name == "a"
    assert (await reads.get_node("b")).name == "b"
    with pytest.raises(errors.TooManyRequestsError) as refused:
        await reads.get_node("c")
    assert refused.value.retry_after == pytest.approx(1.0)
    assert [name for _, name in port.calls] == ["a", "b"]  # the refusal cost the API server nothing
    assert (await reads.get_node("a")).name == "a"  # cached keys are still served
    clock.now += 1.0  # one token back
    assert (await reads.get_node("c")).name == "c"
    assert reads.counts.refused == 1


async def test_not_found_is_cached_other_errors_are_not() -> None:
    port, clock = SlowPort(missing={"gone"}), Clock()
    port.release.set()
    reads = reads_on(port, clock, qps=100.0, burst=10)
    for _ in range(3):
        with pytest.raises(errors.NotFoundError):
            await reads.get_node("gone")
    assert port.calls == [("node", "gone")]
    port.failing = True
    for _ in range(2):
        with pytest.raises(errors.UnavailableError):
            await reads.get_node("flaky")
    assert port.calls.count(("node", "flaky")) == 2


async def test_a_reader_that_leaves_does_not_cancel_the_call_others_wait_on() -> None:
    port, clock = SlowPort(), Clock()
    reads = reads_on(port, clock)
    leaver = asyncio.create_task(reads.get_node("x"))
    stayer = asyncio.create_task(reads.get_node("x"))
    await asyncio.sleep(0)
    leaver.cancel()
    await asyncio.sleep(0)
    port.release.set()
    assert (await stayer).name == "x"
    assert port.calls == [("node", "x")]


async def test_the_cache_holds_at_most_max_entries_oldest_out_first() -> None:
    port, clock = SlowPort(), Clock()
    port.release.set()
    reads = reads_on(port, clock, qps=100.0, burst=10)
    for name in ("a", "b", "c", "d"):  # max_entries=3: "a" goes
        await reads.get_node(name)
    await reads.get_node("d")
    await reads.get_node("a")
    assert [name for _, name in port.calls] == ["a", "b", "c", "d", "a"]


def test_try_take_spends_only_saved_tokens_and_never_delays_reservations() -> None:
    clock = Clock(now=0.0)
    bucket = TokenBucket(qps=2.0, burst=2, clock=clock)
    assert bucket.try_take()
    assert bucket.try_take()
    assert not bucket.try_take()  # empty: refused, and nothing borrowed
    assert bucket.reserve() == pytest.approx(0.5)  # the first reservation waits no longer for it
    clock.now = 0.5
    assert not bucket.try_take()  # the token that came back is the reservation's
    clock.now = 1.0
    assert bucket.try_take()


def test_reserve_within_takes_a_token_only_when_it_is_due_in_time() -> None:
    clock = Clock(now=0.0)
    bucket = TokenBucket(qps=1.0, burst=1, clock=clock)
    assert bucket.reserve_within(0.0) == 0.0
    assert bucket.reserve_within(0.5) is None  # due in 1 s: refused, nothing taken
    assert bucket.reserve_within(1.0) == pytest.approx(1.0)  # due in 1 s: taken
    assert bucket.reserve_within(1.5) is None  # the next is due in 2 s
    clock.now = 2.0
    assert bucket.reserve_within(0.0) == 0.0
