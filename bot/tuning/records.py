"""The tuner's records as the JSON they are stored and answered in, typed: the spec a tuning was
asked (the `sweeps` row's spec and the tune run's inputs), a cell's flags, what `bench.batches`
registers for a launch, a measured cell, and the deployable result (`eagle tune apply` reads it
back from the sweeps row). Declared here so tune.py, tune_record.py, tune_report.py and
tune_apply.py pass these instead of `dict[str, Any]`."""
from __future__ import annotations

from typing import Any, TypedDict


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
