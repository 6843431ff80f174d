"""SIMULATED SGLang: what differs between the releases the simulator speaks, each from the real one.

0.5.17 is held to a REAL server's captures on an H200 (tests/fixtures/sglang/0.5.17/h200-real/:
its /server_info, a /generate meta_info, its log); 0.5.23 to its wheel's source (tests/fixtures/
sglang/0.5.23/: the launch table, meta_info_keys.json read from tokenizer_manager.py). The launch
tables themselves are srt/server_args-<version>.json.gz. tests/test_sglang_fidelity.py keeps these true.

Stand-alone (standard library only): it runs on the GPU host with whatever Python is there.
"""
from __future__ import annotations

from typing import Any

# Parser options that are not ServerArgs fields, so /server_info (dataclasses.asdict) never has them.
NOT_FIELDS = {"0.5.17": frozenset({"collect_tokens_histogram", "config", "prefill_round_robin_balance"}),
              "0.5.23": frozenset()}
# ServerArgs fields with no launch option, in /server_info all the same.
FIELDS_WITHOUT_OPTION = {"0.5.17": {"custom_sigquit_handler": None, "stat_loggers": None,
                                    "uses_mamba_radix_cache": False},
                         "0.5.23": {}}
# /generate meta_info of a speculative request: tokenizer_manager.py's spec metrics. 0.5.17 still
# writes the backward-compat aliases its source marks "remove in next release"; 0.5.23 does not.
SPEC_META_ALIASES = {"0.5.17": ("spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"),
                     "0.5.23": ()}


def server_info_fields(version: str, args: dict[str, Any]) -> dict[str, Any]:
    """The ServerArgs part of /server_info: every field, as the parser left it after resolution."""
    out = {k: v for k, v in args.items() if k not in NOT_FIELDS[version]}
    out.update(FIELDS_WITHOUT_OPTION[version])
    return out


def server_info_top(version: str, launch_command: str, max_total_tokens: int, context_len: int) -> dict[str, Any]:
    """/server_info's keys beside the fields (http_server.py `server_info()` of each release)."""
    scheduler = {"status": "ready", "max_total_num_tokens": max_total_tokens, "max_req_input_len": context_len - 6}
    startup = {"load_weight": 0.3, "kv_cache_allocation": 0.05, "scheduler_e2e": 0.4}
    if version == "0.5.17":
        return {**scheduler, "startup_time": startup, "kv_events": None}
    return {**scheduler, "launch_command": launch_command, "startup_time": startup, "frontend": "python"}


# POST /set_internal_state {"server_args": {...}}: Scheduler.set_internal_state's allow-list (the staged
# 0.5.17 tree, scheduler.py:4218-4296; the DSpark keys, worker commands, left out). A key off the list
# updates nothing; a success resets the acceptance metrics and overrides the resolved config.
SETTABLE = ("pp_max_micro_batch_size", "speculative_accept_threshold_single", "speculative_accept_threshold_acc")


def internal_state(version: str, fields: dict[str, Any], draft_tokens: int | None) -> dict[str, Any]:
    """One DP rank's internal state: 0.5.17 repeats its resolved args there, with scheduler extras;
    0.5.23 the "resolved config (pristine server_args + post-publish overrides)" (internal_state.py:45-58)."""
    if version != "0.5.17":
        return dict(fields)
    extra: dict[str, Any] = {"_cuda_graph_config_locked": [], "_declarations_materialized": True,
                             "_mx_config_cache": {}, "_quantization_explicitly_unset": False,
                             "_resolved_overrides": [], "grpc_worker_threads": 4,
                             "effective_max_running_requests_per_dp": fields.get("max_running_requests"),
                             "max_speculative_num_draft_tokens": draft_tokens,
                             "startup_time": {"load_weight": 0.3, "kv_cache_allocation": 0.05}}
    # the scheduler's copy of its args has no SIGQUIT handler field (a launcher-only setting)
    return {**{k: v for k, v in fields.items() if k != "custom_sigquit_handler"}, **extra}


def spec_meta(version: str, completion_tokens: int, verify_ct: int, draft_tokens: int,
              correct_drafts: int) -> dict[str, Any]:
    """A speculative request's meta_info metrics, computed as tokenizer_manager.py does."""
    proposed = verify_ct * max(0, draft_tokens - 1)
    out: dict[str, Any] = {}
    if verify_ct > 0 and proposed > 0:
        out.update(spec_accept_rate=correct_drafts / proposed, spec_accept_length=completion_tokens / verify_ct,
                   spec_num_correct_drafts=correct_drafts, spec_num_proposed_drafts=proposed,
                   spec_verify_ct=verify_ct)
        if "spec_accepted_drafts" in SPEC_META_ALIASES[version]:
            out.update(spec_accepted_drafts=correct_drafts, spec_proposed_drafts=proposed)
    # steps that accepted 0, 1, 2... drafts: all but the extra ones accept none in this model
    histogram = [max(0, verify_ct - correct_drafts)] + ([correct_drafts] if correct_drafts else [])
    out["spec_correct_drafts_histogram"] = histogram
    if "spec_accept_histogram" in SPEC_META_ALIASES[version]:
        out["spec_accept_histogram"] = histogram
    return out


def kv_budget_error(mem_fraction: float, pre_gb: float, after_weights_gb: float) -> str | None:
    """kv_cache_configurator.py `_profile_available_bytes` (0.5.17 and 0.5.23): the KV budget is the free
    memory minus (1 - mem_fraction) of what was free before loading; weights beyond it leave nothing."""
    rest = after_weights_gb - pre_gb * (1 - mem_fraction)
    if rest > 0:
        return None
    minimum = 1 - after_weights_gb / pre_gb
    suggested = -(-minimum * 1000 // 1) / 1000
    return (f"ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={mem_fraction}. Raise --mem-fraction-static above {suggested:.3f} "
            f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, draft "
            f"weights are now counted.")
