"""Reading `eagle.yaml` without pydantic: the file itself, and the audit DB path.

`eagle history` (and other commands that only need the store) start in a fraction of the
time when they do not load the pydantic models (issue 13); `load_settings` validates the
same file in full for every command that needs more. A file this module cannot vouch for
(an unknown top-level key, a non-string audit_db) is left to the full validation, which
says what is wrong with it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eaglebot.errors import UsageError

# Settings' fields (tests/test_startup.py checks that this stays in step with the model).
TOP_KEYS = frozenset({
    "audit_db", "playbooks_dir", "skill_paths", "hosts", "groups", "default_hosts", "slack", "access",
    "schedules", "regression", "redact", "max_parallel_hosts", "max_hosts_total", "max_connecting",
    "state_dir", "audit_key_file", "output_keep_bytes", "output_dir",
    "host_defaults", "max_connecting_per_jump", "health_watch", "log_format", "metrics_port",
    "metrics_host",
})
KEY_FILE_ENV = "EAGLE_AUDIT_KEY_FILE"


SYSTEM_CONFIG = Path("/etc/eaglebot/eagle.yaml")


def user_config() -> Path:
    """~/.config/eaglebot/eagle.yaml ($XDG_CONFIG_HOME honoured)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "eaglebot" / "eagle.yaml"


def search_path(cwd: Path | None = None) -> list[Path]:
    """Where an unnamed config is looked for, first match wins (as git finds its repository):
    ./eagle.yaml, the nearest eagle.yaml in a parent folder, the user's, the system's."""
    here = (cwd or Path.cwd()).absolute()
    return [d / "eagle.yaml" for d in (here, *here.parents)] + [user_config(), SYSTEM_CONFIG]


def config_path(path: str | Path | None) -> tuple[Path, bool]:
    """The file to read and whether it was named: `path`, else $EAGLE_CONFIG, else the first
    of `search_path()` that exists; with none, ./eagle.yaml (which does not exist: defaults)."""
    explicit = path or os.environ.get("EAGLE_CONFIG")
    if explicit:
        return Path(explicit), True
    for candidate in search_path():
        if candidate.is_file():
            return (Path("eagle.yaml") if candidate.parent == Path.cwd().absolute() else candidate), False
    return Path("eagle.yaml"), False


def where_looked() -> str:
    """One phrase for messages when no config was found."""
    return (f"no eagle.yaml in this folder, its parents, {user_config()} or {SYSTEM_CONFIG}; "
            "--config or $EAGLE_CONFIG names one")


def read_config(p: Path) -> dict[str, Any]:
    """The YAML mapping in p (libyaml's loader when there is one); one clear sentence otherwise."""
    return read_config_text(p)[0]


def read_config_text(p: Path) -> tuple[dict[str, Any], str]:
    """The YAML mapping in p and its text (for line numbers in later errors)."""
    import yaml

    from eaglebot import yamlsafe

    try:
        text = p.read_text(encoding="utf-8")
        data = yamlsafe.safe_load(text) or {}
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: the config is not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise UsageError(f"{p}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UsageError(f"{p}{line}: invalid YAML: {getattr(e, 'problem', e)}") from None
    except OSError as e:
        raise UsageError(f"cannot read config {p}: {e.strerror}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{p}: the config must be a mapping of settings")
    return data, text


def audit_db_path(path: str | Path | None) -> Path | None:
    """The audit DB the config names, relative to its folder; None when only the full
    validation can tell (then call `load_settings`)."""
    p, explicit = config_path(path)
    if not p.exists():
        if explicit:
            raise UsageError(f"config file {p} does not exist")
        return Path.cwd() / "eagle.db"
    data = read_config(p)
    db = data.get("audit_db", "eagle.db")
    if set(data) - TOP_KEYS or not isinstance(db, str) or not db or db.startswith(("postgresql://", "postgres://")):
        return None   # a PostgreSQL URL is not a path (config.Settings.audit_store)
    q = Path(os.path.expanduser(db))
    return q if q.is_absolute() else p.resolve().parent / q


def audit_key_path(path: str | Path | None) -> tuple[bool, Path | None]:
    """(known, the sealing key file): as `Settings.audit_key_path`, without pydantic; known is
    False when only the full validation can tell."""
    env = os.environ.get(KEY_FILE_ENV)
    if env:
        return True, Path(os.path.expanduser(env))
    p, _ = config_path(path)
    if not p.exists():
        return True, None
    key = read_config(p).get("audit_key_file")
    if key is None:
        return True, None
    if not isinstance(key, str) or not key:
        return False, None
    q = Path(os.path.expanduser(key))
    return True, (q if q.is_absolute() else p.resolve().parent / q)
