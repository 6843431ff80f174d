"""The `/eagle` words' argument parsers: (word, its arguments, the whole text) -> `Command`.

Pure and cheap (Slack parses before it acks): no DB, no host, no settings. Each is named by
its word's entry in `chat/words.py`; the tuning words' own are in `chat/tuning.py`.
"""
from __future__ import annotations

import re

from eaglebot.frontends.chat import tuning
from eaglebot.frontends.chat.command import Access, Command, err, shown

MAX_HISTORY = 50

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")              # playbook / skill / metric-ish
_HOSTS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})*$")
_METRIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_RUN_ID = re.compile(r"#?\d{1,12}")
SCHEDULE_OPERATIONS = {"pause", "resume"}   # `/eagle schedule pause NAME` operates; `/eagle schedule` views


def no_args(word: str, args: list[str], text: str) -> Command:
    if args:
        return err(text, f"/eagle {word} takes no arguments (got {shown(args[0])})")
    return Command(word, text=text)


def help_args(word: str, args: list[str], text: str) -> Command:
    if len(args) > 1 or (args and not NAME.match(args[0])):
        return err(text, "usage: /eagle help [playbook|skill]")
    return Command(word, tuple(args), text=text)


def run_id(word: str, args: list[str], text: str) -> Command:
    if len(args) != 1 or not _RUN_ID.fullmatch(args[0]):
        return err(text, f"usage: /eagle {word} ID (a run number, e.g. `/eagle {word} 42`)")
    return Command(word, (args[0].lstrip("#"),), text=text)


def show(word: str, args: list[str], text: str) -> Command:
    return Command(word, ("last",), text=text) if args == ["last"] else run_id(word, args, text)


def rerun(word: str, args: list[str], text: str) -> Command:
    if len(args) == 2 and args[1] == "failed":
        cmd = run_id(word, args[:1], text)  # (failed, ID): run_id stays the last word
        return cmd if cmd.error else Command(word, ("failed", *cmd.args), text=text)
    return run_id(word, args, text)


def history(word: str, args: list[str], text: str) -> Command:
    if len(args) > 3:
        return err(text, "usage: /eagle history [playbook] [host] [n]")
    names: list[str] = []
    n = "10"
    for a in args:
        if a.isdigit() and len(a) <= 6:
            n = str(max(1, min(int(a), MAX_HISTORY)))
        elif _HOSTS.match(a) and "," not in a and len(names) < 2:
            names.append(a)
        else:
            return err(text, f"usage: /eagle history [playbook] [host] [n] (got {shown(a)})")
    return Command(word, (*names, n), text=text)


def logs(word: str, args: list[str], text: str) -> Command:
    if not 1 <= len(args) <= 2 or not _HOSTS.match(args[0]) or "," in args[0] or \
            (len(args) == 2 and not (args[1].isdigit() and 1 <= int(args[1]) <= 5000)):
        return err(text, "usage: /eagle logs HOST [LINES]   (LINES: 1 to 5000, default 60)")
    return Command(word, tuple(args), text=text)


def schedule(word: str, args: list[str], text: str) -> Command:
    if args and args[0] in SCHEDULE_OPERATIONS:
        if len(args) != 2 or not NAME.match(args[1]):
            return err(text, f"usage: /eagle schedule {args[0]} NAME (see `/eagle schedule`)")
        return Command(word, (args[0], args[1]), text=text)
    return no_args(word, args, text)


def schedule_access(args: tuple[str, ...]) -> Access:
    """`/eagle schedule` views; `/eagle schedule pause|resume NAME` operates."""
    return "operate" if args and args[0] in SCHEDULE_OPERATIONS else "view"


def baseline(word: str, args: list[str], text: str) -> Command:
    if len(args) != 2 or args[0] != "set" or not _RUN_ID.fullmatch(args[1]):
        return err(text, "usage: /eagle baseline set ID")
    return Command(word, ("set", args[1].lstrip("#")), text=text)


def trend(word: str, args: list[str], text: str) -> Command:
    if (len(args) != 3 or not NAME.match(args[0]) or not _HOSTS.match(args[1]) or "," in args[1]
            or not _METRIC.match(args[2])):
        return err(text, "usage: /eagle trend PLAYBOOK HOST METRIC (e.g. `/eagle trend bench gpu-01 output_throughput`)")
    return Command(word, tuple(args), text=text)


def tuning_args(word: str, args: list[str], text: str) -> Command:
    targs, why = tuning.parse_tuning(word, args)
    return err(text, why) if why else Command(word, targs, text=text)


def run(playbook: str, args: list[str], text: str) -> Command:
    """`/eagle <playbook> [host[,host]] [key=value ...] [--dry-run] [--force]`."""
    hosts: tuple[str, ...] = ()
    inputs: dict[str, str] = {}
    dry = force = False
    for i, tok in enumerate(args):
        if tok in ("--dry-run", "--dryrun", "--check"):
            dry = True
        elif tok == "--force":
            force = True
        elif tok.startswith("-"):
            return err(text, f"unknown option {shown(tok)}: the options are --dry-run and --force")
        elif "=" in tok:
            key, value = tok.split("=", 1)
            if not _KEY.match(key):
                return err(text, f"{shown(key)} is not an input name: inputs are key=value with a plain name")
            if key in inputs:
                return err(text, f"input {key!r} is given twice")
            inputs[key] = value
        elif i == 0:
            if not _HOSTS.match(tok):
                return err(text, f"{shown(tok)} is not a host name: hosts are letters, digits, '.', '_', '-', "
                                 "separated by commas")
            hosts = tuple(h for h in tok.split(",") if h)
        else:
            return err(text, f"unexpected argument {shown(tok)}: after the hosts, inputs are key=value "
                             f"(see `/eagle help {playbook}`)")
    return Command("run", playbook=playbook, hosts=hosts, inputs=tuple(inputs.items()), dry_run=dry, text=text,
                   force=force)
