"""What changed on a host between two fingerprints, ranked by how likely it moved a metric.

Pure over fingerprint states (see `fingerprint.apply_steps`): config keys (from the values
config.patch records with its RFC 6902 patch), launch arguments (read with SGLang's own
grammar: multi-value flags, `--flag=value`, booleans), SGLang and package versions, the
server's environment (NCCL_* ...) and GPU health where a gpu.health step recorded it.
Attribution at a change point diffs the runs just before and at the point, so it names
the change where the series moved, not everything since some older good run.

A regression found by the per-run check says instead what changed since the last good
run (`attribution`, `attribution_text`): config keys from the recorded diffs and patches,
launch arguments, effective settings, versions and GPU health.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from eaglebot.facts.sglang.cmdline import launch_flags
from eaglebot.history.fingerprint import empty_state, json_value
from eaglebot.history.health import diff_health
from eaglebot.history.keydiff import flatten, key_changes_from_diff

# Ranking: how often a change of this kind explains a throughput/acceptance move on an
# EAGLE-3 server. A failing GPU and the speculative settings come first; environment last.
SCORES = {"health-fail": 0.97, "speculative": 0.95, "capture-layers": 0.93, "config": 0.85,
          "health-warn": 0.8, "launch": 0.7, "sglang": 0.6, "package": 0.45, "env": 0.35}
_SPEC_PREFIXES = ("--speculative-", "--cuda-graph", "--disable-cuda-graph", "--tp-size", "--attention-backend",
                  "--mem-fraction-static", "--max-running-requests", "--enable-torch-compile")


@dataclass(frozen=True)
class Change:
    kind: str          # config | launch | sglang | package | env | health
    key: str
    before: object
    after: object
    score: float
    path: str = ""     # the config file, for config changes

    def text(self) -> str:
        if self.kind == "health":
            return f"{self.key} {self.after}"
        label = {"launch": "launch ", "env": "env ", "sglang": "", "package": "", "config": ""}.get(self.kind, "")
        return f"{label}{self.key} {show(self.before)} → {show(self.after)}"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "before": self.before, "after": self.after,
                "score": self.score, **({"path": self.path} if self.path else {})}


def show(v: object) -> str:
    if v is None:
        return "(unset)"
    if v is True:
        return "(on)"
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return " ".join(v)
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(", ", ": "), default=str)


def config_value(state: dict[str, Any], path: str, key: str, other: dict[str, Any]) -> Any:
    """A config key's value in `state`; when `state` predates every patch of the key, the
    value the first later patch found there (recorded as its `before`)."""
    cur = (state.get("config") or {}).get(path) or {}
    if key in cur:
        return cur[key]
    for st in (state, other):
        before = (st.get("config_before") or {}).get(path) or {}
        if key in before:
            return before[key]
    return None


def config_changes(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    out = []
    paths = list(dict.fromkeys([*(a.get("config") or {}), *(b.get("config") or {})]))
    for path in paths:
        keys = list(dict.fromkeys([*((a.get("config") or {}).get(path) or {}),
                                   *((b.get("config") or {}).get(path) or {})]))
        for k in keys:
            va, vb = config_value(a, path, k, b), config_value(b, path, k, a)
            if va != vb:
                kind = "capture-layers" if "aux_hidden_state" in k else "config"
                out.append(Change("config", k, va, vb, SCORES[kind], path))
    return out


def launch_changes(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    if a.get("launch_args") is None or b.get("launch_args") is None:
        return []
    fa, fb = launch_flags(list(a["launch_args"])), launch_flags(list(b["launch_args"]))
    out = []
    for k in list(dict.fromkeys([*fa, *fb])):
        if fa.get(k) != fb.get(k):
            score = SCORES["speculative"] if k.startswith(_SPEC_PREFIXES) else SCORES["launch"]
            out.append(Change("launch", k, fa.get(k), fb.get(k), score))
    return out


def version_changes(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    out = []
    if a.get("sglang_version") and b.get("sglang_version") and a["sglang_version"] != b["sglang_version"]:
        out.append(Change("sglang", "sglang", a["sglang_version"], b["sglang_version"], SCORES["sglang"]))
    pa, pb = a.get("packages") or {}, b.get("packages") or {}
    for k in sorted(set(pa) | set(pb)):
        if pa and pb and pa.get(k) != pb.get(k):
            out.append(Change("package", k, pa.get(k), pb.get(k), SCORES["package"]))
    return out


def env_changes(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    if a.get("env") is None or b.get("env") is None:
        return []
    ea, eb = a["env"], b["env"]
    return [Change("env", k, ea.get(k), eb.get(k), SCORES["env"])
            for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)]


def health_changes(a: dict[str, Any], b: dict[str, Any], since_run: int | None = None) -> list[Change]:
    """GPU health as a gpu.health step records it: {"<gpu>": {"verdict", "reasons"}}. A GPU that
    got worse (or gained a reason) is named with its reasons: "GPU 1 HW thermal slowdown"."""
    ha, hb = a.get("health") or {}, b.get("health") or {}
    if not isinstance(ha, dict) or not isinstance(hb, dict) or not hb:
        return []
    rank = {"ok": 0, "warn": 1, "fail": 2}
    out = []
    for gpu in sorted(hb, key=lambda g: (len(str(g)), str(g))):
        now, was = hb.get(gpu) or {}, ha.get(gpu) or {}
        if not isinstance(now, dict):
            continue
        verdict, reasons = str(now.get("verdict") or "ok"), [str(r) for r in now.get("reasons") or []]
        old_reasons = [str(r) for r in (was.get("reasons") or [])] if isinstance(was, dict) else []
        new = [r for r in reasons if r not in old_reasons]
        worse = rank.get(verdict, 0) > rank.get(str((was or {}).get("verdict") or "ok"), 0)
        if verdict == "ok" or not (new or worse):
            continue
        what = ", ".join(new or reasons) or verdict
        since = f" since run #{since_run}" if since_run is not None else ""
        score = SCORES["health-fail"] if verdict == "fail" else SCORES["health-warn"]
        out.append(Change("health", f"GPU {gpu}", (was or {}).get("verdict"), f"{what}{since}", score))
    return out


def state_changes(a: dict[str, Any], b: dict[str, Any], since_run: int | None = None) -> list[Change]:
    """Every recorded difference from state `a` to state `b`, most likely cause first."""
    changes = [*health_changes(a, b, since_run), *config_changes(a, b), *launch_changes(a, b),
               *version_changes(a, b), *env_changes(a, b)]
    return sorted(changes, key=lambda c: -c.score)


def attribution_sentence(changes: list[Change], limit: int = 6) -> str:
    """"most likely X; also Y, Z" (the ranked list, cut to `limit`)."""
    if not changes:
        return "nothing recorded changed"
    head = f"most likely {changes[0].text()}"
    rest = [c.text() for c in changes[1:limit]]
    more = len(changes) - limit
    tail = ("; also " + "; ".join(rest)) if rest else ""
    return head + tail + (f"; and {more} more" if more > 0 else "")


# -- what changed since the last good run (a regression's reason) ----------------------

def parse_launch_args(args: list[str] | None) -> dict[str, Any]:
    """["--tp", "2", "--enable-x"] -> {"--tp-size": "2", "--enable-x": True}, read as SGLang reads
    them (a multi-value flag keeps every value: `--cuda-graph-bs-decode 1 2 4` -> ["1", "2", "4"])."""
    return dict(launch_flags(list(args or [])))


def fmt_json(v: object) -> str:
    """A config value as a reason shows it (compact JSON; None is "(unset)")."""
    if v is None:
        return "(unset)"
    return json.dumps(v, separators=(", ", ": "), default=str)


def attribution(good: dict[str, Any] | None, now: dict[str, Any], changes: Sequence[Mapping[str, Any]],
                patch_sets: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What changed on a host between the state at the last good run and now.

    `changes`: changes rows after the good run (oldest first); `patch_sets`: (path, set dict)
    of config.patch steps in the same span.
    """
    good = good or empty_state()
    items: list[str] = []
    # config keys: diffs first (they know the before value), then config.patch `set` dicts.
    keys: dict[str, list[Any]] = {}
    undecoded: list[str] = []
    for c in changes:
        kc = key_changes_from_diff(c.get("diff"))
        if kc is None:
            if c["path"] not in undecoded:
                undecoded.append(c["path"])
            continue
        for k, (b, a) in kc.items():
            if k in keys:
                keys[k][1] = a
            else:
                keys[k] = [b, a]
    good_cfg = good.get("config") or {}
    for path, sets in patch_sets:
        for k, a in flatten_set(sets).items():
            if k in keys:
                keys[k][1] = a
            else:
                keys[k] = [good_cfg.get(path, {}).get(k), a]
    for k, (b, a) in keys.items():
        if b != a:
            items.append(f"{k} {fmt_json(b)} → {fmt_json(a)}")
    decoded_paths = {p for p, _ in patch_sets}
    for p in undecoded:
        if p not in decoded_paths:
            items.append(f"{p} changed")
    # launch arguments
    ga, na = parse_launch_args(good.get("launch_args")), parse_launch_args(now.get("launch_args"))
    launch_keys = set()
    if now.get("launch_args") is not None and good.get("launch_args") is not None:
        for k in list(ga) + [k for k in na if k not in ga]:
            if ga.get(k) != na.get(k):
                launch_keys.add(k.lstrip("-").replace("-", "_"))
                items.append(f"launch {k} {show(ga.get(k))} → {show(na.get(k))}")
    elif now.get("launch_args") is not None and now.get("launch_args") != good.get("launch_args"):
        items.append("launch arguments " + " ".join(now["launch_args"]))
    ge, ne = good.get("effective") or {}, now.get("effective") or {}
    if ge and ne:
        for k in sorted(set(ge) | set(ne)):
            if ge.get(k) != ne.get(k) and k not in launch_keys:
                items.append(f"effective {k} {fmt_json(ge.get(k))} → {fmt_json(ne.get(k))}")
    if now.get("sglang_version") and good.get("sglang_version") and now["sglang_version"] != good["sglang_version"]:
        items.append(f"sglang {good['sglang_version']} → {now['sglang_version']}")
    gp, np_ = good.get("packages") or {}, now.get("packages") or {}
    for k in sorted(np_):
        if k in gp and gp[k] != np_[k]:
            items.append(f"{k} {gp[k]} → {np_[k]}")
        elif k not in gp and gp:
            items.append(f"{k} (new) {np_[k]}")
    items += [f"health {line}" for line in diff_health(good.get("health"), now.get("health"))]
    return items


def flatten_set(sets: dict[str, Any]) -> dict[str, Any]:
    """config.patch `set` dicts use dotted keys already; nested dicts are flattened too."""
    out: dict[str, Any] = {}
    for k, v in sets.items():
        if isinstance(v, dict) and v:
            out.update({f"{k}.{kk}": vv for kk, vv in flatten(v).items()})
        else:
            out[k] = v
    return out


def attribution_text(good_run: int | None, items: list[str], host: str) -> str:
    """The "changed since last good run #N: ..." clause of a regression's reason."""
    if good_run is None:
        return f"no earlier good run on {host} to compare with"
    if not items:
        return f"nothing recorded changed on {host} since last good run #{good_run}"
    return f"changed since last good run #{good_run}: " + "; ".join(items)


def since_good_run(host: str, run_id: int, good_run: int, good_state: dict[str, Any], now: dict[str, Any],
                   changes: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> str:
    """The "changed since last good run #N: ...; most likely ..." clause of a regression's reason.

    `changes` and `steps`: the file changes and finished steps on host after the good run
    up to run_id (oldest first); `now`: the host's state at run_id."""
    patch_sets = []
    for s in steps:
        if s["skill"] == "config.patch":
            params = json_value(s.get("params"), {})
            if isinstance(params, dict) and isinstance(params.get("set"), dict):
                patch_sets.append((str(params.get("path") or "?"), params["set"]))
    text = attribution_text(good_run, attribution(good_state, now, changes, patch_sets), host)
    ranked = state_changes(good_state, now, run_id)
    return text + (f"; {attribution_sentence(ranked)}" if ranked else "")

