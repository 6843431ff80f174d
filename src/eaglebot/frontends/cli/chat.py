"""`eagle chat "TEXT"` and `eagle console`: the slash grammar on a terminal.

The router is the one Slack uses; its `Reply.text` is printed, and a run it starts reports
like `eagle run` (progress on stderr, the result from the audit store on stdout).
"""
from __future__ import annotations

import asyncio
import getpass
import sys

import tempfile
from pathlib import Path

from eaglebot.config import Settings
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.runner import Approver, Observer, RunOutcome, RunRequest
from eaglebot.frontends.chat.access import command_class
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.grammar import parse
from eaglebot.frontends.chat.router import handle
from eaglebot.frontends.cli.safe import terminal_safe
from eaglebot.frontends.cli.terminal import TerminalObserver, result_text, terminal_approver
from eaglebot.frontends.services import Services, Snapshot
from eaglebot.history.view import RunView
from eaglebot.store import AsyncStore
from eaglebot.store.factory import store_exists


class TextFrontend:
    """Runs started from `eagle chat`/`console` report like `eagle run`: progress on stderr,
    approvals asked on the terminal when there is one."""

    def __init__(self, interactive: bool = False, verbose: bool = False):
        self.interactive = interactive
        self.verbose = verbose

    def observer(self, req: RunRequest) -> Observer | None:
        return TerminalObserver(verbose=self.verbose)

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None:
        return terminal_approver if self.interactive else None


async def text_command(services: Services, text: str, frontend: TextFrontend) -> int:
    """One `/eagle TEXT` on the terminal; returns its exit code."""
    caller = Caller(getpass.getuser(), origin="cli", check_access=False, frontend=frontend)
    reply = await handle(services, text, caller)
    if reply.task is not None:
        outcome: RunOutcome = await reply.task
        view = await services.store.call(lambda s: RunView.load(s, outcome.run_id))
        if view is not None:
            print(result_text(view, outcome.plan))
        return outcome.exit_code
    print(("eagle: " if reply.is_error else "") + terminal_safe(reply.text), file=sys.stderr if reply.is_error else sys.stdout)
    if reply.file is not None:   # what Slack attaches, here a file of this machine's
        print(f"file: {terminal_safe(str(reply.file))}")
    return reply.exit_code


def only_reads(text: str) -> bool:
    """Does `/eagle TEXT` only read the store (a view, or help)? `logs` runs a playbook."""
    cmd = parse(text)
    return cmd.name == "help" or (command_class(cmd) == "view" and cmd.name != "logs")


def chat_main(settings: Settings, text: str) -> int:
    """`eagle chat "TEXT"`: exactly `/eagle TEXT`, rendered as text. A view with no store yet
    reads an empty one of its own, gone after: no read-only command creates a store."""

    async def main(empty: Path | None) -> int:
        if empty is None:
            services = await Services.open(settings)
        else:
            registry = SkillRegistry.from_settings(settings)
            store = await AsyncStore.open(empty)
            services = Services(store, Snapshot.build(settings, store, registry=registry))
        try:
            return await text_command(services, text, TextFrontend())
        finally:
            await services.close()

    if only_reads(text) and not store_exists(settings.audit_store):
        with tempfile.TemporaryDirectory(prefix="eagle-empty-") as d:
            return asyncio.run(main(Path(d) / "empty.db"))
    return asyncio.run(main(None))


def console_main(settings: Settings) -> int:
    """`eagle console`: each line is `/eagle <line>`; `exit` or end of input quits."""

    async def main() -> int:
        services = await Services.open(settings)
        frontend = TextFrontend(interactive=sys.stdin.isatty())
        try:
            while True:
                try:
                    line = await asyncio.to_thread(input, "eagle> " if sys.stdin.isatty() else "")
                except EOFError:
                    break
                line = line.strip()
                if line in ("exit", "quit"):
                    break
                if not line:
                    continue
                await text_command(services, line, frontend)  # each line reports its own result
        finally:
            await services.close()
        return 0

    return asyncio.run(main())
