"""Regression detection over run history, config fingerprints and attribution.

The judgement is a pure function (`judge`): a new value is compared with the median of
the same playbook + host + metric's recent successful runs, and flagged only when the
change exceeds BOTH a minimum percentage and k robust sigmas (1.4826·MAD). With too
little history it says so and flags nothing (fixed baselines, e.g. bench.compare, still
apply). The fingerprint of a run is the host's known state (launch arguments, sglang
version, patched config keys and file hashes, reported package versions); attribution
is the difference between the state at the last good run and now, so a regression says
what changed.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING, Any, Iterable, Literal

from eaglebot.config import RegressionConfig
from eaglebot.history.attribution import attribution_sentence, show, state_changes
from eaglebot.history.health import diff_health
from eaglebot.sdk import Metric, Regression

if TYPE_CHECKING:
    from eaglebot.history.changepoint import Shift

log = logging.getLogger("eaglebot.history")

MAD_SCALE = 1.4826        # MAD -> sigma for normally distributed noise
MEAN_AD_SCALE = 1.2533    # mean absolute deviation -> sigma (fallback when MAD is 0)
BASELINE_SPAN_LIMIT = 500  # runs since a baseline that still count as its history
CP_WINDOW = 100            # runs of a metric's series searched for change points
CP_MIN_RUNS = 8            # fewer: no change-point search

Verdict = Literal["insufficient", "ok", "regression", "improvement"]


# -- the math (pure) ------------------------------------------------------------------

def robust_sigma(values: list[float]) -> float:
    """1.4826·MAD; when more than half the values are equal (MAD 0), the scaled mean
    absolute deviation; 0 only when every value is the same."""
    if not values:
        return 0.0
    med = median(values)
    dev = [abs(v - med) for v in values]
    mad = median(dev)
    if mad > 0:
        return MAD_SCALE * mad
    return MEAN_AD_SCALE * (sum(dev) / len(dev))


@dataclass
class Judgement:
    metric: str
    value: float
    better: str
    verdict: Verdict
    n: int                       # prior runs used
    reference: float | None = None   # their median
    sigma: float = 0.0
    delta_pct: float = 0.0
    reason: str = ""

    def as_regression(self, host: str, extra: str = "") -> Regression | None:
        if self.verdict not in ("regression", "improvement"):
            return None
        reason = self.reason + (f"; {extra}" if extra else "")
        return Regression(self.metric, self.value, float(self.reference or 0.0), round(self.delta_pct, 2),
                          reason, kind=self.verdict, host=host)


def _num(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def judge(metric: str, value: float, history: Iterable[float], *, better: str = "higher",
          min_pct: float = 5.0, k_sigma: float = 3.0, min_history: int = 5,
          unit: str = "", what: str = "") -> Judgement:
    """Compare `value` with `history` (prior values, any order).

    Flag only when |change| > min_pct % of the median AND > k_sigma robust sigmas;
    when every prior value is identical (sigma 0) the percentage alone decides.
    """
    hist = [float(v) for v in history]
    n = len(hist)
    what = what or f"the last {n} runs"
    u = f" {unit}" if unit else ""
    if n < min_history:
        return Judgement(metric, value, better, "insufficient", n,
                         reason=f"insufficient history: {n} prior run{'s' if n != 1 else ''} "
                                f"(need {min_history}); judged by fixed baselines only")
    ref = median(hist)
    sigma = robust_sigma(hist)
    diff = value - ref
    if ref != 0:
        delta_pct = 100.0 * diff / abs(ref)
    else:
        delta_pct = 0.0 if diff == 0 else (100.0 if diff > 0 else -100.0)
    pct_ok = abs(delta_pct) > min_pct
    sigma_ok = abs(diff) > k_sigma * sigma if sigma > 0 else diff != 0
    j = Judgement(metric, value, better, "ok", n, ref, sigma, delta_pct)
    spread = f"robust sigma {_num(sigma)}" if sigma > 0 else "no spread"
    if not (pct_ok and sigma_ok):
        why = []
        if not pct_ok:
            why.append(f"{abs(delta_pct):.1f}% <= {min_pct:g}%")
        if not sigma_ok:
            why.append(f"{abs(diff) / sigma if sigma else 0:.1f} sigma <= {k_sigma:g}")
        j.reason = (f"{metric} {_num(value)}{u} within noise of median {_num(ref)}{u} of {what} "
                    f"({', '.join(why)})")
        return j
    worse = diff < 0 if better == "higher" else diff > 0
    j.verdict = "regression" if worse else "improvement"
    direction = "below" if diff < 0 else "above"
    sig = f"{abs(diff) / sigma:.1f} sigma" if sigma > 0 else "all prior values equal"
    j.reason = (f"{metric} {_num(value)}{u} is {abs(delta_pct):.1f}% {direction} the median {_num(ref)}{u} "
                f"of {what} ({sig}; {spread}; {better} is better; thresholds {min_pct:g}% and "
                f"{k_sigma:g} sigma)")
    return j


# -- fingerprints and attribution (pure) ---------------------------------------------------

def _loads(v: Any, default: Any) -> Any:
    if isinstance(v, (dict, list)):
        return v
    if not v:
        return default
    try:
        return json.loads(v)
    except (TypeError, json.JSONDecodeError):
        return default


def empty_state() -> dict[str, Any]:
    return {"launch_args": None, "sglang_version": None, "effective": {}, "files": {}, "config": {},
            "packages": {}, "health": {}}


def apply_steps(state: dict[str, Any], steps: list[dict[str, Any]],
                changes: list[dict[str, Any]]) -> dict[str, Any]:
    """Advance a host's state by finished steps and file changes (both oldest first)."""
    st: dict[str, Any] = json.loads(json.dumps(state or empty_state()))
    for k, v in empty_state().items():
        st.setdefault(k, v)
    for s in steps:
        data = _loads(s.get("data"), {})
        params = _loads(s.get("params"), {})
        if s.get("skill") == "server.launch" and isinstance(data, dict):
            if data.get("launch_args") is not None:
                st["launch_args"] = [str(a) for a in data["launch_args"]]
            if data.get("sglang_version"):
                st["sglang_version"] = str(data["sglang_version"])
            if isinstance(data.get("effective"), dict):
                st["effective"] = data["effective"]
            if isinstance(data.get("env"), dict):
                st["env"] = {str(k): str(v) for k, v in data["env"].items()}
        if s.get("skill") == "config.patch" and isinstance(data, dict) and isinstance(data.get("values"), dict):
            path = str(data.get("path") or params.get("path") or "?")
            for k, ba in data["values"].items():
                if isinstance(ba, dict):
                    st.setdefault("config_before", {}).setdefault(path, {}).setdefault(k, ba.get("before"))
                    st["config"].setdefault(path, {})[k] = ba.get("after")
        if s.get("skill") == "config.patch" and isinstance(params, dict) and isinstance(params.get("set"), dict):
            path = str(params.get("path") or "?")
            st["config"].setdefault(path, {}).update(params["set"])
        if s.get("skill") == "gpu.health" and isinstance(data, dict) and isinstance(data.get("health"), dict):
            st["health"] = data["health"]
        if isinstance(data, dict) and isinstance(data.get("package_versions"), dict):
            st["packages"].update({str(k): str(v) for k, v in data["package_versions"].items()})
    for c in changes:
        st["files"][c["path"]] = c.get("after_sha256")
    return st


def parse_launch_args(args: list[str] | None) -> dict[str, Any]:
    """["--tp", "2", "--enable-x"] -> {"--tp-size": "2", "--enable-x": True}, read as SGLang reads
    them (a multi-value flag keeps every value: `--cuda-graph-bs 1 2 4` -> ["1", "2", "4"])."""
    from eaglebot.facts.sglang_args import launch_flags

    return dict(launch_flags(list(args or [])))


def fmt_json(v: Any) -> str:
    if v is None:
        return "(unset)"
    return json.dumps(v, separators=(", ", ": "), default=str)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj} if prefix else {}


def _brackets(text: str) -> int:
    """Open minus closed brackets outside JSON strings."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth


_KEY_LINE = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*:\s*(.*)$')


def fragment_values(lines: list[str]) -> dict[str, Any]:
    """Values of `"key": value` lines in a fragment of pretty-printed JSON, by dotted path
    (relative to the outermost object opened inside the fragment)."""
    out: dict[str, Any] = {}
    stack: list[str] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        m = _KEY_LINE.match(s)
        if m:
            key, rest = m.group(1), m.group(2).strip()
            if rest.startswith("{") and _brackets(rest) > 0:
                stack.append(key)
                i += 1
                continue
            text = rest
            depth = _brackets(rest)
            j = i
            while depth > 0 and j + 1 < len(lines):
                j += 1
                text += lines[j].strip()
                depth += _brackets(lines[j])
            if depth <= 0:
                try:
                    out[".".join(stack + [key])] = json.loads(text.rstrip(","))
                except json.JSONDecodeError:
                    pass
            i = j + 1
            continue
        if s.startswith("}") and stack:
            stack.pop()
        i += 1
    return out


def diff_sides(diff: str) -> list[tuple[list[str], list[str]]]:
    """Per hunk of a unified diff: (old lines, new lines)."""
    hunks: list[tuple[list[str], list[str]]] = []
    old: list[str] | None = None
    new: list[str] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            if old is not None:
                hunks.append((old, new))
            old, new = [], []
            continue
        if old is None or line.startswith("\\"):
            continue
        tag, body = line[:1], line[1:]
        if tag == "-":
            old.append(body)
        elif tag == "+":
            new.append(body)
        else:
            old.append(body)
            new.append(body)
    if old is not None:
        hunks.append((old, new))
    return hunks


def key_changes_from_diff(diff: str | None) -> dict[str, tuple[Any, Any]] | None:
    """Key-level changes {dotted key: (before, after)} from a changes.diff; None if unknown.

    Accepts a JSON object with before/after documents, or a unified diff of a JSON file
    (whole documents when the diff carries them, else `"key": value` fragments).
    """
    if not diff:
        return None
    doc = _loads(diff, None)
    if isinstance(doc, dict) and "before" in doc and "after" in doc:
        b, a = _loads(doc["before"], doc["before"]), _loads(doc["after"], doc["after"])
        return _dict_changes(flatten(b) if isinstance(b, dict) else {}, flatten(a) if isinstance(a, dict) else {})
    hunks = diff_sides(diff)
    if not hunks:
        return None
    if len(hunks) == 1:
        try:
            b, a = json.loads("\n".join(hunks[0][0])), json.loads("\n".join(hunks[0][1]))
            if isinstance(b, dict) and isinstance(a, dict):
                return _dict_changes(flatten(b), flatten(a))
        except json.JSONDecodeError:
            pass
    out: dict[str, tuple[Any, Any]] = {}
    for old, new in hunks:
        out.update(_dict_changes(fragment_values(old), fragment_values(new)))
    return out or None


def _dict_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    out = {}
    for k in list(before) + [k for k in after if k not in before]:
        b, a = before.get(k), after.get(k)
        if b != a:
            out[k] = (b, a)
    return out


def attribution(good: dict[str, Any] | None, now: dict[str, Any], changes: list[dict[str, Any]],
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
    if good_run is None:
        return f"no earlier good run on {host} to compare with"
    if not items:
        return f"nothing recorded changed on {host} since last good run #{good_run}"
    return f"changed since last good run #{good_run}: " + "; ".join(items)


# -- store-side (sync, runs on the store thread) -------------------------------------------

def set_baseline(store: Any, run_id: int, actor: str) -> str:
    """Mark a run as the baseline of its playbook on each of its hosts (CLI and Slack).

    Returns the sentence to show; UsageError when the run cannot be a baseline."""
    from eaglebot.errors import UsageError

    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run #{run_id}")
    if run["status"] != "succeeded":
        raise UsageError(f"run #{run_id} {run['status']}: only a succeeded run can be a baseline")
    if run.get("dry_run"):
        raise UsageError(f"run #{run_id} was a dry run (it measured nothing): pick a real run as the baseline")
    if not run.get("hosts"):
        raise UsageError(f"run #{run_id} has no hosts to be the baseline of")
    res = store.set_baseline(run_id, actor)
    for h in res["hosts"]:
        for inc in store.incidents(playbook=res["playbook"], host=h, status="open"):
            store.close_incident(inc["id"], "baseline", actor, f"baseline set to run #{run_id} by {actor}", run_id)
    n = len(store.metrics(run_id))
    what = f"{n} metric{'s' if n != 1 else ''}" if n else "no metrics (history checks start from it anyway)"
    return (f"run #{run_id} is now the baseline of {res['playbook']} on {', '.join(res['hosts'])} "
            f"({what}); regression checks compare with it and the runs after it")


def host_state(store: Any, host: str, run_id: int) -> dict[str, Any]:
    """The host's state as of run_id: the newest fingerprint at or before it, advanced by
    the steps and file changes recorded since."""
    base = store.last_fingerprinted_run(host, run_id)
    if base and base["run_id"] == run_id:
        recorded: dict[str, Any] = base["state"]
        return recorded
    after = base["run_id"] if base else 0
    state = base["state"] if base else empty_state()
    return apply_steps(state, store.host_steps(host, after, run_id), store.host_changes(host, after, run_id))


def record_fingerprint(store: Any, run_id: int, hosts: list[str]) -> dict[str, Any]:
    fp = {h: host_state(store, h, run_id) for h in hosts}
    store.set_fingerprint(run_id, fp)
    return fp


def check_run(store: Any, run_id: int, playbook: str, hosts: list[str],
              metrics: list[tuple[str, Metric]], cfg: RegressionConfig) -> tuple[list[Regression], list[str]]:
    """Judge every metric of a finished run against its history. Returns the regressions
    and improvements, and notes (e.g. insufficient history) for the audit trail.

    Two checks combine. The quick per-run check (median + MAD) compares the value with the
    reference window; a regression opens an incident, and while it is open later runs are
    compared with the reference from BEFORE it (flagged runs never enter a window), so a
    persistent drop stays flagged ("still 11% below since run #41") until the metric
    recovers, a baseline is set or someone acks it. The change-point check (E-divisive
    means + t-test over the last CP_WINDOW runs) catches what no single run shows, e.g. a
    slow drift; it flags when the newest level is worse by more than min_pct, and names the
    change at the run where the shift began.
    """
    fp = record_fingerprint(store, run_id, hosts)
    found: list[Regression] = []
    notes: list[str] = []
    latest: dict[tuple[str, str], Metric] = {}
    for h, m in metrics:
        latest[(h, m.name)] = m
    attr_cache: dict[str, str] = {}
    for (h, name), m in latest.items():
        value = float(m.value)
        start = store.reference_start(playbook, h, name)
        since = start if start is not None and start < run_id else None
        inc = store.open_incident_for(playbook, h, name)
        if inc is not None:
            rows = store.metric_history(playbook, h, name, before_run=inc["ref_before_run"], since_run=since,
                                        limit=cfg.window, exclude_incident_runs=True)
            what = f"the {len(rows)} runs before the drop (run #{inc['opened_run']})"
        else:
            limit = BASELINE_SPAN_LIMIT if since else cfg.window
            rows = store.metric_history(playbook, h, name, before_run=run_id, since_run=since, limit=limit,
                                        exclude_incident_runs=True)
            base = store.baseline(playbook, h)
            what = (f"the {len(rows)} runs since baseline #{since}" if since and base and base["run_id"] == since
                    else f"the {len(rows)} runs since acknowledged run #{since}" if since
                    else f"the last {len(rows)} successful runs")
        j = judge(name, value, [r["value"] for r in rows], better=m.better, min_pct=cfg.min_pct,
                  k_sigma=cfg.k_sigma, min_history=cfg.min_history, unit=m.unit, what=what)
        shift = _worse_shift(store, playbook, h, name, run_id, value, since, m.better, cfg)
        if inc is not None:
            worse = j.delta_pct < 0 if m.better == "higher" else j.delta_pct > 0
            recovered = j.verdict != "insufficient" and (not worse or abs(j.delta_pct) <= cfg.min_pct / 2)
            if j.verdict == "insufficient":
                notes.append(f"{h}: {j.reason} ({name}); incident #{inc['id']} stays open")
            elif recovered:
                # Hysteresis: back within half of min_pct of the reference (or better), so a drop
                # that hovers at the threshold does not open and close an incident every night.
                store.close_incident(inc["id"], "recovered", "eaglebot",
                                     f"{name} {_num(value)} is back within {cfg.min_pct / 2:g}% of the reference "
                                     f"{_num(float(j.reference or 0))} at run #{run_id}", run_id)
                notes.append(f"{h}: {name} recovered at run #{run_id}: incident #{inc['id']} "
                             f"(open since run #{inc['opened_run']}) closed")
                if j.verdict == "improvement":
                    r = j.as_regression(h)
                    if r is not None:
                        found.append(r)
            else:
                store.incident_flagged(inc["id"], run_id)
                direction = "below" if j.delta_pct < 0 else "above"
                reason = (f"still {abs(j.delta_pct):.1f}% {direction} the reference since run #{inc['opened_run']} "
                          f"(open incident #{inc['id']}; it closes within {cfg.min_pct / 2:g}% of the reference): "
                          f"{j.reason}" + (f"; {shift[1]}" if shift else ""))
                found.append(Regression(name, value, float(j.reference or 0.0), round(j.delta_pct, 2), reason,
                                        kind="regression", host=h))
            continue
        if j.verdict == "insufficient" and shift is None:
            notes.append(f"{h}: {j.reason} ({name})")
            continue
        if j.verdict == "regression":
            if h not in attr_cache:
                attr_cache[h] = _attribute(store, playbook, h, run_id, fp.get(h) or empty_state())
            extra = attr_cache[h] + (f"; {shift[1]}" if shift else "")
            r = j.as_regression(h, extra)
            assert r is not None
            store.open_incident(playbook=playbook, host=h, metric=name, run_id=run_id, ref_before_run=run_id,
                                reference=j.reference, unit=m.unit, better=m.better)
            found.append(r)
        elif shift is not None:
            sh, text, cp_run = shift
            delta = round(100.0 * (value - sh.before_mean) / abs(sh.before_mean), 2) if sh.before_mean else 0.0
            store.open_incident(playbook=playbook, host=h, metric=name, run_id=run_id, ref_before_run=cp_run,
                                reference=sh.before_mean, unit=m.unit, better=m.better)
            found.append(Regression(name, value, round(sh.before_mean, 4), delta, text, kind="regression", host=h))
        elif j.verdict == "improvement":
            r = j.as_regression(h)
            if r is not None:
                found.append(r)
    return found, notes


def _worse_shift(store: Any, playbook: str, host: str, metric: str, run_id: int, value: float,
                 since: int | None, better: str, cfg: RegressionConfig) -> tuple[Shift, str, int] | None:
    """The change point the newest value sits after, when it made the metric worse by more
    than min_pct: (shift, the sentence with its attribution, the run where it began)."""
    from eaglebot.history.changepoint import latest_shift  # numpy: loaded when a run is judged

    rows = list(reversed(store.metric_history(playbook, host, metric, before_run=run_id, since_run=since,
                                              limit=CP_WINDOW - 1)))
    if len(rows) + 1 < CP_MIN_RUNS:
        return None
    ids = [int(r["run_id"]) for r in rows] + [run_id]
    sh = latest_shift([float(r["value"]) for r in rows] + [value])
    if sh is None or abs(sh.delta_pct) <= cfg.min_pct:
        return None
    worse = sh.delta_pct < 0 if better == "higher" else sh.delta_pct > 0
    if not worse:
        return None
    cp_run, prev_run = ids[sh.start], ids[sh.start - 1]
    n_steps = len(sh.points)
    how = "in one step" if n_steps == 1 else f"over {ids[sh.points[-1].index] - cp_run + 1}+ runs ({n_steps} steps)"
    changes = state_changes(host_state(store, host, prev_run), host_state(store, host, cp_run), cp_run)
    text = (f"change point: {metric} moved {sh.delta_pct:+.1f}% ({_num(sh.before_mean)} → {_num(sh.after_mean)}) "
            f"{how}, beginning at run #{cp_run} (confidence {100 * sh.confidence:.2f}%, E-divisive + t-test); "
            f"at run #{cp_run} vs #{prev_run}: {attribution_sentence(changes)}")
    return sh, text, cp_run


def _attribute(store: Any, playbook: str, host: str, run_id: int, now: dict[str, Any]) -> str:
    good = store.previous_good_run(playbook, host, run_id)
    if good is None:
        return attribution_text(None, [], host)
    gid = good["id"]
    good_state = host_state(store, host, gid)
    changes = store.host_changes(host, gid, run_id)
    patch_sets = []
    for s in store.host_steps(host, gid, run_id):
        if s["skill"] == "config.patch":
            params = _loads(s.get("params"), {})
            if isinstance(params, dict) and isinstance(params.get("set"), dict):
                patch_sets.append((str(params.get("path") or "?"), params["set"]))
    text = attribution_text(gid, attribution(good_state, now, changes, patch_sets), host)
    ranked = state_changes(good_state, now, run_id)
    return text + (f"; {attribution_sentence(ranked)}" if ranked else "")


def attribute_fixed(store: Any, run_id: int, playbook: str, regressions: list[Regression]) -> None:
    """Regressions against fixed baselines (bench.compare) get the same "what changed" sentence."""
    cache: dict[str, str] = {}
    for r in regressions:
        if r.kind != "regression" or "good run" in r.reason:
            continue
        if r.host not in cache:
            cache[r.host] = _attribute(store, playbook, r.host, run_id, host_state(store, r.host, run_id))
        old, r.reason = r.reason, f"{r.reason}; {cache[r.host]}"
        store.update_regression_reason(run_id, r.host, r.metric, old, r.reason)


async def history_hook(engine: Any, outcome: Any, playbook: Any) -> list[Regression]:
    """Post-run hook: fingerprint every real run; judge the metrics of runs that did not fail."""
    if outcome.dry_run:
        return []
    store = engine.store
    failed = any(s.status == "failed" and not s.tolerated for s in outcome.steps)
    if failed or await store.cancel_requested(outcome.run_id):
        await store.call(lambda s: record_fingerprint(s, outcome.run_id, list(outcome.hosts)))
        return []
    found: list[Regression]
    notes: list[str]
    found, notes = await store.call(lambda s: check_run(s, outcome.run_id, outcome.playbook, list(outcome.hosts),
                                                        list(outcome.metrics), engine.settings.regression))
    await store.call(lambda s: attribute_fixed(s, outcome.run_id, outcome.playbook, outcome.regressions))
    for n in notes:
        await store.add_event(outcome.run_id, "regression-check", n)
    return found
