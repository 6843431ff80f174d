"""A finished search, judged: the choice per batch size, the best single static config, the
deployable result, the gains and the JSON of `eagle tune --json` (pure: no host, no store).

Per batch size the choice is the measured cell with the highest median tok/s (a prediction is
never chosen unmeasured). The best single static config is the measured cell whose tok/s,
relative to each batch size's best, is highest on average. The deployable result is SGLang's
adaptive steps (one slot per batch size, the best chain of each) when it beats that static
config on average by more than the noise, every batch size's best chain differs from another's,
and the flap test passes; otherwise the static config's flags.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from eaglebot.tuning.records import CellJson, Choice, DeployJson
from eaglebot.tuning.tune_model import Cell, Measurement, label
from eaglebot.tuning.tune_search import SearchResult


def choice_json(cell: Cell) -> Choice:
    return {"spec_steps": cell[0], "spec_topk": cell[1], "spec_draft_tokens": cell[2]}


def efficiency(res: SearchResult, sizes: list[int], tok: dict[int, float]) -> float:
    """Mean over the batch sizes of tok/s relative to each size's best measured (1.0: best everywhere)."""
    ratios = []
    for b in sizes:
        best = res.best(b)
        if best and best.tok_s[b] > 0:
            ratios.append(tok.get(b, 0.0) / best.tok_s[b])
    return statistics.fmean(ratios) if ratios else 0.0


def static_best(res: SearchResult, sizes: list[int]) -> Measurement | None:
    full = [m for m in res.measured.values() if all(m.tok_s.get(b, 0) > 0 for b in sizes)]
    return max(full, key=lambda m: efficiency(res, sizes, m.tok_s)) if full else None


def best_chains(res: SearchResult, sizes: list[int]) -> dict[int, Cell]:
    """The best chain per batch size: measured where measured, else predicted."""
    out: dict[int, Cell] = {}
    for b in sizes:
        cands: dict[Cell, float] = {c: p[b] for c, p in res.predicted.items() if b in p}
        for c, m in res.measured.items():
            if c[1] == 1 and m.tok_s.get(b):
                cands[c] = m.tok_s[b]
        if cands:
            out[b] = max(cands, key=lambda c: cands[c])
    return out


def rel_noise(res: SearchResult) -> float:
    noise = [m.rel_noise() for m in res.measured.values()]
    return statistics.median(noise) if noise else 0.0


@dataclass
class Deploy:
    mode: str                                  # static | adaptive
    cell: Cell                                 # static flags, or the adaptive launch's initial chain
    adaptive_config: dict[str, Any] | None = None
    expected: dict[int, float] = field(default_factory=dict)   # tok/s per batch size
    why: str = ""
    rejected: list[str] = field(default_factory=list)
    slots: dict[int, int] = field(default_factory=dict)    # adaptive: batch size -> its slot's key

    def inputs(self) -> dict[str, Any]:
        """The playbook inputs that deploy it."""
        out: dict[str, Any] = dict(choice_json(self.cell))
        if self.adaptive_config is not None:
            out["spec_adaptive"] = self.adaptive_config
        return out

    @classmethod
    def from_json(cls, d: DeployJson) -> Deploy:
        """The deployable result as a tuning run stored it (`eagle tune apply` reads it back)."""
        ch = d["choice"]
        return cls(d["mode"], (ch["spec_steps"], ch["spec_topk"], ch["spec_draft_tokens"]), d.get("adaptive_config"),
                   {int(b): float(v) for b, v in (d.get("expected_tok_s") or {}).items()}, d.get("why") or "")

    def as_json(self) -> DeployJson:
        return {"mode": self.mode, "choice": choice_json(self.cell), "adaptive_config": self.adaptive_config,
                "expected_tok_s": {str(b): round(v, 2) for b, v in sorted(self.expected.items())},
                "why": self.why, "rejected": self.rejected, "inputs": self.inputs(),
                "slots": {str(b): k for b, k in sorted(self.slots.items())}}


def cell_json(m: Measurement, b: int, predicted: dict[Cell, dict[int, float]]) -> CellJson:
    pred = predicted.get(m.cell, {}).get(b)
    tok = m.tok_s.get(b)
    ch = choice_json(m.cell)
    out = CellJson(spec_steps=ch["spec_steps"], spec_topk=ch["spec_topk"], spec_draft_tokens=ch["spec_draft_tokens"],
                   tok_s=round(tok, 2) if tok is not None else None, spread=round(m.spread(b), 2),
                   repeats=len(m.samples.get(b) or []), phase=m.phase, run_ids=m.run_ids)
    if pred is not None and m.phase != "profile":
        out["predicted_tok_s"] = round(pred, 2)
        out["error_pct"] = round(100 * (pred / tok - 1), 2) if tok else None
    return out


def caveat(res: SearchResult) -> str | None:
    """What the predictions could not know: with one chain depth profiled (a budget that fit one
    launch) a step's cost is the same at every depth, so shorter chains get no credit for their
    cheaper drafts, and the choice leans to the chain profiled."""
    depths = sorted({d for pts in (res.chains.eff.values() if res.chains else []) for d, _ in pts})
    if len(depths) != 1:
        return None
    return (f"one chain depth profiled (steps={depths[0]}): shorter chains are predicted at its cost per step, "
            "without the saving of their shorter drafts; a budget for 3 profile launches measures that cost")


def report(res: SearchResult, sizes: list[int], deploy: Deploy | None, *, current: Measurement | None,
           grid_launches: int, extra_launches: int = 0) -> dict[str, Any]:
    static = static_best(res, sizes)
    per: dict[str, Any] = {}
    for b in sizes:
        best = res.best(b)
        if best is None:
            per[str(b)] = {"choice": None, "tok_s": None, "spread": None, "measured": [], "predicted": []}
            continue
        measured = sorted((cell_json(m, b, res.predicted) for m in res.measured.values()
                           if m.tok_s.get(b) is not None),
                          key=lambda c: -(c["tok_s"] or 0))
        predicted = sorted((CellJson(spec_steps=c[0], spec_topk=c[1], spec_draft_tokens=c[2], tok_s=round(p[b], 2))
                            for c, p in res.predicted.items() if b in p), key=lambda c: -(c.get("tok_s") or 0))
        entry: dict[str, Any] = {
            "choice": choice_json(best.cell), "tok_s": round(best.tok_s[b], 2), "spread": round(best.spread(b), 2),
            "repeats": len(best.samples.get(b) or []), "measured": measured, "predicted": predicted,
            "cells_measured": len(measured), "cells_predicted": len(predicted)}
        if current is not None and current.tok_s.get(b):
            entry["current_tok_s"] = round(current.tok_s[b], 2)
            entry["gain_vs_current_pct"] = round(100 * (best.tok_s[b] / current.tok_s[b] - 1), 2)
        if static is not None and static.tok_s.get(b):
            entry["static_tok_s"] = round(static.tok_s[b], 2)
            entry["gain_vs_static_pct"] = round(100 * (best.tok_s[b] / static.tok_s[b] - 1), 2)
        if deploy is not None and deploy.expected.get(b):
            entry["deployed_tok_s"] = round(deploy.expected[b], 2)
        per[str(b)] = entry
    checked = [c for e in per.values() for c in e["measured"] if c.get("error_pct") is not None]
    within = [c for c in checked if abs(c["error_pct"]) <= 5.0]
    return {
        "batch_sizes": per,
        "launches": res.launches + extra_launches, "grid_launches": grid_launches,
        "search_launches": res.launches,
        "cells_measured": len(res.measured), "cells_predicted": len(res.predicted),
        "prediction_checks": {"checked": len(checked), "within_5pct": len(within)},
        "static_best": ({"choice": choice_json(static.cell), "label": label(static.cell),
                         "tok_s": {str(b): round(static.tok_s[b], 2) for b in sizes if static.tok_s.get(b)}}
                        if static else None),
        "current": ({"choice": choice_json(current.cell),
                     "tok_s": {str(b): round(v, 2) for b, v in sorted(current.tok_s.items())}} if current else None),
        "deploy": deploy.as_json() if deploy else None,
        "stopped": res.stopped, "model_source": res.model_source, "caveat": caveat(res),
        "noise_pct": round(100 * rel_noise(res), 2),
        "failed": [{**choice_json(c), "reason": why} for c, why in res.failed.items()],
    }
