"""The tuner's search (tuning/tune_search.py) against the SIMULATED per-batch-size landscape
(sim/sglang_pkg/sglang/_landscape.py), several seeds, seven batch sizes, the default grid of 83
cells: the search only sees what a launch would measure (median tok/s of 3 noisy repeats at each
batch size, the accept length, and a chain's acceptance histogram), and is judged against the
grid's true optimum, which it never sees. The end-to-end runs through the real server and the CLI
are in test_tune_sim.py; this is the many-seed check of the algorithm itself."""
from __future__ import annotations

import asyncio
import importlib.util
import random
import statistics
import sys
from pathlib import Path

import pytest

from eaglebot.tuning import tune_adaptive, tune_model as M, tune_search as S

ROOT = Path(__file__).resolve().parents[1]
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
SEEDS = [0, 1, 2, 3, 4, 5, 6, 7]


def _landscape():
    name = "sim_landscape_for_tests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "src/eaglebot/sim/sglang_pkg/sglang/_landscape.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _measure(ls, noise: float, repeats: int = 3, seed: int = 0):
    L = _landscape()
    rng = random.Random(seed)

    async def measure(cell, phase):
        pos = L.positions(ls, cell)
        tok, samples = {}, {}
        for b in BATCH_SIZES:
            true = L.tok_s(ls, b, cell)
            samples[b] = [true * (1 + rng.uniform(-noise, noise)) for _ in range(repeats)]
            tok[b] = statistics.median(samples[b])
        means = [sum(k * c for k, c in enumerate(h)) / sum(h) for h in
                 (L.histogram(200, L.positions(ls, cell, L.prompt_scale(ls, f"p{i}"))) for i in range(32))]
        return M.Measurement(cell, tok, samples, L.accept_length(pos), L.histogram(20000, pos), means)
    return measure


def _tune(seed: int, noise: float = 0.01):
    L = _landscape()
    ls = L.make(seed)
    grid = M.grid(list(range(1, 9)), [1, 2, 4, 8], [4, 8, 16, 32])
    plan = S.Plan(BATCH_SIZES, grid, max_launches=len(grid) // 5, reserve=1)
    return ls, grid, asyncio.run(S.search(plan, _measure(ls, noise, seed=seed)))


def test_the_landscape_has_a_different_optimum_at_different_batch_sizes():
    L = _landscape()
    assert len(L.cells()) == 83 and L.cells() == M.grid(list(range(1, 9)), [1, 2, 4, 8], [4, 8, 16, 32])
    for seed in SEEDS:
        ls = L.make(seed)
        optima = [L.best(ls, b)[0] for b in BATCH_SIZES]
        assert len(set(optima)) >= 3, (seed, optima)
        assert optima[0][1] > 1 and optima[-1][1] == 1       # a tree wins alone, a chain in a full batch
        assert optima[0][0] >= optima[-1][0]                # and fewer steps pay off at batch 64


@pytest.mark.parametrize("seed", SEEDS)
def test_the_choice_is_within_2pct_of_the_grids_best_at_6_of_7_batch_sizes_in_a_fifth_of_the_launches(seed):
    L = _landscape()
    ls, grid, res = _tune(seed)
    close = []
    for b in BATCH_SIZES:
        _, best = L.best(ls, b, grid)
        chosen = res.best(b)
        close.append(L.tok_s(ls, b, chosen.cell) >= 0.98 * best)
    assert sum(close) >= 6, (seed, close, res.order)
    assert res.launches <= len(grid) // 5 - 1          # one launch of the fifth is the flap test's
    assert res.stopped


@pytest.mark.parametrize("seed", SEEDS)
def test_predicted_chains_are_within_5pct_of_what_verifying_them_measured(seed):
    L = _landscape()
    ls, _, res = _tune(seed)
    checked = [(c, b) for c, m in res.measured.items() if m.phase != "profile" and c in res.predicted
               for b in BATCH_SIZES]
    assert checked, "the search verified no predicted chain"
    within = [abs(res.predicted[c][b] / res.measured[c].tok_s[b] - 1) <= 0.05 for c, b in checked]
    assert sum(within) >= 0.9 * len(within)
    # and against the truth too, every chain at every batch size
    errors = [abs(p[b] / L.tok_s(ls, b, c) - 1) for c, p in res.predicted.items() for b in BATCH_SIZES]
    assert sum(e <= 0.05 for e in errors) >= 0.9 * len(errors)


def test_a_shorter_chain_is_predicted_from_the_longest_ones_histogram():
    prefix = M.prefix_acceptance([10, 20, 30, 40])      # 100 verifies: accepted >= 1: 90, >= 2: 70, >= 3: 40
    assert prefix == [0.9, 0.7, 0.4]
    assert M.chain_accept(prefix, 2) == pytest.approx(2.6) and M.chain_accept(prefix, 3) == pytest.approx(3.0)
    assert M.chain_accept(M.geometric_prefix(2.5, 3), 3) == pytest.approx(2.5, abs=1e-6)


def test_the_adaptive_config_holds_its_tier_at_the_profiled_acceptance_and_falls_back_when_it_sags():
    L = _landscape()
    ls, grid, res = _tune(3)
    from eaglebot.tuning.tune_report import best_chains

    tops = {b: c[0] for b, c in best_chains(res, BATCH_SIZES).items()}
    plan = tune_adaptive.build(res.chains, tops, list(range(1, 9)))
    assert plan.config["1"]["candidate_steps"][-1] == tops[1]
    fallback = [s for s in plan.slots if s.fallback is not None]
    assert fallback, plan.summary()
    for s in plan.slots:
        switches, tier = tune_adaptive.replay(plan, res.chains, s.batch)
        assert switches == 0 and tier == s.top, (s.batch, plan.summary())
    for s in fallback:
        switches, tier = tune_adaptive.replay(plan, res.chains, s.batch, f=0.6)
        assert tier == s.fallback and switches <= 1, (s.batch, plan.summary())


def test_default_thresholds_flap_where_the_tuned_ones_do_not():
    """SGLang's own defaults put the rise threshold inside the EMA band at batch 1: the slot flips."""
    ls, grid, res = _tune(3)
    flappy = tune_adaptive.AdaptivePlan({"1": {"candidate_steps": [3, 5], "down_hysteresis": 0.0}}, 3)
    switches, _ = tune_adaptive.replay(flappy, res.chains, 1)
    assert switches > 20


def test_one_profiled_depth_is_said_as_a_caveat_and_three_are_not():
    """A budget that fits one launch (a cold real launch: 160 s of 300) profiles one depth: its cost
    per step is all the model has, so the report says the shorter chains' predictions lack their
    cheaper drafts. With the default plan's three profile depths there is no such caveat."""
    from eaglebot.tuning import tune_report as R
    L = _landscape()
    ls = L.make(0)
    grid = M.grid([1, 2, 3, 4], [1], [4, 8])
    one = asyncio.run(S.search(S.Plan([1, 4], grid, max_launches=1), _measure(ls, 0.01)))
    assert [c[0] for c in one.order] == [4]
    words = R.caveat(one)
    assert words is not None and words.startswith("one chain depth profiled (steps=4)")
    three = asyncio.run(S.search(S.Plan([1, 4], grid, max_launches=4), _measure(ls, 0.01)))
    assert len({c[0] for c in three.order}) >= 3 and R.caveat(three) is None
