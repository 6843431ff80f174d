"""The host vars anything reads, and a warning for one nothing reads but that is near one that
is: `pyton:` in eagle.yaml silently lets the playbook's default `python3` fill in.

The known names are derived, not listed again: the variables the runnable playbooks' templates
use, their inputs and `vars` (a host var overrides both), `eaglebot.sdk.PATH_VARS`, and the
names the skills and facts read from the host vars (`ctx.vars.get("python")` in their source).
`eagle doctor` and the run's pre-flight (`Engine.prepare`) both ask here.
"""
from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from eaglebot.engine import templating
from eaglebot.engine.playbook import Playbook, load_playbook, playbook_files
from eaglebot.engine.registry import SkillRegistry
from eaglebot.errors import EagleError
from eaglebot.sdk import PATH_VARS
from eaglebot.suggest import did_you_mean

CUTOFF = 0.8   # nearer than the suggestion's default: a warning on every run should not be a guess
SHARED = ("eaglebot.skills.lib", "eaglebot.facts")   # the helpers skills read host vars through


# `ctx.vars.get("python"`, `host_vars["nvidia_smi"]`: a read of a host var by name (a regex, not
# `ast`: the sources of every skill and fact parse in 0.47 s, they match in a few milliseconds).
_READ = re.compile(r"""vars(?:\.get\(|\[)\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")


@functools.cache
def _reads_in(path: str, mtime_ns: int) -> frozenset[str]:
    """The names one source file reads from the host vars."""
    try:
        return frozenset(_READ.findall(Path(path).read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        return frozenset()


def _sources(registry: SkillRegistry) -> Iterator[Path]:
    for name in registry:
        src = registry.source_file(name)   # (a shipped skill not used yet stays unimported)
        if src:
            yield Path(src)
    for package in SHARED:
        yield from Path(str(resources.files(package))).rglob("*.py")


def skill_reads(registry: SkillRegistry) -> frozenset[str]:
    """Every host var a skill (or a helper or fact it uses) reads by name."""
    out: set[str] = set()
    for path in _sources(registry):
        try:
            out |= _reads_in(str(path), path.stat().st_mtime_ns)
        except OSError:
            continue
    return frozenset(out)


def playbook_reads(pb: Playbook) -> set[str]:
    """The names a playbook's templates use, its inputs and its `vars` (a host var overrides them)."""
    names = set(pb.inputs) | set(pb.vars)
    values: list[Any] = [*pb.vars.values(), *(s.default for s in pb.inputs.values())]
    for step in (*pb.steps, *pb.always):
        values.append(step.with_)
        if step.when is not None:
            values.append(f"{{{{ {step.when} }}}}")
    return names | templating.names_used(values)


@functools.lru_cache(maxsize=16)
def _known(registry: SkillRegistry, files: tuple[tuple[str, int, int], ...]) -> frozenset[str]:
    names = set(PATH_VARS) | skill_reads(registry)
    for path, _, _ in files:
        try:
            names |= playbook_reads(load_playbook(path, registry))
        except EagleError:
            continue   # an invalid playbook: lint and doctor say so
    return frozenset(names)


def known_host_vars(registry: SkillRegistry, user_dir: Path | None) -> frozenset[str]:
    """Every host var some runnable playbook or skill reads (cached until a playbook file changes)."""
    stamps = []
    for path in playbook_files(user_dir).values():
        try:
            st = path.stat()
        except OSError:
            continue
        stamps.append((str(path), st.st_mtime_ns, st.st_size))
    return _known(registry, tuple(stamps))


def host_var_warnings(host_vars: Mapping[str, Mapping[str, Any]], known: Iterable[str]) -> list[str]:
    """One sentence per host var nothing reads that is near one something does, with the hosts
    that set it: "host var `pyton` on gpu-01, gpu-02 is read by no playbook or skill; did you
    mean 'python'?"."""
    known = frozenset(known)
    by_var: dict[tuple[str, str], list[str]] = {}
    for host, hv in host_vars.items():
        for name in hv:
            if name in known:
                continue
            hint = did_you_mean(str(name), known, CUTOFF)
            if hint:
                by_var.setdefault((str(name), hint), []).append(host)
    out = []
    for (name, hint), hosts in by_var.items():
        shown = ", ".join(hosts[:5]) + (f", … ({len(hosts)} hosts)" if len(hosts) > 5 else "")
        out.append(f"host var `{name}` on {shown} is read by no playbook or skill; {hint}")
    return out


def run_warnings(pb: Playbook, registry: SkillRegistry, user_dir: Path | None,
                 host_vars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`host_var_warnings` for a run's hosts. Cheap when every host var is one this playbook
    or a skill reads (the usual case): only then are the other playbooks not loaded."""
    near = playbook_reads(pb) | PATH_VARS
    if all(k in near for hv in host_vars.values() for k in hv):
        return []
    reads = skill_reads(registry)
    unknown = {h: hv for h, hv in host_vars.items() if any(k not in near and k not in reads for k in hv)}
    if not unknown:
        return []
    return host_var_warnings(unknown, known_host_vars(registry, user_dir) | playbook_reads(pb))
