"""The tuner's records as the JSON they are stored and answered in, typed: the spec of a sweep,
a bisect and a tuning (the `sweeps` row's spec; a tuning's is its run's inputs too), a point's
numbers and result row, a cell's flags, what `bench.batches` registers for a launch, a measured
cell, and a tuning's deployable result (`eagle tune apply` reads it back from the sweeps row).
Declared here so sweep.py, bisect.py, points.py and the tune modules pass these instead of
`dict[str, Any]`."""
from __future__ import annotations

from typing import Any, TypedDict


class SweepSpec(TypedDict):
    """What `eagle sweep` was asked: the swept inputs (in their order), the fixed ones, repeats, heatmap axes."""

    axes: dict[str, list[str]]
    order: list[str]
    fixed: dict[str, str]
    repeats: int | None
    heatmap: list[str] | None


class BisectSpec(TypedDict):
    """What `eagle bisect` was asked, and the changes it searches."""

    good: int
    bad: int
    leave: str
    repeats: int
    changes: list[str]
    metric: str


class PointNumbers(TypedDict):
    """A point's run, read back from the store: its metrics and its benchmark's repeats."""

    throughput: float | None
    ttft_ms: float | None
    accept: float | None
    spread: float | None
    repeats: int
    samples: list[float]


class PointJson(TypedDict):
    """A point's result row (the sweeps point's result; a sweep's `ranked` entries carry it)."""

    run_id: int
    status: str
    output_throughput: float | None
    median_ttft_ms: float | None
    accept_length: float | None
    throughput_spread: float | None
    repeats: int
    error: str | None


class Choice(TypedDict):
    """A cell as the relaunch playbook's inputs (speculative steps, topk, draft tokens)."""

    spec_steps: int
    spec_topk: int
    spec_draft_tokens: int


class TuneSpec(TypedDict):
    """What a tuning was asked: TuneRequest's fields, `fixed` (the playbook inputs every launch
    keeps) last."""

    playbook: str
    host: str
    batch_sizes: list[int]
    budget_s: float | None
    repeats: int
    apply: bool
    steps: list[int]
    topk: list[int]
    draft_tokens: list[int]
    max_launches: int | None
    flap_trace: list[str]
    flap_settle_s: float
    num_prompts: int
    input_len: int
    output_len: int
    fixed: dict[str, str]


class BatchNumbers(TypedDict, total=False):
    """`bench.batches` at one batch size."""

    tok_s: float
    samples: list[float]
    mad: float
    accept_length: float | None
    completed: int
    prompts: int


class Effective(TypedDict, total=False):
    """The server's speculative settings as its /server_info resolved them."""

    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None


class BenchBatches(TypedDict, total=False):
    """What `bench.batches` registers (its step's data): batch sizes as text keys, as JSON has them."""

    batch_sizes: dict[str, BatchNumbers]
    accept_length: float | None
    histogram: list[int] | None
    request_means: list[float]
    acceptance_source: str
    effective: Effective
    adaptive: bool
    sglang_version: str


class MeasurementJson(TypedDict):
    """A measured cell (a sweep point's result, a `tune.cell` step's data)."""

    cell: list[int]
    phase: str
    tok_s: dict[str, float]
    samples: dict[str, list[float]]
    accept_length: float | None
    histogram: list[int] | None
    request_means: list[float]
    run_ids: list[int]
    seconds: float


class CellJson(Choice, total=False):
    """A measured cell at one batch size in `eagle tune --json` (its prediction, when one was made)."""

    tok_s: float | None
    spread: float
    repeats: int
    phase: str
    run_ids: list[int]
    predicted_tok_s: float
    error_pct: float | None


class DeployJson(TypedDict):
    """The deployable result: static flags or adaptive steps, with the tok/s it expects."""

    mode: str
    choice: Choice
    adaptive_config: dict[str, Any] | None
    expected_tok_s: dict[str, float]
    why: str
    rejected: list[str]
    inputs: dict[str, Any]
    slots: dict[str, int]
