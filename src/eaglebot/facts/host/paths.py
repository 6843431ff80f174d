"""The host's own paths, resolved by the host once per run: its home and the bot's state folder.

`state_dir` comes from eagle.yaml (default `~/.eaglebot`); `~` and `$VARS` in it are the HOST's
(the SSH user's home, its environment), so only the host can say what it is. The engine runs
`command` once when a run reaches a host and hands every skill the absolute path
(`ctx.state_dir`) and the home (`ctx.host_path` turns a user's `~/...` into an absolute path
without another round trip). A skill therefore never puts a `~` it did not get from the user
into a command line: a program given `'~/x'` as an argument (Python, SGLang) does not expand it.
"""
from __future__ import annotations

from dataclasses import dataclass

from eaglebot.sdk import path_for_shell

_MARK = "EAGLE-HOST-PATHS"


@dataclass(frozen=True)
class HostPaths:
    home: str
    state_dir: str


def command(state_dir: str, create: bool = True) -> str:
    """One round trip: the home, then the state folder made (unless `create` is false: a dry run
    changes nothing) and named by `pwd -P` (symlinks resolved, relative paths against the login
    folder)."""
    d = f"d={path_for_shell(state_dir, expand_vars=True)}"
    if create:
        made = 'mkdir -p -- "$d" && cd -- "$d" && pwd -P'
    else:
        made = ('if cd -- "$d" 2>/dev/null; then pwd -P; else case "$d" in /*) printf \'%s\\n\' "$d";; '
                '*) printf \'%s/%s\\n\' "$PWD" "$d";; esac; fi')
    return f"printf '{_MARK} %s\\n' \"$HOME\"; {d}; {made}"


def printed(home: str, state_dir: str) -> str:
    """What `command` prints on a host whose home is `home` and state folder `state_dir`
    (eaglebot.testing's scripted hosts answer with it)."""
    return f"{_MARK} {home}\n{state_dir}\n"


def parse(stdout: str) -> HostPaths:
    """The home and the absolute state folder; ValueError with what went wrong."""
    lines = stdout.splitlines()
    home = next((ln[len(_MARK) + 1:] for ln in lines if ln.startswith(_MARK + " ")), None)
    if home is None:
        raise ValueError("the host printed nothing")
    rest = [ln for ln in lines[lines.index(f"{_MARK} {home}") + 1:] if ln.strip()]
    if not rest or not rest[-1].startswith("/"):
        raise ValueError("the host did not name an absolute folder")
    return HostPaths(home=home.rstrip("/") if home != "/" else home, state_dir=rest[-1])

