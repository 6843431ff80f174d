"""The commands around the running bot: serve, doctor and schedules. Each hands over to its
own module, imported only when the command runs."""
from __future__ import annotations

import argparse
import shlex

from eaglebot.frontends.cli.common import settings as _settings


def read_env_file(path: str) -> dict[str, str]:
    """systemd's EnvironmentFile syntax, as the unit uses it: KEY=VALUE lines, `#`/`;` comments,
    a value optionally in single or double quotes."""
    from eaglebot.errors import UsageError

    out: dict[str, str] = {}
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise UsageError(f"--env-file {path}: {e.strerror or e}") from None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip().isidentifier():
            raise UsageError(f"{path}:{n}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    from eaglebot.frontends.serve import serve_main  # Slack and the scheduler load only here

    if args.env_file:
        os.environ.update(read_env_file(args.env_file))
    return serve_main(_settings(args), http_port=args.http, host=args.host)


def cmd_doctor(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.doctor import doctor_main

    return doctor_main(_settings(args), service=args.service)


def cmd_schedule(args: argparse.Namespace) -> int:
    from eaglebot.frontends.scheduler import schedule_list_main

    return schedule_list_main(_settings(args), as_json=args.json)


def cmd_schedule_pause(args: argparse.Namespace) -> int:
    """`eagle schedule pause|resume NAME`: `/eagle schedule pause|resume NAME` on the terminal
    (the same row, event and checks); a running `eagle serve` reads it when the schedule fires."""
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), f"schedule {args.schedule_cmd} {shlex.quote(args.name)}")
