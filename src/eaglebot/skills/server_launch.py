"""Start an SGLang server (`python -m sglang.launch_server`) and wait until it answers.

Pre-flight, before anything starts: the host's Python must import sglang (else the step fails
with exit 2: `the host's Python ... cannot import sglang: ...`); the host's own SGLang parser must
accept the arguments (removed flags, typos; the captured table of its release only where sglang
imports but its parser cannot be asked, and the step says so); the GPUs `gpus` names must exist
and be as many as tp × pp × dp asks; and the speculative flags are resolved with the rules of the
release the host reports (0.5.17 and 0.5.23 are known; another is warned about and gets 0.5.23's):
combinations SGLang would die on (a bare AssertionError or a TypeError) fail here, and silent
overrides (topk 1 turns 16 draft tokens into num_steps + 1) are warnings. With `check_only` (run it
before server.stop, as relaunch does) the port must be free or held by the server the bot
launched: another process there is named and refused, and nothing is stopped. Without it the port
must be free (SGLang only reports `[Errno 98]` after loading the model, minutes later).
`checked_args`: arguments an earlier `check_only` step of the run had the host's parser accept
(relaunch passes its own); the same arguments are not parsed again (importing sglang takes ~20 s
on a GPU host).
Then the server starts in its own session (pid file `{state_dir}/run/server-{port}.pid`,
log `{state_dir}/logs/server-{port}-{run_id}.log`), bound to `host` (its --host); the skill polls
GET /health ON the host (at 127.0.0.1 for a wildcard bind, else at that address) until it is 200,
failing fast when the process exits or the log shows a fatal line (the log tail is kept with the
step). Finally /server_info says what the server really runs with; any difference from what was
asked is a warning.
A dropped SSH connection is not a failed launch: the wait reconnects (the host's `connect_retries`)
and keeps waiting; when it cannot, the step fails with `lost the connection while waiting; the
server (pid N) may still be starting`, and the server stays, named by the pid file. The next launch
on that port adopts it when it answers /health and runs the same arguments (registers `adopted`),
else stops it first.

```yaml
- skill: server.launch
  register: server
  with:
    python: "{{ python }}"
    model: "{{ model }}"
    draft: "{{ draft }}"
    port: "{{ port }}"
    host: 0.0.0.0
    spec_algorithm: EAGLE3
    spec_steps: 3
    spec_topk: 1
    spec_draft_tokens: 4
    mem_fraction: 0.85
    gpus: [0, 1]
    tp: 2
    env: {NCCL_MIN_NCHANNELS: "8"}
    args: [--cuda-graph-max-bs-decode, "64"]
    ready_timeout_s: 1800
    stall_s: 180
```
Watchdog: when neither a new log line nor a 200 from /health has come for `stall_s`, the
step fails at once instead of waiting out `ready_timeout_s`, with diagnostics collected
before the server is stopped: the phase it was in (loading weights, NCCL init, capturing
CUDA graphs...), GPU memory and utilisation, the server's process tree and `py-spy dump`
where installed. A known fatal message or stalled phase gets a hint (which way to move
--mem-fraction-static, --disable-cuda-graph, NCCL_P2P_DISABLE=1 / NCCL_DEBUG=INFO).
An EAGLE3 launch without a draft model path is refused before launching.
The speculative method's own static checks (src/eaglebot/skills/lib/method_gate.py, facts/spec/methods.py; read on
the host without importing sglang or loading a tensor): DFLASH's capture ids (where SGLang reads them,
in range, as many as the draft's fc takes, num_target_layers, the block size, the target's
set_dflash_layers_to_capture), NEXTN/MTP's draft source, revision and MTP weights, STANDALONE's
tokenizer and topk with the overlap scheduler, NGRAM's device, and the combinations SGLang refuses
(PD disaggregation, attention DP, pp); an algorithm the host's SGLang does not accept. A refusal
names the fix (exit 2, before anything stops) unless `method_check: warn`.
`adaptive_config` (a JSON object) launches with SGLang's adaptive speculative steps: checked against
SGLang's own rules of that file first (facts/sglang/adaptive.py: slots, candidate_steps, the steps among
them, topk 1), written to `{state_dir}/tune/adaptive-PORT-runRUN.json`, passed as
`--speculative-adaptive --speculative-adaptive-config FILE` (the host's parser is asked about them too).
Lossless: a launch with SGLANG_SIMULATE_ACC_LEN in `env` or an accept threshold below 1
(`--speculative-accept-threshold-single/-acc`) is refused before anything stops (exit 2, naming the
knob) unless `lossy: allow`; after the start the server's own environment and /server_info's
thresholds (launch and `internal_states`) are read again, and a lossy server is stopped.
Speculation really on (facts/spec/live.py): a speculative server must report its resolved
algorithm and steps (not adaptive step 0), and two greedy prompts must show histogram mass beyond 0,
an accept length above 1.05 and, where this draft has an earlier `on` reading under the same
settings, at least 80% of it; else the step fails naming what broke (`spec_check: warn`: a warning)
and the server stays up. Dummy weights read `unknown (dummy weights)`, no alarm.
Registers `log_path`, `pid`, `port`, `launch_args` (list), `sglang_version`, `adaptive_config`, `speculation`,
`effective` (effective speculative settings), `ready_s`, `url` (where the bot reaches it), `bind`; with `check_only: true`, only
`checked_args`, `predicted`, `checked_by` ("host" or "table <version>"), `checked_version` and, for a
method with checks of its own, `method_checks` (algorithm, resolved, method, findings: check, severity,
message).
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import shlex
import time
from typing import Any, Literal

from pydantic import Field, field_validator

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Plan, SkillContext, SkillParams, StepResult, path_for_shell

from eaglebot.facts.host import ports, procs
from eaglebot.facts.sglang import adaptive, cmdline, launch_table, release, startup
from eaglebot.facts.spec import live as spec_facts
from eaglebot.facts.spec.verdict import is_local
from eaglebot.skills.lib import (carry, launch_check, method_gate, preflight, processes, readiness, server, spec_live,
                                  stall, surface_check)

NAME = "server.launch"


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python that has sglang (host var `python`)",
                        json_schema_extra=HOST_PATH)
    model: str | None = Field(None, description="target model path or id (--model-path); or give it in args",
                              json_schema_extra=HOST_PATH)
    draft: str | None = Field(None, description="draft model path (--speculative-draft-model-path); none: no draft "
                                                "(NEXTN's MTP head from the target itself, NGRAM)",
                              json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port the server listens on (--port)")
    host: str = Field("127.0.0.1", description="address the server binds (--host; relaunch: `bind`): 0.0.0.0 for "
                                                "every interface; the bot's own requests go to 127.0.0.1 then, "
                                                "else to this address")
    spec_algorithm: str | None = Field(None, description="--speculative-algorithm (EAGLE3, EAGLE, NEXTN, ...); "
                                                         "none: the target alone, no speculative decoding")
    spec_steps: int | None = Field(None, ge=1, description="--speculative-num-steps (unset: SGLang chooses)")
    spec_topk: int | None = Field(None, ge=1, description="--speculative-eagle-topk")
    spec_draft_tokens: int | None = Field(None, ge=1, description="--speculative-num-draft-tokens")
    mem_fraction: float | None = Field(None, gt=0, le=1, description="--mem-fraction-static")
    tp: int | None = Field(None, ge=1, description="--tp-size (tensor parallel GPUs)")
    args: list[str] = Field(default_factory=list, description="more sglang.launch_server arguments, verbatim")
    env: dict[str, str] = Field(default_factory=dict, description="environment of the server (NCCL_*, ...)")
    gpus: list[int] | str | int | None = Field(None, description="GPUs to use: sets CUDA_VISIBLE_DEVICES")
    ready_timeout_s: float = Field(1800.0, gt=0, description="how long to wait for GET /health to be 200")
    poll_interval_s: float = Field(1.0, gt=0, le=60, description="seconds between readiness polls")
    stall_s: float = Field(180.0, gt=0, description="fail when neither a new log line nor a healthy /health "
                                                    "appeared for this long (the start-up hangs)")
    adaptive_config: dict[str, Any] | None = Field(None, description=(
        "SGLang's adaptive speculative steps: the JSON of --speculative-adaptive-config (batch-size slots of "
        "candidate_steps and hysteresis; eagle tune writes one), written under the state folder and passed "
        "with --speculative-adaptive; topk must be 1"))
    check_only: bool = Field(False, description="only check the launch (SGLang's own parser, the speculative "
                                                "rules, the model folders), start nothing: run it before "
                                                "server.stop so a refused launch leaves the old server serving")
    checked_args: list[str] | None = Field(None, description=(
        "launch arguments an earlier check_only step of this run had the host's SGLang parser accept; when "
        "they equal this launch's, the parser is not asked again"))
    checked_version: str | None = Field(None, description="the SGLang release that earlier check found on the host")
    lossy: Literal["refuse", "allow"] = Field("refuse", description=(
        "allow: launch although a knob voids losslessness (SGLANG_SIMULATE_ACC_LEN in env, "
        "--speculative-accept-threshold-single/-acc below 1); refuse: the pre-flight refuses it, naming the knob"))
    method_check: Literal["refuse", "warn"] = Field("refuse", description=(
        "the speculative method's own static checks (DFLASH capture ids, fc width, layer count, block size; "
        "NEXTN's MTP weights; STANDALONE's tokenizer; NGRAM's platform; the combinations SGLang refuses): "
        "refuse before anything stops, or only warn"))
    spec_check: Literal["fail", "warn"] = Field("fail", description=(
        "after the launch, when speculation is not really on (no resolved algorithm or steps, steps 0, no "
        "histogram mass beyond 0, accept length <= 1.05, under 80% of this draft's own history): fail or warn"))
    carry: bool = Field(False, description=(
        "with check_only: start from the running server's own launch (the newest audited launch on this port, "
        "confirmed against its live /server_info): tp, the speculative settings, the memory fraction, extra "
        "arguments, env and GPUs not given here are carried; registers `launch`, the values to launch with"))

    @field_validator("draft")
    @classmethod
    def _no_draft(cls, v: str | None) -> str | None:
        return None if v is None or v.strip().lower() in ("", "none") else v

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        v = v.strip()
        try:
            ipaddress.ip_address(v.strip("[]"))
            return v.strip("[]")
        except ValueError:
            pass
        if not _HOSTNAME.match(v):
            raise ValueError(f"{v[:60]!r} is not an IP address or a host name (e.g. 0.0.0.0, 10.0.0.7)")
        return v


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def no_speculation(algorithm: str | None) -> bool:
    """`spec_algorithm` none, off or empty: launch the target alone (the draft is not passed)."""
    return algorithm is not None and algorithm.strip().lower() in ("", "none", "off")


def build_args(p: Params, adaptive_path: str | None = None) -> tuple[list[str], str | None]:
    """The launch_server arguments, or (args, error sentence)."""
    given = cmdline.flag_values(p.args)
    if p.adaptive_config is not None and ("--speculative-adaptive" in given or "--speculative-adaptive-config" in given):
        return [], "pass the adaptive config as `adaptive_config`, not as --speculative-adaptive* in args"
    if "--host" in given:
        return [], "pass the address as `-e bind=...` (or host var bind), not --host in extra_args"
    if "--port" in given:
        return [], "pass the port as `-e port=...` (or host var port), not --port in extra_args"
    out: list[str] = []
    spec: list[tuple[str, object]] = [
        ("--speculative-algorithm", p.spec_algorithm), ("--speculative-draft-model-path", p.draft),
        ("--speculative-num-steps", p.spec_steps), ("--speculative-eagle-topk", p.spec_topk),
        ("--speculative-num-draft-tokens", p.spec_draft_tokens)]
    if no_speculation(p.spec_algorithm):
        # `spec_algorithm: none`: the target alone (bench.correctness records its greedy reference on it)
        given_spec = [f for f, v in spec[2:] if v is not None]
        if given_spec:
            return [], f"spec_algorithm is {p.spec_algorithm!r} (no speculative decoding) but {given_spec[0]} is set"
        spec = []
    structured = [("--model-path", p.model), *spec, ("--mem-fraction-static", p.mem_fraction), ("--tp-size", p.tp)]
    for flag, value in structured:
        if value is None:
            continue
        if flag in given:
            return [], f"{flag} is given twice (as a parameter and in args)"
        out += [flag, str(value)]
    if p.model is None and "--model-path" not in given:
        return [], "no model: set `model` (host var `model`) or put --model-path in args"
    if p.adaptive_config is not None:
        out += ["--speculative-adaptive", "--speculative-adaptive-config", adaptive_path or "adaptive.json"]
    out += ["--host", p.host, "--port", str(p.port)]
    return out + list(p.args), None


# Fingerprints record the server's environment (NCCL_* etc.) but never a credential's value.
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|_KEY$", re.I)


def adaptive_path(ctx: SkillContext, port: int) -> str:
    return f"{processes.state_dir(ctx)}/tune/adaptive-{port}-run{ctx.run_id}.json"


async def run(ctx: SkillContext, params: Params) -> StepResult:
    port = params.port
    carried: carry.Carried | None = None
    if params.carry:
        if not params.check_only:
            raise StepFailed("carry works with check_only (the check before the stop reads the running server)",
                             usage=True)
        params, carried = await _carry(ctx, params)
    cfg_path = adaptive_path(ctx, port) if params.adaptive_config is not None else None
    launch_args, err = build_args(params, cfg_path)
    if err:
        raise StepFailed(f"{err} ({preflight.KEEPS})", usage=True)
    if params.adaptive_config is not None:
        wrong = adaptive.problems(params.adaptive_config, params.spec_steps, params.spec_topk)
        if wrong:
            raise StepFailed(f"SGLang would not run this adaptive config: {wrong[0]} ({preflight.KEEPS})",
                             usage=True)
    flags = cmdline.flag_values(launch_args)
    warnings: list[str] = []
    if lossy := spec_facts.lossy_launch(flags, params.env):
        if params.lossy != "allow":
            raise StepFailed(f"this launch is not lossless: {'; '.join(lossy)}; remove it, or pass lossy=allow "
                             f"({preflight.KEEPS})", usage=True)
        warnings += [f"lossy launch (lossy=allow): {w}" for w in lossy]
    # -- pre-flight: model folders
    model = flags.get("--model-path") or ""
    arch = None
    if is_local(model):
        exists, cfg = await server.read_model_config(ctx, model)
        if not exists:
            raise StepFailed(f"target model folder {model} does not exist on {ctx.host_name}")
        arch = release.target_architecture(cfg or "")
    draft = flags.get("--speculative-draft-model-path")
    if str(flags.get("--speculative-algorithm") or "").upper() == "EAGLE3" and not draft:
        raise StepFailed("EAGLE3 needs a draft model: set `draft` (host var draft) or pass "
                         "--speculative-draft-model-path (refused before launching)")
    if draft and is_local(draft):
        exists, _ = await server.read_model_config(ctx, draft)
        if not exists:
            raise StepFailed(f"draft model folder {draft} does not exist on {ctx.host_name}")
    # -- pre-flight: SGLang's own parser (the host's, else the captured table of its version)
    if params.checked_args is not None and params.checked_args == launch_args and not params.check_only:
        verdict = launch_table.Verdict("ok", version=params.checked_version, source="host")
        ctx.log(f"launch arguments already accepted by SGLang {params.checked_version or '?'}'s own parser "
                f"earlier in this run: not parsed again")
    else:
        verdict = await launch_check.check(ctx, params.python, launch_args)
        if verdict.kind != "missing":   # what the host's release would ignore or misread (env vars, removed flags)
            warnings += await surface_check.check(ctx, params.python, launch_args, params.env, verdict)
    if verdict.kind == "missing":
        installed = f" (sglang {verdict.version} is installed there but does not import)" if verdict.version else ""
        raise StepFailed(f"the host's Python {params.python} cannot import sglang: {verdict.message}{installed}; "
                         f"set the host var `python` to the Python that has SGLang ({preflight.KEEPS})",
                         warnings=warnings, usage=True, data={"checked_by": None})
    if verdict.kind == "refused":
        raise StepFailed(f"SGLang ({verdict.source}) refuses the launch arguments: {verdict.message} "
                         f"({preflight.KEEPS})", warnings=warnings, usage=True,
                         data={"checked_args": launch_args, "checked_by": verdict.source,
                               "checked_version": verdict.version})
    if verdict.kind == "unavailable":
        warnings.append(f"launch arguments not checked by SGLang's parser: {verdict.message}")
    elif verdict.source != "host":
        warnings.append(f"launch arguments checked with the captured table of SGLang {verdict.version}, not the "
                        f"host's own parser: {verdict.message}")
    # -- pre-flight: the speculative method's own checks (DFLASH, NEXTN/MTP, STANDALONE, NGRAM)
    method_checks = None
    if params.check_only or params.checked_args is None:
        more, method_checks = await method_gate.check(ctx, params.python, launch_args,
                                                      release.rules_version(verdict.version), params.method_check)
        warnings += more
    # -- pre-flight: the GPUs it needs and the address it binds (before server.stop: a refusal
    # keeps the old server serving)
    warnings += await preflight.check_gpus(ctx, launch_args, params.gpus, params.env)
    warnings += await preflight.check_bind(ctx, params.python, params.host, launch_args)
    # -- pre-flight: speculative flags (SGLang's hooks run after its parser, so do these)
    rules = release.rules_version(verdict.version)
    spec = release.resolve_from_args(launch_args, arch, rules)
    if (unknown := release.unknown_version_warning(verdict.version)) is not None:
        warnings.append(unknown)
    if spec.error:
        raise StepFailed(f"{spec.error_reason} (refused before launching)", usage=True)
    for key, (asked, eff) in spec.adjusted.items():
        warnings.append(f"{key}={asked} will be silently changed to {eff} by SGLang: "
                        f"{release.DRAFT_TOKENS_WARNING} (speculative_num_steps="
                        f"{spec.num_steps}); set it to {eff} or use topk > 1")
    warnings += spec.advice
    if spec.auto_chosen:
        ctx.log(f"speculative steps/topk/draft tokens not set: SGLang picks ({spec.num_steps}, {spec.topk}, "
                f"{spec.num_draft_tokens}) for target architecture {arch or 'unknown'}")
    if params.check_only:
        ctx.log(await preflight.check_port(ctx, port))
        by = f"SGLang {verdict.version or '?'} ({verdict.source})" if verdict.kind == "ok" else "eaglebot's rules only"
        summary = f"launch arguments accepted by {by}; nothing started"
        if carried is not None:
            summary += f"; carried from {carried.source or 'nothing'}: {carry.words(carried)}"
            warnings += [f"the running server differs from its audited launch: {d}; the live value is carried"
                         for d in carried.differences]
        # Not `launch_args`/`effective`: nothing was launched, and the history's fingerprint of the host
        # reads those keys from server.launch steps.
        return StepResult.ok(summary, warnings=warnings,
                             data={"checked_args": launch_args, "predicted": spec.effective(),
                                   **({"method_checks": method_checks} if method_checks is not None else {}),
                                   "checked_by": verdict.source if verdict.kind == "ok" else None,
                                   "checked_version": verdict.version, "launch": _launch_values(params),
                                   **({"carried": vars(carried)} if carried is not None else {})})
    # -- pre-flight: port and a previous launch
    busy = await server.listener_words(ctx, port)
    env = dict(params.env)
    cvd = server.cuda_visible(params.gpus)
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    argv = [params.python, "-m", "sglang.launch_server", *launch_args]

    async def launch() -> StepResult:
        holder = busy
        old = await server.read_pid(ctx, port)
        if old is not None and await server.leader_alive(ctx, old):
            adopted = await readiness.adopt(ctx, _wait(params), old, argv, warnings, {
                "launch_args": launch_args, "bind": params.host, "effective": spec.effective(),
                "sglang_version": None, "adaptive_config": params.adaptive_config})
            if adopted is not None:
                return adopted
            holder = await server.listener_words(ctx, port)
        if holder is not None:
            raise StepFailed(f"port {port} is already in use by {holder}; stop it first (server.stop) - "
                             f"SGLang would only notice after loading the model", warnings=warnings)
        return await _launch(ctx, params, argv, env, cfg_path, launch_args, spec, flags, warnings)

    # A dry-run plans past a busy port: the server.stop before this step would have freed it by now.
    return await ctx.carry_out(Plan(
        ([f"find port {port} free (now in use by {busy})"] if busy is not None else [])
        + [f"start {shlex.join(argv)} (env {env or '{}'}), log {server.log_path(ctx, port)}"],
        f"would launch SGLang on port {port}", launch, warnings=warnings))


async def _launch(ctx: SkillContext, params: Params, argv: list[str], env: dict[str, str], cfg_path: str | None,
                  launch_args: list[str], spec: release.SpecResolution, flags: dict[str, str | None],
                  warnings: list[str]) -> StepResult:
    # -- act
    port = params.port
    log_path, pid_path = server.log_path(ctx, port), server.pid_path(ctx, port)
    if cfg_path is not None:
        await ctx.host.run(f"mkdir -p {path_for_shell(processes.state_dir(ctx) + '/tune')}", timeout=30)
        await ctx.host.write_file(cfg_path, (json.dumps(params.adaptive_config, indent=2) + "\n").encode())
        ctx.log(f"adaptive speculative steps: {cfg_path}")
    t0 = time.monotonic()
    base = f"http://{ports.probe_address(params.host)}:{port}"
    # spawn_detached's own mkdir runs in the background, racing its pid-file write.
    await ctx.host.run(f"mkdir -p {path_for_shell(processes.state_dir(ctx) + '/run')} "
                       f"{path_for_shell(processes.state_dir(ctx) + '/logs')}", timeout=30)
    pid = await ctx.host.spawn_detached(argv, log_path=log_path, pid_path=pid_path, env=env or None)
    ctx.log(f"started pid {pid}: {shlex.join(argv)}")
    data: dict[str, Any] = {"log_path": log_path, "pid": pid, "port": port, "launch_args": launch_args,
                            "adaptive_config": params.adaptive_config,
                            "sglang_version": None, "effective": spec.effective(),
                            "url": base, "bind": params.host, "env": {k: v for k, v in env.items() if not _SECRETISH.search(k)},
                            # the draft's config as this server reads it: a rollback restores these bytes
                            **await carry.draft_config(ctx, params.draft or flags.get("--speculative-draft-model-path"))}
    try:
        failure, log_text, stalled = await readiness.wait_ready(ctx, _wait(params), pid, log_path)
    except readiness.LinkLost as e:
        # The server may be fine: it stays, named by our pid file, for the next run to adopt or stop.
        data["lost_connection"] = True
        raise StepFailed(f"lost the connection while waiting; the server (pid {pid}) may still be starting "
                         f"({e}); the next launch on port {port} adopts it if it is healthy and runs these "
                         f"arguments, else stops it", data=data, warnings=warnings) from None
    except asyncio.CancelledError:
        await asyncio.shield(server.stop_session(ctx, pid, 5))
        await asyncio.shield(server.remove_pid_file(ctx, port))
        raise
    if failure:
        current = startup.phase(log_text)
        hints = startup.hints(log_text, current, stalled=stalled)
        extra = [f"== phase: {current}", *(f"hint: {h}" for h in hints)]
        if stalled:
            extra += await stall.diagnose(ctx, pid)     # before the stop: the hung processes are the evidence
        data["phase"], data["hints"] = current, hints
        await server.stop_session(ctx, pid, 5)
        await server.remove_pid_file(ctx, port)
        for line in extra:
            ctx.log(line)
        raise StepFailed(failure + (f"; hint: {hints[0]}" if hints else ""), data=data, warnings=warnings,
                         output=release.tail(log_text, 60) + "\n" + "\n".join(extra) + "\n")
    ready_s = time.monotonic() - t0
    data["ready_s"] = round(ready_s, 2)
    # -- report what the server really runs with
    code, body = await server.http_get(ctx, params.python, port, "/server_info", base=base)
    if code != 200:
        code, body = await server.http_get(ctx, params.python, port, "/get_server_info", base=base)
    if code == 200:
        try:
            info = release.parse_server_info(body)
        except ValueError:
            info = None
    else:
        info = None
    if info is None:
        warnings.append(f"could not read /server_info (HTTP {code}); effective settings are predicted, not read")
    else:
        data["sglang_version"] = info["version"]
        data["effective"] = {k: v for k, v in info["effective"].items()}
        predicted = set(spec.adjusted)
        for flag, asked in flags.items():
            key = cmdline.flag_to_key(flag)
            if key in info["raw"] and asked is not None and key not in predicted \
                    and not cmdline.same_value(asked, info["raw"][key]):
                warnings.append(f"asked {flag} {asked}, but the server runs with {key}={info['raw'][key]!r}")
        if params.adaptive_config is not None and not info["raw"].get("speculative_adaptive"):
            why = adaptive.disabled_reason(log_text)
            warnings.append("SGLang turned adaptive speculative steps off" + (f": {why}" if why else "")
                            + "; the static flags run")
        running = release.unknown_version_warning(info["version"])
        if running is not None and running not in warnings:
            warnings.append(running)
        if info["effective"].get("speculative_algorithm"):
            await spec_live.after_launch(ctx, spec_live.Launched(params.python, port, pid, base, params.lossy == "allow",
                                                                 params.spec_check == "fail"), info["raw"], data,
                                         warnings, release.tail(log_text, 30))
    eff = data["effective"]
    spec_txt = ""
    if eff.get("speculative_algorithm"):
        spec_txt = (f"; {eff['speculative_algorithm']} steps={eff.get('speculative_num_steps')} "
                    f"topk={eff.get('speculative_eagle_topk')} draft_tokens={eff.get('speculative_num_draft_tokens')}")
    version = data["sglang_version"] or "?"
    if info is not None and info["raw"].get("simulated"):
        version += " (SIMULATED)"
    return StepResult.changed(f"SGLang {version} ready on port {port} in {ready_s:.1f}s (pid {pid}{spec_txt})",
                              data=data, warnings=warnings, output=release.tail(log_text, 30))


async def _carry(ctx: SkillContext, params: Params) -> tuple[Params, carry.Carried]:
    """The params with what the running server's launch sets and they do not (`carry`)."""
    record = await carry.last_launch(ctx, params.port)

    async def read() -> StepResult:
        return StepResult.ok("read", data={"live": await carry.live_info(ctx, params.python, params.port)})

    # Asking the server is a request it logs: a dry run plans it and carries the audited launch unconfirmed.
    asked = await ctx.carry_out(Plan([f"read /server_info on port {params.port} to confirm the running server's "
                                      f"audited launch"], "", read, preview=StepResult.ok("not read", data={})))
    live = asked.data.get("live")
    c = carry.from_sources(record, live, params.port)
    if "live" not in asked.data:
        c.notes = [f"{c.source} carried; the live server is asked in the real run" if record is not None else
                   f"no audited launch on port {params.port}: nothing carried (the live server is asked in the real run)"]
    for note in c.notes:
        ctx.log(note)
    update: dict[str, Any] = {k: v for k, v in c.values.items() if getattr(params, k) is None}
    c.values = dict(update)          # what was carried, not what was given
    update["args"] = carry.merge_args(c.args, params.args)
    update["env"] = {**c.env, **params.env}
    if params.gpus in (None, "", []) and c.gpus:
        update["gpus"] = c.gpus
    else:
        c.gpus = None
    return params.model_copy(update=update), c


def _launch_values(p: Params) -> dict[str, Any]:
    """What the launch after this check takes (relaunch's launch step reads it: the carried values)."""
    return {"tp": p.tp, "spec_steps": p.spec_steps, "spec_topk": p.spec_topk, "spec_draft_tokens": p.spec_draft_tokens,
            "mem_fraction": p.mem_fraction, "gpus": p.gpus, "env": dict(p.env), "args": list(p.args)}


def _wait(p: Params) -> readiness.Wait:
    return readiness.Wait(p.python, p.host, p.port, p.ready_timeout_s, p.poll_interval_s, p.stall_s)
