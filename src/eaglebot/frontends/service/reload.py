"""Reload without a restart: SIGHUP to `eagle serve`, or `/eagle reload` (approvers).

Re-reads the environment file (`eagle serve --env-file`), eagle.yaml, the playbooks and the
skills, checks all of it, and only then swaps the configuration (`Services.swap`): new
commands and runs use the new one, running runs finish with theirs. A config that does not
load (YAML, an unknown key, a bad playbook or schedule) is refused with its file:line and
the old one stays. Each reload, done or refused, is an `events` row of kind `reload` and one
log line; the answer says what changed. `on_reload` callbacks (the scheduler, the health
watch, the Slack client) follow the new configuration.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from eaglebot.config import Settings, load_settings
from eaglebot.engine.records import Observer
from eaglebot.engine.registry import SkillRegistry
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends import oplog
from eaglebot.frontends.config_check import check, playbook_digests
from eaglebot.frontends.services import Services, Snapshot

log = logging.getLogger("eaglebot.reload")

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_env_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile syntax: KEY=VALUE lines, `#` and `;` comments, blank lines,
    values optionally in single or double quotes (in double quotes, backslash escapes the next
    character), a trailing backslash continues the line. No variable expansion, as in systemd.
    Written here because python-dotenv's rules (expansion, `export`) are not systemd's."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read the environment file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the environment file is not UTF-8 text") from None
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, raw = i + 1, lines[i]
        while raw.endswith("\\") and i + 1 < len(lines):
            i += 1
            raw = raw[:-1] + lines[i]
        i += 1
        s = raw.strip()
        if not s or s[0] in "#;":
            continue
        key, eq, value = s.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not _KEY.match(key):
            raise UsageError(f"{path}:{start}: expected KEY=VALUE (got {s[:40]!r}...)"
                             if len(s) > 40 else f"{path}:{start}: expected KEY=VALUE (got {s!r})")
        out[key] = _unquote(value, f"{path}:{start}")
    return out


def _unquote(value: str, where: str) -> str:
    if len(value) >= 1 and value[0] in "'\"":
        q = value[0]
        if len(value) < 2 or value[-1] != q:
            raise UsageError(f"{where}: unbalanced {q} quote")
        inner = value[1:-1]
        return re.sub(r"\\(.)", r"\1", inner) if q == '"' else inner
    return value


class EnvFile:
    """The environment file: its values override the process environment, at start and on
    each reload; a key removed from the file gets its original value back."""

    def __init__(self, path: Path):
        self.path = path
        self._original: dict[str, str | None] = {}   # what the process had before we set it

    def saved(self) -> tuple[dict[str, str], dict[str, str | None]]:
        return dict(os.environ), dict(self._original)

    def restore(self, saved: tuple[dict[str, str], dict[str, str | None]]) -> None:
        """The environment as `saved` had it (a refused reload leaves no trace)."""
        environ, original = saved
        for key in [k for k in os.environ if k not in environ]:
            del os.environ[key]
        os.environ.update(environ)
        self._original = dict(original)

    def load(self) -> dict[str, str]:
        return read_env_file(self.path)

    def apply(self, values: dict[str, str]) -> set[str]:
        """Set `values` in os.environ; the names whose value changed (never the values: secrets)."""
        changed: set[str] = set()
        for key in [k for k in self._original if k not in values]:
            old = self._original.pop(key)
            if os.environ.get(key) != old:
                changed.add(key)
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        for key, value in values.items():
            self._original.setdefault(key, os.environ.get(key))
            if os.environ.get(key) != value:
                changed.add(key)
                os.environ[key] = value
        return changed


@dataclass
class Change:
    """What a reload changed, in words for the log and Slack."""
    parts: list[str] = field(default_factory=list)

    def added_removed(self, what: str, old: dict[str, object], new: dict[str, object]) -> None:
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
        bits = [f"+{k}" for k in added] + [f"-{k}" for k in removed] + [f"~{k}" for k in changed]
        if bits:
            self.parts.append(f"{what} {' '.join(bits)}")

    def __str__(self) -> str:
        return "; ".join(self.parts) or "nothing changed"


Hook = Callable[[Snapshot, Snapshot, set[str]], Awaitable[None]]   # (old, new, env names changed)
Check = Callable[[set[str]], Awaitable[str | None]]                 # env names changed -> why refused, or None


class Reloader:
    """`reload(who)`: the whole reload; one at a time."""

    def __init__(self, services: Services, *, config: Path | None, env_file: EnvFile | None = None,
                 watchers: Callable[[], list[Observer]] = list):
        self.services = services
        self.config = config
        self.env_file = env_file
        self.watchers = watchers
        self.checks: list[Check] = []      # may refuse a reload before anything is swapped (a new token)
        self.on_reload: list[Hook] = []    # follow a reload that was done (scheduler, health watch)
        self._lock = asyncio.Lock()
        self._playbooks = playbook_digests(services.settings)

    async def reload(self, who: str) -> tuple[bool, str]:
        """(done, the answer for whoever asked: what changed, or why the reload was refused)."""
        async with self._lock:
            try:
                old, new, env_changed, change = await self._load()
            except EagleError as e:
                msg = f"reload refused, the running configuration stays: {e}"
                await self._record(who, "refused", msg)
                oplog.line("reload", user=who, outcome="refused", error=str(e), level=logging.WARNING)
                return False, msg
            self.services.swap(new)
            msg = f"reloaded: {change}"
            await self._record(who, "ok", msg)
            oplog.line("reload", user=who, outcome="ok", changes=str(change))
            for hook in self.on_reload:
                try:
                    await hook(old, new, env_changed)
                except Exception as e:
                    log.exception("after the reload: %s failed", getattr(hook, "__name__", "a hook"))
                    msg += f" (but {getattr(hook, '__name__', 'a hook')} failed: {type(e).__name__}: {e})"
            await self.services.close_idle()
            return True, msg

    async def _record(self, who: str, outcome: str, msg: str) -> None:
        try:
            said = self.services.redactor.text(f"by {who}: {msg}")[:2000]
            await self.services.store.call(lambda s: s.add_event(None, "reload", said))
        except Exception:
            log.exception("could not record the reload event")

    async def _load(self) -> tuple[Snapshot, Snapshot, set[str], Change]:
        env_changed: set[str] = set()
        saved = None
        if self.env_file is not None:
            env = await asyncio.to_thread(self.env_file.load)
            saved = self.env_file.saved()
            env_changed = self.env_file.apply(env)
        try:
            settings, registry, digests = await asyncio.to_thread(self._read)
            for check in self.checks:
                why = await check(env_changed)
                if why:
                    raise UsageError(why)
        except BaseException:
            if self.env_file is not None and saved is not None:
                self.env_file.restore(saved)
            raise
        old = self.services.current
        change = _diff(old.settings, settings, old.registry, registry, self._playbooks, digests, env_changed)
        self._playbooks = digests
        return old, Snapshot.build(settings, self.services.store, self.watchers(), registry), env_changed, change

    def _read(self) -> tuple[Settings, SkillRegistry, dict[str, object]]:
        settings = load_settings(self.config)
        cur = self.services.settings
        if settings.audit_store != cur.audit_store or settings.audit_key_path != cur.audit_key_path:
            raise UsageError("audit_db or audit_key_file changed: that needs a restart of eagle serve")
        registry, digests = check(settings)
        return settings, registry, digests


def _diff(old: Settings, new: Settings, old_reg: SkillRegistry, new_reg: SkillRegistry,
          old_pb: dict[str, object], new_pb: dict[str, object], env: set[str]) -> Change:
    c = Change()
    c.added_removed("hosts", {k: v.model_dump() for k, v in old.hosts.items()},
                    {k: v.model_dump() for k, v in new.hosts.items()})
    c.added_removed("groups", dict(old.groups), dict(new.groups))
    c.added_removed("playbooks", old_pb, new_pb)
    c.added_removed("schedules", {s.name: s.model_dump() for s in old.schedules},
                    {s.name: s.model_dump() for s in new.schedules})
    c.added_removed("skills", {k: old_reg.describe(k) for k in old_reg}, {k: new_reg.describe(k) for k in new_reg})
    skip = {"hosts", "groups", "schedules", "host_defaults"}
    o, n = old.model_dump(), new.model_dump()
    other = sorted(k for k in set(o) | set(n) if k not in skip and o.get(k) != n.get(k))
    if other:
        c.parts.append("changed " + ", ".join(other))
    if env:
        c.parts.append("environment " + ", ".join(sorted(env)))
    return c
