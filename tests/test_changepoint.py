"""E-divisive means + t-test on synthetic series with known answers."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from eaglebot.history.changepoint import change_points, latest_shift, t_test_p


def _noisy(level: float, n: int, pct: float, rng: random.Random) -> list[float]:
    return [level * (1 + rng.uniform(-pct, pct) / 100) for _ in range(n)]


@pytest.mark.parametrize("at", [12, 20, 27])
def test_a_step_is_located_within_one_run_of_the_truth(at):
    rng = random.Random(at)
    series = _noisy(100, at, 2, rng) + _noisy(90, 35 - at, 2, rng)
    [cp] = [c for c in change_points(series) if abs(c.delta_pct) > 5]
    assert abs(cp.index - at) <= 1
    assert cp.delta_pct == pytest.approx(-10, abs=2) and cp.pvalue < 0.001


def test_a_slow_drift_of_23_pct_over_30_runs_is_a_shift_by_the_end():
    rng = random.Random(3)
    stable = _noisy(100, 20, 1, rng)
    drift = [100 * (1 - 0.23 * (i + 1) / 30) * (1 + rng.uniform(-0.01, 0.01)) for i in range(30)]
    sh = latest_shift(stable + drift)
    assert sh is not None and sh.delta_pct < -15
    assert 15 <= sh.start <= 30          # it began in the drift, not in the stable part
    assert sh.confidence > 0.999


def test_a_noisy_series_with_no_shift_never_moves_more_than_5_pct():
    for seed in range(25):
        rng = random.Random(seed)
        series = _noisy(100, 60, 3, rng)
        for n in range(8, 61):
            sh = latest_shift(series[:n])
            assert sh is None or abs(sh.delta_pct) <= 5, (seed, n, sh)


def test_welch_t_test_matches_the_textbook_value():
    # mean difference 2.5, variances 3.5, n 6 + 6: t = -2.315, df 10 -> two-sided p = 0.0432
    a = np.array([1, 2, 3, 4, 5, 6.0])
    assert t_test_p(a, a + 2.5) == pytest.approx(0.04317, abs=2e-4)
    assert t_test_p(a, a) == pytest.approx(1.0)
    assert math.isclose(t_test_p(np.array([5.0, 5.0]), np.array([5.0, 5.0])), 1.0)


def test_too_short_a_series_has_no_change_point():
    assert change_points([1.0, 2.0, 3.0, 10.0, 11.0]) == []
