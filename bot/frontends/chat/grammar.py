"""The `/eagle` grammar: slash text -> `Command`, pure and cheap.

Slack parses before it acks, so nothing here touches the DB, a host or the settings; the same
`parse` serves `eagle chat` and `eagle console`. The tuning words' own grammar is in
`chat/tuning.py`.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from eaglebot.engine.playbook import RESERVED
from eaglebot.engine.redact import Redactor
from eaglebot.frontends.chat import tuning

MAX_TEXT = 4000          # a slash command is at most 4000 characters in Slack too
MAX_HISTORY = 50

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")              # playbook / skill / metric-ish
_HOSTS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})*$")
_METRIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
SCHEDULE_OPERATIONS = {"pause", "resume"}   # `/eagle schedule pause NAME` operates; `/eagle schedule` views

USAGE = """\
/eagle <playbook> [host[,host]] [key=value ...] [--dry-run] [--force]   run a playbook (e.g. relaunch gpu-01
                                    spec_steps=5); --force: on a quarantined host (approvers only, audited)
/eagle help [playbook|skill|skills] this help, a playbook's inputs, a skill's parameters, every skill
/eagle playbooks | hosts            what can run, and where
/eagle history [playbook] [host] [n]
/eagle show ID                      one run: steps, metrics, warnings, regressions
/eagle status                       running runs and busy hosts
/eagle fleet                        health state per host and GPU (the health watch)
/eagle cancel ID | rerun ID [failed]  stop a run (its always-steps still run) / run it again (failed: only
                                   the hosts that failed or were unreachable)
/eagle logs HOST                    tail of the inference server's log on a host
/eagle schedule [pause|resume NAME] scheduled runs and their next fire time; pause or resume one
/eagle baseline set ID              make a run the reference for its playbook + host
/eagle trend PLAYBOOK HOST METRIC   plot a metric over recent runs
/eagle reload                       re-read eagle.yaml, playbooks, skills and tokens (approvers)
""" + tuning.HELP


@dataclass(frozen=True)
class Command:
    name: str                                   # a built-in word, "run" or "error"
    args: tuple[str, ...] = ()
    playbook: str | None = None
    hosts: tuple[str, ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()
    dry_run: bool = False
    error: str | None = None
    text: str = ""
    force: bool = False                         # run on a quarantined host (approvers only)

    @property
    def run_id(self) -> int:
        return int(self.args[-1].lstrip("#"))


def unescape(text: str) -> str:
    """Undo Slack's escaping of &, < and > (in that order: `&amp;lt;` stays `&lt;`)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


_REDACT = Redactor()  # built-in token patterns + this process's secrets: before any truncation


def _shown(tok: str, n: int = 40) -> str:
    tok = _CONTROL.sub("?", _REDACT.text(tok))
    return repr(tok if len(tok) <= n else tok[:n] + "…")


def _err(text: str, msg: str) -> Command:
    return Command("error", error=msg, text=text[:200])


def _int_arg(word: str, args: list[str], text: str) -> Command:
    if len(args) != 1 or not re.fullmatch(r"#?\d{1,12}", args[0]):
        return _err(text, f"usage: /eagle {word} ID (a run number, e.g. `/eagle {word} 42`)")
    return Command(word, (args[0].lstrip("#"),), text=text)


def parse(text: str) -> Command:
    """Slash text -> Command. Pure: no DB, no host, no settings. Never raises."""
    if len(text) > MAX_TEXT:
        return _err(text, f"the command is too long ({len(text)} characters; the limit is {MAX_TEXT})")
    text = unescape(text).strip()
    if _CONTROL.search(text.replace("\x00", "")):
        return _err(text, "the command contains control characters; type it as plain text")
    cmd = _parse_words(text)
    # A NUL inside an input's value goes on to the engine, which refuses it naming the input
    # (an input error with its `rejected` row, like any other invalid value); anywhere else it is
    # refused here.
    names = (cmd.playbook or "") + "".join(cmd.hosts) + "".join(k for k, _ in cmd.inputs)
    if "\x00" in text and cmd.name != "error" and (cmd.name != "run" or "\x00" in names):
        return _err(text, "the command contains control characters; type it as plain text")
    return cmd


def _parse_words(text: str) -> Command:
    try:
        words = shlex.split(text)
    except ValueError as e:
        return _err(text, f"cannot read the command: {e} (quotes must be balanced, e.g. key=\"a b\")")
    if not words:
        return Command("help", text=text)
    word, args = words[0], words[1:]
    low = word.lower()
    if low in RESERVED:
        return _builtin(low, args, text)
    if not _NAME.match(word) or word.endswith((".yaml", ".yml")):
        return _err(text, f"unknown command {_shown(word)}: try `/eagle help` or `/eagle playbooks`")
    return _parse_run(word, args, text)


def _builtin(word: str, args: list[str], text: str) -> Command:
    if word == "schedule" and args and args[0] in SCHEDULE_OPERATIONS:
        if len(args) != 2 or not _NAME.match(args[1]):
            return _err(text, f"usage: /eagle schedule {args[0]} NAME (see `/eagle schedule`)")
        return Command(word, (args[0], args[1]), text=text)
    if word in ("playbooks", "hosts", "status", "schedule", "fleet", "reload"):
        if args:
            return _err(text, f"/eagle {word} takes no arguments (got {_shown(args[0])})")
        return Command(word, text=text)
    if word == "help":
        if len(args) > 1 or (args and not _NAME.match(args[0])):
            return _err(text, "usage: /eagle help [playbook|skill]")
        return Command(word, tuple(args), text=text)
    if word == "show" and args == ["last"]:
        return Command(word, ("last",), text=text)
    if word == "rerun" and len(args) == 2 and args[1] == "failed":
        cmd = _int_arg(word, args[:1], text)  # (failed, ID): run_id stays the last word
        return cmd if cmd.error else Command(word, ("failed", *cmd.args), text=text)
    if word in ("show", "cancel", "rerun"):
        return _int_arg(word, args, text)
    if word == "history":
        if len(args) > 3:
            return _err(text, "usage: /eagle history [playbook] [host] [n]")
        names: list[str] = []
        n = "10"
        for a in args:
            if a.isdigit() and len(a) <= 6:
                n = str(max(1, min(int(a), MAX_HISTORY)))
            elif _HOSTS.match(a) and "," not in a and len(names) < 2:
                names.append(a)
            else:
                return _err(text, f"usage: /eagle history [playbook] [host] [n] (got {_shown(a)})")
        return Command(word, (*names, n), text=text)
    if word == "logs":
        if len(args) != 1 or not _HOSTS.match(args[0]) or "," in args[0]:
            return _err(text, "usage: /eagle logs HOST")
        return Command(word, tuple(args), text=text)
    if word == "baseline":
        if len(args) != 2 or args[0] != "set" or not re.fullmatch(r"#?\d{1,12}", args[1]):
            return _err(text, "usage: /eagle baseline set ID")
        return Command(word, ("set", args[1].lstrip("#")), text=text)
    if word == "trend":
        if (len(args) != 3 or not _NAME.match(args[0]) or not _HOSTS.match(args[1]) or "," in args[1]
                or not _METRIC.match(args[2])):
            return _err(text, "usage: /eagle trend PLAYBOOK HOST METRIC (e.g. `/eagle trend bench gpu-01 output_throughput`)")
        return Command(word, tuple(args), text=text)
    if word in tuning.WORDS:
        targs, why = tuning.parse_tuning(word, args)
        return _err(text, why) if why else Command(word, targs, text=text)
    return _err(text, f"unknown command {_shown(word)}")  # pragma: no cover - RESERVED is covered above


def _parse_run(playbook: str, args: list[str], text: str) -> Command:
    hosts: tuple[str, ...] = ()
    inputs: dict[str, str] = {}
    dry = force = False
    for i, tok in enumerate(args):
        if tok in ("--dry-run", "--dryrun", "--check"):
            dry = True
        elif tok == "--force":
            force = True
        elif tok.startswith("-"):
            return _err(text, f"unknown option {_shown(tok)}: the options are --dry-run and --force")
        elif "=" in tok:
            key, value = tok.split("=", 1)
            if not _KEY.match(key):
                return _err(text, f"{_shown(key)} is not an input name: inputs are key=value with a plain name")
            if key in inputs:
                return _err(text, f"input {key!r} is given twice")
            inputs[key] = value
        elif i == 0:
            if not _HOSTS.match(tok):
                return _err(text, f"{_shown(tok)} is not a host name: hosts are letters, digits, '.', '_', '-', "
                                  "separated by commas")
            hosts = tuple(h for h in tok.split(",") if h)
        else:
            return _err(text, f"unexpected argument {_shown(tok)}: after the hosts, inputs are key=value "
                              f"(see `/eagle help {playbook}`)")
    return Command("run", playbook=playbook, hosts=hosts, inputs=tuple(inputs.items()), dry_run=dry, text=text,
                   force=force)
