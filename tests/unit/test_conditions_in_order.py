"""A slow background condition write never puts back what a later step wrote (the DrainFailed race)."""

from __future__ import annotations

import asyncio

import pytest

from app.act.conditions_in_order import InOrder


async def test_a_write_decided_earlier_that_finishes_later_is_dropped() -> None:
    order = InOrder()
    landed: list[str] = []
    quarantined = order.ticket("gpu-07")  # decided first, written after the drain (it waits for calm)
    drain_failed = order.ticket("gpu-07")

    async def write(what: str) -> None:
        landed.append(what)

    await order.write("gpu-07", drain_failed, lambda: write("DrainFailed"))
    await order.write("gpu-07", quarantined, lambda: write("RebootNode"))
    assert landed == ["DrainFailed"]


async def test_writes_in_decision_order_all_land_and_nodes_do_not_share_tickets() -> None:
    order = InOrder()
    landed: list[tuple[str, str]] = []

    async def write(node: str, what: str) -> None:
        await asyncio.sleep(0)
        landed.append((node, what))

    a1, b1 = order.ticket("a"), order.ticket("b")
    a2 = order.ticket("a")
    await asyncio.gather(
        order.write("a", a1, lambda: write("a", "first")),
        order.write("b", b1, lambda: write("b", "only")),
    )
    await order.write("a", a2, lambda: write("a", "second"))
    assert [w for n, w in landed if n == "a"] == ["first", "second"]
    assert ("b", "only") in landed


async def test_a_failed_write_does_not_count_as_landed() -> None:
    order = InOrder()
    first, second = order.ticket("n"), order.ticket("n")

    async def fail() -> None:
        raise RuntimeError("API server 500")

    landed: list[str] = []

    async def ok() -> None:
        landed.append("first")

    with pytest.raises(RuntimeError):
        await order.write("n", second, fail)
    await order.write("n", first, ok)
    assert landed == ["first"], "the later write failed, so the earlier one is still the newest word"
