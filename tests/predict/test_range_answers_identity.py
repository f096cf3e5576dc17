"""The identity cache `range_answers.parse` shares across reads: same cells as without it, and bounded."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.predict import range_answers


def _answer(nodes: int, value: str) -> list[dict[str, Any]]:
    return [
        {"metric": {"Hostname": f"n{n}", "gpu": str(g), "UUID": f"GPU-{n}-{g}"}, "values": [[60.0, value]]}
        for n in range(nodes)
        for g in range(2)
    ] + [{"metric": {"gpu": "0"}, "values": [[60.0, "1"]]}]  # no host: never a GPU, cached or not


def test_cached_identities_give_the_same_cells_across_reads() -> None:
    cache = range_answers.IdentityCache()
    for value in ("1.5", "2.5"):  # the second read finds every label set cached
        plain: dict[tuple[str, int, str], int] = {}
        cached: dict[tuple[str, int, str], int] = {}
        a = range_answers.parse(_answer(3, value), plain, grid_start=60.0, step=60.0, n_times=1)
        b = range_answers.parse(
            _answer(3, value), cached, grid_start=60.0, step=60.0, n_times=1, identities=cache
        )
        assert plain == cached
        assert len(cached) == 6
        np.testing.assert_array_equal(a.index, b.index)
        np.testing.assert_array_equal(a.value, b.value)
    assert len(cache.table()) == 7  # six GPUs' label sets and the host-less one


def test_the_cache_empties_past_its_limit() -> None:
    cache = range_answers.IdentityCache(limit=4)
    range_answers.parse(_answer(3, "1"), {}, grid_start=60.0, step=60.0, n_times=1, identities=cache)
    assert len(cache.table()) == 0
