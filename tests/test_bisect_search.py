"""The bisection's search over n changes, with a measure that knows the truth (pure)."""
from __future__ import annotations

import pytest

from eaglebot.tuning.bisect import bound, search


def measurer(bad_when):
    calls: list[frozenset[int]] = []

    async def measure(subset: set[int]) -> tuple[float, str]:
        calls.append(frozenset(subset))
        verdict = "bad" if bad_when(subset) else "good"
        return (70.0 if verdict == "bad" else 100.0), verdict

    return measure, calls


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 8])
async def test_a_single_culprit_is_named_within_ceil_log2_n_plus_2_points(n):
    for culprit in range(n):
        measure, calls = measurer(lambda s, c=culprit: c in s)
        found, kind = await search(n, measure)
        assert (found, kind) == ([culprit], "single")
        assert len(set(calls)) + 1 <= bound(n)      # + 1: the control point (GOOD's configuration)


async def test_two_changes_bad_only_together_are_reported_as_an_interaction():
    measure, _ = measurer(lambda s: {1, 4} <= s)
    found, kind = await search(6, measure)
    assert kind == "interaction" and sorted(found) == [1, 4]


async def test_nothing_reproducing_the_drop_blames_nobody():
    measure, _ = measurer(lambda s: False)
    assert await search(6, measure) == ([], "none")
