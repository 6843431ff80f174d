"""SIMULATED: how well an EAGLE-3 draft fits the hidden states the server feeds it.

Standard library only (it runs on the GPU host with whatever Python is there). A SIMULATED
draft folder may declare what its training saw in `SIMULATED-training.json` (the sim's ground
truth, the way a real draft's weights are): `{"trained_layer_outputs": [2, 30, 58],
"per_position_acc": [0.747, 0.70, 0.66]}`. The server then resolves its own capture points from
the draft's config with SGLang 0.5.23's Llama rule (llama.py: `layers_to_capture = [id + 1 ...]`,
default `[2, N//2, N-3]`; the forward captures what ENTERS layer b, the output of layer b - 1),
and every capture slot that differs from training costs acceptance by how far its layer is from
the trained one. Calibrated on a trained pair (8-layer Llama, draft on the outputs of layers
1, 3, 5, real SGLang 0.5.17 on an H200; docs/gpu-validation.md): accept length 3.43 as trained,
3.10 with 0,2,4 (each slot one layer off: -10%; bench_serving -6%), 2.55 with 0,1,2 (one, two
and three off: -26%; bench -22%), features zeroed 1.00, another sequence's features 1.17. So a
slot `gap` layers off keeps exp(-(gap / GAP_SCALE) ** 1.6) of the draft's skill (1 off: 0.985,
2: 0.947, 3: 0.922), never less than FLOOR (a layer of the right sequence still carries the
token's context: 28 off keeps 0.56), the embedding at most half (the token alone, no context);
the slots' product q scales position j's acceptance by q ** (j + 1), each position building on
the one before. A one-off list costs a few percent, which only the static gate and the draft's
own history can tell; the embedding and far layers leave position 1 far below training and the
later ones near zero (accept length ~1.1), the signature draft.probe calls `wrong inputs`.
Without the file the sim keeps its old model.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

FILE = "SIMULATED-training.json"
SERVING = 0.95          # serving prompts accept a little less than the training eval predicts


def points(ids: list[int] | None, n: int) -> list[int]:
    """SGLang 0.5.23 Llama: the layer outputs the server captures for these config ids."""
    raw = [v + 1 for v in ids] if ids is not None else [2, n // 2, n - 3]
    return [b - 1 for b in sorted({v for v in raw if 0 <= v < n})]


GAP_SCALE = 13.6        # fitted to the pair's accept lengths: 0,2,4 -9%, 0,1,2 -23% (see above)
FLOOR = 0.56


def slot_fit(trained: int, fed: int) -> float:
    """What one capture slot keeps of the draft's skill: neighbouring layers' residual streams are
    close (cosine 0.87-0.92 on the pair), far ones less, the embedding has none of the context the
    draft learned to read."""
    if trained == fed:
        return 1.0
    fit = max(FLOOR, math.exp(-(abs(trained - fed) / GAP_SCALE) ** 1.6))
    return min(fit, 0.5) if -1 in (trained, fed) else fit


@dataclass(frozen=True)
class Fit:
    trained: list[int]
    accuracy: list[float]
    fed: list[int]

    @property
    def quality(self) -> float:
        if len(self.fed) != len(self.trained):
            return 0.02                 # a real server would not even launch (the fc's width)
        q = 1.0
        for t, f in zip(sorted(self.trained), self.fed):
            q *= slot_fit(t, f)
        return q

    def positions(self, depth: int, tree: float) -> list[float]:
        """Acceptance of each draft position given the one before (`tree`: what topk > 1 adds)."""
        q = self.quality
        out = []
        for j in range(depth):
            a = self.accuracy[min(j, len(self.accuracy) - 1)] * SERVING * q ** (j + 1)
            out.append(1.0 - (1.0 - a) * (1.0 - tree))
        return out


def load(draft: str | None, n: int, ids: list[int] | None) -> Fit | None:
    if not draft:
        return None
    try:
        doc = json.loads((Path(draft).expanduser() / FILE).read_text())
    except (OSError, ValueError):
        return None
    trained, acc = doc.get("trained_layer_outputs"), doc.get("per_position_acc")
    if not isinstance(trained, list) or not isinstance(acc, list) or not acc:
        return None
    return Fit([int(v) for v in trained], [float(a) for a in acc], points(ids, n))
