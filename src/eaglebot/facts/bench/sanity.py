"""Is a benchmark's result worth recording? (pure)

Two silent degradations a throughput number hides: speculative decoding whose draft model
accepts nothing (accept length ~1.0: a wrong draft path or architecture, so every step
verifies one token and the "EAGLE" run is plain decoding with extra work), and a run that
completed only part of its requests (the numbers describe the part that finished). NGRAM is
the exception to the first: its drafts come from n-gram repeats in each request's own context,
which the random prompts of a benchmark do not have, so ~1.0 there is a warning; the greedy
probe that follows (spec.live) judges whether it speculates.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_ACCEPT_LENGTH = 1.05
MIN_COMPLETED_FRACTION = 0.9


@dataclass
class Sanity:
    failure: str | None = None
    warnings: list[str] = field(default_factory=list)


def check(completed: list[int], requested: int, *, speculative: str | None, accept_length: float | None,
          min_accept_length: float = MIN_ACCEPT_LENGTH,
          min_completed_fraction: float = MIN_COMPLETED_FRACTION) -> Sanity:
    """`completed`: requests completed per run; `speculative`: the server's speculative_algorithm or None."""
    s = Sanity()
    worst = min(completed) if completed else 0
    if worst < requested:
        pct = 100.0 * worst / requested if requested else 0.0
        line = f"only {worst} of {requested} benchmark requests completed ({pct:.0f}%)"
        if worst < min_completed_fraction * requested:
            s.failure = f"{line}, under {min_completed_fraction:.0%}: the numbers would describe the part that finished"
        else:
            s.warnings.append(f"{line}; the numbers describe the part that finished")
    if speculative:
        if accept_length is None:
            s.warnings.append(f"speculative decoding ({speculative}) is on but the accept length is unknown")
        elif accept_length <= min_accept_length and speculative.upper() == "NGRAM":
            # n-gram drafts come from repeats in the request's own context: random ids have none
            s.warnings.append(f"accept length {accept_length:.2f} with NGRAM on this benchmark: its drafts come from "
                              f"n-gram repeats in each request's context, which random prompts do not have; the "
                              f"greedy probe after it says whether speculation is on")
        elif accept_length <= min_accept_length and s.failure is None:
            s.failure = (f"accept length {accept_length:.2f} with {speculative} (<= {min_accept_length:g}): the "
                         f"draft model accepts nothing: check the draft path and algorithm")
    return s
