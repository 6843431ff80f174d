"""The commands around the running bot: serve, doctor and schedules. Each hands over to its
own module, imported only when the command runs."""
from __future__ import annotations

import argparse
import shlex

from eaglebot.frontends.cli.common import settings as _settings


def cmd_serve(args: argparse.Namespace) -> int:
    from eaglebot.frontends.service.serve import serve_main  # Slack and the scheduler load only here

    return serve_main(_settings(args), http_port=args.http, host=args.host, env_file=args.env_file,
                      verbose=args.verbose)


def cmd_doctor(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.doctor import doctor_main

    return doctor_main(_settings(args), service=args.service)


def cmd_schedule(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.common import view_store
    from eaglebot.frontends.service.scheduler import schedule_list_main

    settings = _settings(args)
    with view_store(args) as store:
        return schedule_list_main(settings, as_json=args.json, store=store)


def cmd_schedule_pause(args: argparse.Namespace) -> int:
    """`eagle schedule pause|resume NAME`: `/eagle schedule pause|resume NAME` on the terminal
    (the same row, event and checks); a running `eagle serve` reads it when the schedule fires."""
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), f"schedule {args.schedule_cmd} {shlex.quote(args.name)}")
