"""Generate the labelled regression corpus (`corpus.json`) with a fixed seed.

    python tests/data/regressions/generate.py        # rewrites corpus.json next to this file

Each series is one metric of one playbook + host, one value per nightly run (None: that
night's run failed and recorded nothing), labelled with where real changes begin. The
families are the shapes a nightly benchmark of an inference server shows: noise only
(±1-8%), steps of 3-40% up and down, slow drifts, single outliers, outlier bursts, missing
nights, bimodal noise (two performance modes, e.g. a flaky NCCL path), heavy-tailed noise
(Student t, 2.5 degrees of freedom), level shifts that recover, and drops tied to a GPU
health change (recorded as a gpu.health step would record it). Half the series are of a
lower-is-better metric (TTFT): there a rise is the regression.

Three families are histories with a few low nights before a lasting 8-25% step (issue 42),
each with a quiet control (`-quiet`: the same kind of history, no step): `early-low`, 1-3
low nights (20-40% worse: a cold first night, a bench from before EAGLE was on) at the
start; `dips`, 1-3 separated one-night dips (10-30% worse) before the step; `reference`, a
run or two of another configuration class in the middle (the no-speculation reference, ~36%
worse, sometimes redone: `classes` names its nights, "none"; every other night is "EAGLE3").

Labels: `changes` lists each real change: `start` (index of the first run on the new level),
`end` (last index of a drift's ramp, else start), `size_pct` (signed, of the metric's value)
and `worse` (for the metric's direction). Outliers and bursts are not changes. Every series
is in `split` "tune" or "test": the detector is tuned on "tune" and reported on "test".
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SEED = 20261201
OUT = Path(__file__).with_name("corpus.json")


def _noise(rng: random.Random, kind: str, sd: float) -> float:
    if kind == "heavy":
        # Student t with 2.5 dof, scaled to the same median absolute size as a normal of sd
        z = rng.gauss(0, 1) / ((sum(rng.gauss(0, 1) ** 2 for _ in range(5)) / 5) ** 0.5 + 1e-9)
        return z * sd * 0.8
    return rng.gauss(0, sd)


def _series(rng: random.Random, sid: int, family: str) -> dict[str, Any]:
    n = rng.randint(30, 120)
    better = "higher" if sid % 2 == 0 else "lower"
    base = rng.uniform(800, 1200) if better == "higher" else rng.uniform(30, 80)
    sd = rng.uniform(0.005, 0.025)
    noise = "normal"
    level = [1.0] * n                   # multiplicative level per night
    changes: list[dict[str, Any]] = []
    spikes: dict[int, float] = {}
    missing: set[int] = set()
    health: dict[int, dict[str, Any]] = {}
    classes: dict[int, str] = {}
    worse_sign = -1.0 if better == "higher" else 1.0

    def step(start: int, pct: float, end: int | None = None, kind: str = "step") -> None:
        end = start if end is None else end
        ramp = end - start + 1
        for i in range(start, n):
            frac = min(1.0, (i - start + 1) / ramp)
            level[i] *= 1.0 + pct / 100.0 * frac
        changes.append({"start": start, "end": end, "size_pct": round(pct, 2), "kind": kind,
                        "worse": (pct < 0) == (better == "higher")})

    onset = rng.randint(max(12, n // 3), max(13, n - 8))
    if family == "noise":
        sd = rng.uniform(0.01, 0.08) / 2
    elif family == "step":
        size = 3.0 * (40.0 / 3.0) ** rng.random()
        step(onset, size * rng.choice((-1.0, 1.0)))
    elif family == "drift":
        length = rng.randint(10, 30)
        n = max(n, onset + length + 8)
        level = [1.0] * n
        sd = rng.uniform(0.004, 0.015)
        step(onset, worse_sign * rng.uniform(10, 25), min(n - 1, onset + length - 1), "drift")
    elif family == "outlier":
        spikes[rng.randint(10, n - 2)] = worse_sign * rng.uniform(15, 40)
    elif family == "burst":
        at = rng.randint(10, n - 8)
        for k in range(rng.randint(2, 3)):
            spikes[at + 2 * k] = worse_sign * rng.uniform(10, 30)
    elif family == "missing":
        step(onset, worse_sign * rng.uniform(8, 25))
        missing = {i for i in range(6, n) if rng.random() < 0.15} | {onset - 1}
    elif family == "bimodal":
        gap, p = rng.uniform(0.04, 0.08), rng.uniform(0.2, 0.5)
        for i in range(n):
            if rng.random() < p:
                level[i] *= 1.0 + worse_sign * gap
        if sid % 4 < 2:
            step(onset, worse_sign * rng.uniform(12, 25))
    elif family == "heavy":
        noise, sd = "heavy", rng.uniform(0.008, 0.02)
        if sid % 4 < 2:
            step(onset, worse_sign * rng.uniform(10, 25))
    elif family == "recover":
        length = rng.randint(3, 10)
        n = max(n, onset + length + 10)
        level = [1.0] * n
        pct = worse_sign * rng.uniform(10, 30)
        step(onset, pct, kind="shift")
        back = onset + length
        for i in range(back, n):
            level[i] /= 1.0 + pct / 100.0
        changes.append({"start": back, "end": back, "size_pct": round(-pct / (1 + pct / 100), 2),
                        "kind": "recovery", "worse": False})
    elif family == "gpu":
        gpu = str(rng.randint(0, 7))
        step(onset, worse_sign * rng.uniform(8, 20), kind="gpu-health")
        for i in range(onset, n):
            health[i] = {gpu: {"verdict": "warn", "reasons": ["HW thermal slowdown"]}}
    elif family.split("-")[0] in ("early", "dips", "reference"):
        n = rng.randint(20, 80)
        level = [1.0] * n
        onset = rng.randint(10, n - 6)
        lows = rng.randint(1, 3)
        if family.startswith("early"):
            for i in range(lows):
                spikes[i] = worse_sign * rng.uniform(20, 40)
        elif family.startswith("dips"):
            for i in sorted(rng.sample(range(3, onset - 1, 2), min(lows, (onset - 4) // 2))):
                spikes[i] = worse_sign * rng.uniform(10, 30)
        else:                             # a reference, sometimes redone a few nights later
            at = rng.randint(4, onset - 4)
            for i in (at, at + rng.randint(1, 3))[:rng.randint(1, 2)]:
                classes[i] = "none"
        if not family.endswith("-quiet"):
            step(onset, worse_sign * rng.uniform(8, 25))
    values: list[float | None] = []
    for i in range(n):
        if i in missing:
            values.append(None)
            continue
        v = base * level[i] * (1.0 + _noise(rng, noise, sd))
        if i in spikes:
            v *= 1.0 + spikes[i] / 100.0
        if classes.get(i) == "none":
            v *= 1.0 + worse_sign * 0.36     # the target alone: no speculative speed-up
        values.append(round(v, 3))
    return {"id": sid, "family": family, "split": "tune" if rng.random() < 0.4 else "test",
            "better": better, "noise_sd_pct": round(100 * sd, 2), "values": values,
            "outliers": sorted(spikes), "health": {str(k): v for k, v in sorted(health.items())},
            "changes": changes, **({"classes": {str(k): v for k, v in sorted(classes.items())}} if classes else {})}


FAMILIES = {"noise": 24, "step": 30, "drift": 10, "outlier": 10, "burst": 8, "missing": 10, "bimodal": 8,
            "heavy": 10, "recover": 8, "gpu": 8,
            "early-low": 12, "dips": 12, "reference": 12, "early-low-quiet": 8, "dips-quiet": 8, "reference-quiet": 8}


def generate() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    out, sid = [], 0
    for family, count in FAMILIES.items():
        for _ in range(count):
            out.append(_series(rng, sid, family))
            sid += 1
    return out


if __name__ == "__main__":
    corpus = generate()
    OUT.write_text(json.dumps({"seed": SEED, "generator": "tests/data/regressions/generate.py",
                               "series": corpus}, separators=(",", ":")) + "\n")
    n_points = sum(len(s["values"]) for s in corpus)
    print(f"{OUT}: {len(corpus)} series, {n_points} nights")
