"""Is speculative decoding really on, and is it still lossless? (pure)

The field's worst outcome, for every method (EAGLE, EAGLE3, NEXTN/MTP, STANDALONE, DFLASH, NGRAM),
is an accept length of about 1.0 on a healthy server with correct outputs. `really_on` judges one
reading of a running server, and fails naming each check that broke:
- `/server_info` reports the resolved `speculative_algorithm` and steps; the live value is
  `internal_states[i]` (0.5.23 builds it from the resolved config plus post-publish overrides, so
  an adaptive tier of 0, "a zero-step candidate disables drafting", shows there). NGRAM's steps are
  SGLang's accounting (draft tokens // BFS breadth: 0 for 8 draft tokens under the default breadth
  10) and it drafts all the same: 0 is not "off" there;
- the per-request histogram of accepted drafts (`spec_correct_drafts_histogram`, 0.5.17 also
  `spec_accept_histogram`) has mass beyond entry 0;
- the accept length is above MIN_ACCEPT_LENGTH (1.05, bench.sanity's);
- where this draft has a history (an earlier reading under the same settings), at least
  MIN_OWN_SHARE of it.
Dummy weights (`load_format: dummy`) legitimately accept nothing: the verdict is `unknown (dummy
weights)`, not a failure, as draft.probe says.

`lossy` lists what voids losslessness (REFERENCE "Speculative methods and releases"):
`SGLANG_SIMULATE_ACC_LEN` in the server's environment, and an accept threshold below 1
(`--speculative-accept-threshold-single` / `-acc`, also settable at runtime through
`POST /set_internal_state`, which `internal_states` then shows).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from eaglebot.facts.bench.sanity import MIN_ACCEPT_LENGTH
from eaglebot.facts.spec.draft_accept import Stats

MIN_OWN_SHARE = 0.80     # of this draft's own earlier accept length under the same settings
LOSSY_ENV = ("SGLANG_SIMULATE_ACC_LEN",)
THRESHOLDS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
ON, OFF, DUMMY, UNKNOWN = "on", "off", "unknown (dummy weights)", "unknown"


def _below_one(value: object) -> float | None:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if v < 1.0 else None


def lossy_launch(flags: Mapping[str, str | None], env: Mapping[str, str]) -> list[str]:
    """The lossless-voiding knobs of a launch (its flags, the env it is given), one phrase each."""
    out = [f"{k}={env[k]} in the server's environment (fakes the acceptance)" for k in LOSSY_ENV if k in env]
    for key in THRESHOLDS:
        flag = "--" + key.replace("_", "-")
        if flag in flags and (v := _below_one(flags[flag])) is not None:
            out.append(f"{flag} {v:g} (below 1: accepts drafts the target rejected)")
    return out


def lossy_running(env: Mapping[str, str] | None, info: Mapping[str, Any] | None) -> list[str]:
    """The lossless-voiding knobs of a running server: its process environment, and the thresholds of
    /server_info (the launch's) and of each `internal_states` entry (live: /set_internal_state)."""
    out = [f"{k}={env[k]} in the server's environment (fakes the acceptance)" for k in LOSSY_ENV
           if env is not None and k in env]
    if info is None:
        return out
    for key in THRESHOLDS:
        if (v := _below_one(info.get(key))) is not None:
            out.append(f"{key}={v:g} at launch (below 1: accepts drafts the target rejected)")
    for i, st in enumerate(_states(info)):
        for key in THRESHOLDS:
            if (v := _below_one(st.get(key))) is not None and _below_one(info.get(key)) != v:
                out.append(f"internal_states[{i}].{key}={v:g}, changed at runtime (POST /set_internal_state; "
                           f"below 1: accepts drafts the target rejected)")
    return out


def _states(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    states = info.get("internal_states")
    return [s for s in states if isinstance(s, dict)] if isinstance(states, list) else []


def resolved(info: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """(algorithm, steps) the server runs: the live internal state's where it has them, else the launch's."""
    algorithm, steps = info.get("speculative_algorithm"), info.get("speculative_num_steps")
    for st in _states(info)[:1]:
        algorithm = st.get("speculative_algorithm", algorithm)
        steps = st.get("speculative_num_steps", steps)
    return (str(algorithm) if algorithm else None), (int(steps) if isinstance(steps, int) else None)


@dataclass
class Verdict:
    verdict: str                                   # on | off | unknown (dummy weights) | unknown
    failures: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        if self.failures:
            return "speculation is not really on: " + "; ".join(self.failures)
        n = self.numbers
        if self.verdict == DUMMY:
            return (f"speculation {n.get('algorithm')} steps={n.get('steps')} runs on dummy weights "
                    f"(load_format=dummy): acceptance {n.get('accept_length')} says nothing about the draft")
        if self.verdict == UNKNOWN:
            return f"speculation {n.get('algorithm')} steps={n.get('steps')}: no per-request speculative stats came back"
        own = f", {n['own_share']:.0%} of its own {n['own_accept_length']:.2f}" if "own_share" in n else ""
        return (f"speculation is on: {n.get('algorithm')} steps={n.get('steps')}, accept length "
                f"{n.get('accept_length')}, histogram {n.get('histogram')}{own}")


def really_on(info: Mapping[str, Any], stats: Stats | None, own: float | None = None) -> Verdict:
    """One reading: /server_info, a few greedy prompts' per-request stats (`stats`; None: none came
    back), and `own`, this draft's earlier accept length under the same settings (None: no history)."""
    algorithm, steps = resolved(info)
    accept_length = stats.accept_length if stats is not None else None
    hist = stats.histogram if stats is not None else []
    n: dict[str, Any] = {"algorithm": algorithm, "steps": steps, "histogram": hist,
                         "accept_length": round(accept_length, 3) if accept_length is not None else None}
    fails: list[str] = []
    if not algorithm:
        fails.append("/server_info reports no speculative_algorithm")
    elif steps == 0 and algorithm.upper() != "NGRAM":   # NGRAM's steps: draft tokens // BFS breadth, accounting only
        fails.append("/server_info reports speculative_num_steps=0 (an adaptive step-0 tier: drafting disabled)")
    elif steps is None and algorithm.upper() != "NGRAM":
        fails.append(f"/server_info reports {algorithm} without speculative_num_steps")
    if info.get("load_format") == "dummy":
        return Verdict(OFF if fails else DUMMY, fails, n)
    if stats is None or not stats.verify_ct:
        return Verdict(OFF if fails else UNKNOWN, fails, n)
    if hist and sum(hist[1:]) == 0:
        fails.append(f"the per-request histogram has no mass beyond 0 accepted drafts ({hist})")
    if accept_length is not None and accept_length <= MIN_ACCEPT_LENGTH:
        fails.append(f"accept length {accept_length:.2f} (<= {MIN_ACCEPT_LENGTH:g})")
    if own is not None and accept_length is not None and own > 0:
        n.update(own_accept_length=round(own, 3), own_share=round(accept_length / own, 3))
        if accept_length < MIN_OWN_SHARE * own:
            fails.append(f"accept length {accept_length:.2f} is {accept_length / own:.0%} of this draft's own "
                         f"{own:.2f} under the same settings (< {MIN_OWN_SHARE:.0%})")
    return Verdict(OFF if fails else ON, fails, n)
