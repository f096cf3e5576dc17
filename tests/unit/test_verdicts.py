"""The verdict cache: kept for its TTL on the injected clock, bounded (least recently used out first), and
keyed by a hash that never holds the token itself."""

from __future__ import annotations

from app.ingest.verdicts import Verdicts, key_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_verdict_lives_for_its_ttl() -> None:
    clock = Clock()
    cache: Verdicts[str] = Verdicts(ttl_s=60, size=10, clock=clock)
    cache.put("k", "agent on gpu-00")
    clock.now += 59.9
    assert cache.get("k") == "agent on gpu-00"
    clock.now += 0.1
    assert cache.get("k") is None
    assert len(cache) == 0, "an expired entry is dropped when seen"


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache: Verdicts[int] = Verdicts(ttl_s=60, size=2, clock=Clock())
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2


def test_keys_are_hashes_per_purpose() -> None:
    key = key_of("s3cret", "agent")
    assert "s3cret" not in key
    assert len(key) == 64
    assert key != key_of("s3cret", "update breakers.sickbay.io")
    assert key_of("\udcff\udcfe", "agent"), "undecodable header bytes hash too"


def test_putting_a_key_again_renews_its_ttl_and_its_place() -> None:
    clock = Clock()
    cache: Verdicts[str] = Verdicts(ttl_s=60, size=2, clock=clock)
    cache.put("a", "old")
    cache.put("b", "b")
    clock.now += 50
    cache.put("a", "new")  # a is now the most recently used, and lives until 50 + 60
    cache.put("c", "c")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("new", None, "c")
    clock.now += 59.9
    assert cache.get("a") == "new"
    clock.now += 0.1
    assert cache.get("a") is None
