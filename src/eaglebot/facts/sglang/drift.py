"""The version-drift sentinel: the host's SGLang surface (`sglang_surface`, read from its installed
source in about a second, no GPU, no torch) against the records of the releases eaglebot knows
(`data/sglang-surface-<version>.json`, made from the real wheels by scripts/capture/surface.sh).

- `drift(record, host)`: what changed, section by section (flags, env vars, field names, capture
  hooks, adaptive defaults); `eagle doctor` prints it against the nearest known record.
- `launch_problems(host, args, env)`: what a launch would lose on this release, before anything
  stops: an env var the release no longer reads (refused, with what SGLang said when it retired it),
  a flag that is gone (an ambiguous prefix now, or read as another flag; refused, naming the
  replacement its last release gave); a renamed, deprecated or unknown env var is a warning.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from eaglebot.facts.fact import program_answer
from eaglebot.facts.host_programs import sglang_surface
from eaglebot.sdk import path_for_shell

TIMEOUT_S = 60.0
# The names eaglebot itself reads from a running server (bench, health, spec probe): a release that
# drops one of them makes eaglebot read nothing there, with no error.
BOT_READS = {
    "per_request": ("spec_correct_drafts_histogram", "spec_accept_histogram", "spec_num_correct_drafts",
                    "spec_accepted_drafts", "spec_num_proposed_drafts", "spec_proposed_drafts", "spec_verify_ct"),
    "server_info": ("avg_spec_accept_length", "internal_states"),
    "metrics": ("spec_accept_length", "spec_num_steps"),
}


def program() -> str:
    """The host program's text (standard library only), sent on the Python's stdin."""
    return resources.files("eaglebot.facts.host_programs").joinpath("sglang_surface.py").read_text()


def command(python: str) -> str:
    """The host's Python reading the program on stdin; a `~/` in the host var is the host's home
    (a config's `python: ~/venv/bin/python` once made the sentinel `~/...: not found`)."""
    return f"{path_for_shell(python)} -"


def parse(exit_status: int, stdout: str, stderr: str) -> dict[str, Any] | str:
    """The host's fingerprint, or why there is none (one sentence)."""
    return program_answer(sglang_surface.MARK, sglang_surface.UNAVAILABLE, "the sentinel", exit_status, stdout,
                          stderr)


# -- the records ----------------------------------------------------------------------------------

def record_file(version: str) -> str:
    return f"sglang-surface-{version}.json"


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:4])


def known_versions() -> list[str]:
    found = [p.name[len("sglang-surface-"):-len(".json")]
             for p in resources.files("eaglebot.facts").joinpath("data").iterdir()
             if p.name.startswith("sglang-surface-") and p.name.endswith(".json")]
    return sorted(found, key=_vkey)


def record(version: str) -> dict[str, Any] | None:
    path = resources.files("eaglebot.facts").joinpath("data", record_file(version))
    if not path.is_file():
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def nearest(version: str | None) -> str | None:
    """The known release closest to `version` (itself when known; on a tie the older one), counting
    a minor release as a thousand patch releases."""
    known = known_versions()
    if not known:
        return None
    if not version or not _vkey(version):
        return known[-1]

    def at(v: str) -> int:
        parts = (_vkey(v) + (0, 0, 0))[:3]
        return parts[0] * 10**6 + parts[1] * 10**3 + parts[2]

    return min(known, key=lambda v: (abs(at(v) - at(version)), _vkey(v)))


# -- drift -----------------------------------------------------------------------------------------

@dataclass
class Drift:
    """What changed from the record `base` to the fingerprint `version`, section by section."""

    base: str | None
    version: str | None
    changes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def none(self) -> bool:
        return not any(self.changes.values())

    def add(self, section: str, text: str) -> None:
        self.changes.setdefault(section, []).append(text)

    def lines(self) -> list[str]:
        return [f"{section}: {text}" for section, texts in self.changes.items() for text in texts]


def _names(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def _where(flags: dict[str, Any]) -> str:
    files = sorted(flags.get("where") or {})
    fields_ = [f for f in files if f.startswith("arg_groups/fields/")]
    return "arg_groups/fields/*.py" + (" + server_args.py" if "server_args.py" in files else "") if fields_ \
        else ", ".join(files) or "nowhere found"


def _env_read(fp: dict[str, Any]) -> set[str]:
    env = fp.get("env") or {}
    return set(env.get("declared") or []) | set(env.get("read") or [])


def _env_status(fp: dict[str, Any], name: str) -> str:
    retired = (fp.get("env") or {}).get("retired") or {}
    if name in retired:
        return str(retired[name].get("kind") or "removed")
    return "read" if name in _env_read(fp) else "absent"


def drift(base: dict[str, Any], host: dict[str, Any]) -> Drift:
    d = Drift(base.get("sglang"), host.get("sglang"))
    bf, hf = base.get("flags") or {}, host.get("flags") or {}
    if _where(bf) != _where(hf):
        d.add("flags", f"the flag table moved: {_where(bf)} -> {_where(hf)}")
    bo, ho = bf.get("options") or {}, hf.get("options") or {}
    gone = sorted(set(bo) - set(ho))
    new = sorted(set(ho) - set(bo))
    for flag in gone:
        d.add("flags", f"{flag} removed ({_flag_fate(hf, flag, bf)})")
    if new:
        d.add("flags", f"{len(new)} added: {_names(new)}")
    bd, hd = bf.get("deprecated") or {}, hf.get("deprecated") or {}
    for flag in sorted(set(hd) - set(bd)):
        d.add("flags", f"{flag} now deprecated" + (f" (use {hd[flag]})" if hd[flag] else ""))
    bdue, hdue = bf.get("removal_due") or {}, hf.get("removal_due") or {}
    for flag in sorted(f for f in hdue if bdue.get(f) != hdue[f]):
        d.add("flags", f"{flag} due for removal after {hdue[flag]}")
    if bf.get("allow_abbrev", True) != hf.get("allow_abbrev", True):
        d.add("flags", f"abbreviations {'allowed' if hf.get('allow_abbrev', True) else 'refused'} now")
    names = sorted(_env_read(base) | _env_read(host) | set((base.get("env") or {}).get("retired") or {})
                   | set((host.get("env") or {}).get("retired") or {}))
    moved: dict[tuple[str, str], list[str]] = {}
    for name in names:
        was, now = _env_status(base, name), _env_status(host, name)
        if was != now:
            moved.setdefault((was, now), []).append(name)
    # what a launch would lose first (now ignored, removed), what is merely new last
    rank = {"absent": 0, "removed": 1, "renamed": 2, "deprecated": 3, "read": 4}
    for (was, now), group in sorted(moved.items(), key=lambda m: (rank.get(m[0][1], 5), m[0])):
        what = {"absent": "ignored (no code reads it)"}.get(now, now)
        d.add("env", f"{len(group)} {was} -> {what}: {_names(group)}" if len(group) > 3 else
              f"{_names(group)}: {was} -> {what}")
    bs = (base.get("fields") or {}).get("server_info_synthesized") or {}
    hs = (host.get("fields") or {}).get("server_info_synthesized") or {}
    for key in sorted(k for k in hs if bs.get(k) != hs[k]):
        d.add("fields", f"server_info {key} synthesized" + (f" (due for removal after {hs[key]})" if hs[key] else ""))
    for section in ("per_request", "server_info", "metrics"):
        b = set((base.get("fields") or {}).get(section) or [])
        h = set((host.get("fields") or {}).get(section) or [])
        for name in sorted(b - h):
            read = " (eaglebot reads it)" if name in BOT_READS[section] else ""
            d.add("fields", f"{section} {name} dropped{read}")
        if h - b:
            d.add("fields", f"{section} added: {_names(sorted(h - b))}")
    bh, hh = base.get("hooks") or {}, host.get("hooks") or {}
    added, removed = sorted(set(hh) - set(bh)), sorted(set(bh) - set(hh))
    changed = sorted(k for k in set(bh) & set(hh) if bh[k].get("hash") != hh[k].get("hash"))
    if added:
        d.add("hooks", f"{len(added)} capture hooks added: {_names(added, 4)}")
    if removed:
        d.add("hooks", f"{len(removed)} capture hooks removed: {_names(removed, 4)}")
    for k in changed:
        differ = [a for a in ("sets", "plus_one") if bh[k].get(a) != hh[k].get(a)]
        d.add("hooks", f"{k} body changed" + (f" ({', '.join(differ)} differ)" if differ else
                                              " (meaning unknown: re-capture the rules)"))
    ba, ha = base.get("adaptive"), host.get("adaptive")
    if ba != ha:
        slots = sorted(set(ba or {}) | set(ha or {}), key=lambda s: int(s) if s.isdigit() else 0)
        diffs = [f"BS{s} {(ba or {}).get(s)} -> {(ha or {}).get(s)}" for s in slots
                 if (ba or {}).get(s) != (ha or {}).get(s)]
        d.add("adaptive", "built-in defaults: " + ("; ".join(diffs) if ba and ha else
                                                    f"{'none' if not ba else 'present'} -> "
                                                    f"{'none' if not ha else 'present'}"))
    return d


# -- what a launch would lose ------------------------------------------------------------------

def _prefix_matches(flags: dict[str, Any], flag: str) -> list[str]:
    if not flags.get("allow_abbrev", True):
        return []
    return sorted(o for o in (flags.get("options") or {}) if o.startswith(flag))


def _replacement(flag: str, history: list[dict[str, Any]], before: str) -> tuple[str | None, str | None]:
    """(the last known release older than `before` that had `flag`, the flag it named instead); a
    flag only newer releases have is no removal (SGLang's own parser refuses it)."""
    for rec in sorted(history, key=lambda r: _vkey(str(r.get("sglang") or "0")), reverse=True):
        if _vkey(before) and _vkey(str(rec.get("sglang") or "0")) >= _vkey(before):
            continue
        flags = rec.get("flags") or {}
        if flag in (flags.get("options") or {}):
            return rec.get("sglang"), (flags.get("deprecated") or {}).get(flag) or None
    return None, None


def _flag_fate(flags: dict[str, Any], flag: str, former: dict[str, Any] | None = None) -> str:
    matches = _prefix_matches(flags, flag)
    new = ((former or {}).get("deprecated") or {}).get(flag)
    then = f"; it was a deprecated alias of {new}" if new else ""
    if len(matches) >= 2:
        return f"now an ambiguous prefix of {_names(matches, 3)}{then}"
    if len(matches) == 1:
        return f"now read as an abbreviation of {matches[0]}{then}"
    return f"unknown now{then}"


def launch_problems(host: dict[str, Any], args: list[str], env: dict[str, str],
                    history: list[dict[str, Any]] | None = None) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for launching with `args` and `env` on the release `host` describes;
    `history`: the known records (where a flag or env var went, and what replaced it)."""
    history = [r for r in (history if history is not None else
                           [record(v) for v in known_versions()]) if r is not None]
    ver = host.get("sglang") or "?"
    flags = host.get("flags") or {}
    options = flags.get("options") or {}
    refusals: list[str] = []
    warnings: list[str] = []
    for word in args:
        if not word.startswith("--") or word == "--":
            continue
        flag = word.split("=", 1)[0]
        if flag in options:   # (a deprecated alias still works; SGLang's own parser warns in its log)
            due = (flags.get("removal_due") or {}).get(flag)
            if due:
                new = (flags.get("deprecated") or {}).get(flag)
                warnings.append(f"{flag} is due for removal from SGLang after {due}"
                                + (f": use {new}" if new else ""))
            continue
        last, new = _replacement(flag, history, str(ver))
        matches = _prefix_matches(flags, flag)
        instead = f"use {new}" if new else "remove it"
        if len(matches) >= 2:
            refusals.append(f"{flag} is not a flag of SGLang {ver}"
                            + (f" (removed after {last})" if last else "")
                            + f": argparse refuses it as an ambiguous prefix of {_names(matches, 3)}; {instead}")
        elif len(matches) == 1 and last is not None and new != matches[0]:
            refusals.append(f"{flag} was removed after SGLang {last}: SGLang {ver} would silently read it as "
                            f"{matches[0]}; {instead}")
        elif not matches and last is not None:   # (a flag no release had: SGLang's own parser refuses it)
            refusals.append(f"{flag} is not a flag of SGLang {ver} (removed after {last}); {instead}")
    read = _env_read(host)
    retired = (host.get("env") or {}).get("retired") or {}
    for name in sorted(env):
        if not name.startswith(("SGLANG_", "SGL_")):
            continue
        if name in retired:
            r = retired[name]
            say = f" (SGLang says: {r.get('say')})" if r.get("say") else ""
            if r.get("kind") == "removed":
                refusals.append(f"env {name} has no effect on SGLang {ver}: it was removed and only warns{say}; "
                                f"remove it from env:")
            else:
                warnings.append(f"env {name} is {r.get('kind')} in SGLang {ver}{say}")
            continue
        if name in read:
            continue
        said = None
        seen = None
        for rec in sorted(history, key=lambda r: _vkey(str(r.get("sglang") or "0")), reverse=True):
            st = _env_status(rec, name)
            if st != "absent":
                seen = seen or rec.get("sglang")
                said = said or ((rec.get("env") or {}).get("retired") or {}).get(name, {}).get("say")
        if seen is not None:
            refusals.append(f"env {name} is silently ignored by SGLang {ver} (no code reads it; SGLang {seen} "
                            f"knew it{': ' + said if said else ''}); remove it from env:")
        else:
            close = difflib.get_close_matches(name, sorted(read), n=1, cutoff=0.85)
            warnings.append(f"env {name} is read by no code of SGLang {ver}: it would be ignored"
                            + (f" (did you mean {close[0]}?)" if close else ""))
    return refusals, warnings


def report(host: dict[str, Any]) -> tuple[bool, str, dict[str, list[str]]]:
    """For `eagle doctor`: (no drift, the headline, the changes per section) of the host's surface
    against eaglebot's nearest record."""
    ver = str(host.get("sglang") or "?")
    base = nearest(ver)
    rec = record(base) if base else None
    size = (f"{len((host.get('flags') or {}).get('options') or {})} flags, {len(_env_read(host))} env vars, "
            f"{len(host.get('hooks') or {})} capture hooks")
    if rec is None:
        return False, f"SGLang {ver} ({size}): eaglebot has no record to compare with", {}
    d = drift(rec, host)
    if base == ver:
        if d.none:
            return True, f"SGLang {ver}: the surface eaglebot relies on matches its record ({size})", {}
        return False, f"SGLang {ver} differs from eaglebot's record of {ver} (a patched or rebuilt install?)", \
            d.changes
    return False, f"SGLang {ver} is a release eaglebot has no record of; drift against the nearest, {base}", \
        d.changes
