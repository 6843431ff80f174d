"""A chat test bot (Errbot's `testbot`, for eaglebot): `/eagle ...` said to the product's own
Slack app, in process, its hosts scripted `Host`s; what the bot answered and what each host
ran come back for the test to check.

    bot = await ChatBot.open(tmp_path, hosts={"gpu-01": {"scheduler": "slurm"}}, playbooks={"drain-node": DRAIN})
    bot.host("gpu-01").on(cluster.sinfo_command("gpu-01"), stdout="gpu-01 idle none\\n")
    said = await bot.say("/eagle drain-node gpu-01")       # DRAIN's step: node.drain, confirm: true
    assert said.card is not None                          # an approval card, with its buttons
    await bot.click(said.card, "Deny", user="UBOSS")
    assert (await bot.runs())[0]["status"] == "failed"
    assert bot.host("gpu-01").commands == [cluster.sinfo_command("gpu-01")]   # nothing was drained

The `chatbot` pytest fixture (eaglebot.testing.plugin) opens one per test in its tmp_path.
What a said command goes through is the product's: the request is built and signed as Slack
signs it and answered by the app's `answer_bytes` (signature check, screen, Bolt's dispatch,
the `/eagle` listener, access, the router, the engine, the audit store in SQLite). Only
Slack's servers are replaced (frontends/slack/inmemory.py records what the app sends), and
the hosts: each configured host is a `ChatHost`, the scripted `Host` with the engine's own
state-folder round trip already scripted.
"""
from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from eaglebot.config import load_settings
from eaglebot.facts.host import paths
from eaglebot.frontends.services import Services
from eaglebot.frontends.slack.app import SlackBot, build_app
from eaglebot.frontends.slack.inmemory import (IDENTITY, RecordingWebClient, RecordingWebhook, Sent, SlackRecord,
                                               action_body, command_body, signed_headers)
from eaglebot.store.rows import RunRow
from eaglebot.sdk import CommandResult
from eaglebot.testing import Host, Unscripted
from eaglebot.transport.base import StepProcs

__all__ = ["ChatBot", "ChatHost", "Said", "Sent"]

CHANNEL = "C0EAGLE"
ACCESS = {"operators": ["UALICE"], "approvers": ["UBOSS"], "viewers": ["*"]}
SETTLE_S = 120.0   # a bound on a command's work, not a wait: say() returns as soon as it is done


class ChatHost(Host):
    """A configured host of the chat bot: the scripted `Host`, held by the engine as its
    transport. The engine's own first command on it (make and name the state folder) is
    answered with `home`/`state_dir` and left out of `commands` (`calls` has it); nothing is
    ever left running on it, so a step's clean-up finds nothing. `unscripted`: the commands it
    was not scripted for (the step fails; `ChatBot.say` raises the first)."""

    def __init__(self, name: str, *, state_dir_setting: str = "~/.eaglebot", home: str = "/home/eagle",
                 state_dir: str = "/home/eagle/.eaglebot"):
        super().__init__(name)
        self.unscripted: list[Unscripted] = []
        self._probes = _StateProbe({paths.command(state_dir_setting, create=c) for c in (True, False)})
        self.on(self._probes, stdout=paths.printed(home, state_dir))

    @property
    def commands(self) -> list[str]:
        """The commands the run's steps ran, in order."""
        return [c for c in super().commands if not self._probes(c)]

    async def run(self, cmd: str | Sequence[str], **kw: Any) -> CommandResult:
        try:
            return await super().run(cmd, **kw)
        except Unscripted as e:   # the engine records it as the step's internal error; say() raises it
            self.unscripted.append(e)
            raise

    async def close(self) -> None:
        return None

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False,
                      since_wall: float | None = None) -> str:
        return "nothing was left running"

    async def leftovers(self, sp: StepProcs) -> tuple[int, str]:
        return 0, ""


@dataclass
class Said:
    """What one message (or click) got back: the HTTP `status` and the `ack` text Slack shows
    the sender at once (None: an empty ack), then everything the bot `sent` because of it
    (posts, edits, response_url answers, uploads), the `run` it started (its audit row, as it
    stands when the work settled: finished, or waiting on an approval) and the approval `card`
    waiting for a click, if any."""

    status: int
    ack: str | None
    sent: list[Sent] = field(default_factory=list)
    run: RunRow | None = None
    card: Sent | None = None

    @property
    def messages(self) -> list[Sent]:
        """The messages the bot posted or answered with (chat.postMessage, response_url), in order."""
        return [s for s in self.sent if s.method in ("chat.postMessage", "response_url")]

    @property
    def text(self) -> str:
        """The ack and every message's text, one per line: what the sender read."""
        return "\n".join([self.ack or "", *(m.text for m in self.messages)]).strip()


class ChatBot:
    """The product's Slack app in process, over scripted hosts (see the module docstring)."""

    def __init__(self, services: Services, bot: SlackBot, record: SlackRecord, hosts: dict[str, ChatHost],
                 secret: str, *, user: str, channel: str):
        self.services, self.bot, self.record, self.hosts = services, bot, record, hosts
        self.secret, self.user, self.channel = secret, user, channel
        self._n = 0

    @classmethod
    async def open(cls, folder: str | Path, *, hosts: Mapping[str, Mapping[str, Any]] | Sequence[str] = ("gpu-01",),
                   playbooks: Mapping[str, Mapping[str, Any]] | None = None, access: Mapping[str, Any] | None = ACCESS,
                   user: str = "UALICE", channel: str = CHANNEL, **config: Any) -> ChatBot:
        """A chat bot whose eagle.yaml and audit store are in `folder`: `hosts` by name (with
        their vars), `playbooks` written into its playbooks_dir (beside the shipped ones),
        `access` (default: UALICE operates, UBOSS approves, anyone views; None: no access
        section, where Slack users may view but operate nothing), `config` more
        eagle.yaml keys. `user` says things in `channel` unless told otherwise."""
        root = Path(folder)
        pdir = root / "playbooks"
        pdir.mkdir(parents=True, exist_ok=True)
        for name, pb in (playbooks or {}).items():
            (pdir / f"{name}.yaml").write_text(yaml.safe_dump(dict(pb), sort_keys=False))
        named = hosts if isinstance(hosts, Mapping) else {h: {} for h in hosts}
        cfg: dict[str, Any] = {
            "audit_db": str(root / "eagle.db"), "playbooks_dir": str(pdir),
            "slack": {"channel": channel},
            # never connected: the engine holds a ChatHost for each
            "hosts": {h: {"address": "127.0.0.1", "vars": dict(v)} for h, v in named.items()},
            **({"access": dict(access)} if access is not None else {}),
            **config}
        (root / "eagle.yaml").write_text(yaml.safe_dump(cfg))
        services = await Services.open(load_settings(root / "eagle.yaml"))
        doubles = {h: ChatHost(h, state_dir_setting=services.settings.state_dir) for h in named}
        for h, double in doubles.items():
            services.pool.use(h, double)
        record = SlackRecord()
        secret = secrets.token_hex(16)
        bot = build_app(services, client=RecordingWebClient(record), signing_secret=secret, identity=dict(IDENTITY),
                        webhooks=lambda url: RecordingWebhook(url, record))
        # Edits are paced per message in Slack (the Slack surface's tests check it); here the
        # final edit goes out as soon as the run ends, so a test does not wait for the pace.
        bot.ctx.coalescer.per_message_s = 0.0
        return cls(services, bot, record, doubles, secret, user=user, channel=channel)

    def host(self, name: str) -> ChatHost:
        """The scripted host `name` (script it with `.on(...)` before saying what runs on it)."""
        return self.hosts[name]

    async def say(self, text: str, *, user: str | None = None, channel: str | None = None) -> Said:
        """`text` (with or without a leading `/eagle`) as a slash command from `user`; returns
        once everything it set off is over, or waits on an approval card."""
        words = text.strip()
        command, _, rest = words.partition(" ") if words.startswith("/") else ("/eagle", "", words)
        body = command_body(rest.strip(), user=user or self.user, channel=channel or self.channel,
                            response_url=self._response_url(), command=command)
        return await self._send(body)

    async def click(self, card: Sent, button: str, *, user: str) -> Said:
        """Click the button labelled (or with the action_id) `button` on `card` as `user`."""
        chosen = next((b for b in card.buttons if button in ((b.get("text") or {}).get("text"), b.get("action_id"))),
                      None)
        if chosen is None:
            labels = [(b.get("text") or {}).get("text") for b in card.buttons]
            raise AssertionError(f"no button {button!r} on the card (buttons: {labels})")
        return await self.press(str(chosen["action_id"]), str(chosen.get("value") or ""), user=user,
                                channel=str(card.args.get("channel") or self.channel),
                                message_ts=str(card.answer.get("ts") or ""))

    async def press(self, action_id: str, value: str, *, user: str, channel: str | None = None,
                    message_ts: str = "1700000001.000100") -> Said:
        """A click on a button with `action_id` and `value`, as Slack posts it (`click` finds
        them on a card; this is for a button the test builds itself)."""
        body = action_body(action_id, value, user=user, channel=channel or self.channel,
                           response_url=self._response_url(), message_ts=message_ts)
        return await self._send(body)

    async def runs(self) -> list[RunRow]:
        """The audit store's runs, newest first."""
        return await self.services.store.call(lambda s: s.history(limit=100))

    async def close(self) -> None:
        await self.bot.aclose(grace_s=10)
        await self.services.close()

    def _response_url(self) -> str:
        self._n += 1
        return f"memory://response/{self._n}"

    async def _send(self, body: str) -> Said:
        """Answer one signed request; then, after its work settled, a command a host was not
        scripted for fails the test (Unscripted), as it does with the Host double alone."""
        before = len(self.record.sent)
        missed = {name: len(h.unscripted) for name, h in self.hosts.items()}
        last = await self.services.store.call(lambda s: s.history(limit=1))
        app = self.bot.app
        with app.eagle_acks.request():
            resp = await app.answer_bytes(body.encode(), signed_headers(body, self.secret))
        await self._settle()
        for name, h in self.hosts.items():
            if len(h.unscripted) > missed[name]:
                raise h.unscripted[missed[name]]
        sent = self.record.sent[before:]
        newest = await self.services.store.call(lambda s: s.history(limit=1))
        run = newest[0] if newest and (not last or newest[0]["id"] != last[0]["id"]) else None
        cards = [s for s in sent if s.buttons and _waiting(self.bot, s)]
        return Said(resp.status, _ack_text(resp.body), sent, run, cards[-1] if cards else None)

    async def _settle(self) -> None:
        """Until the tasks the bot has going are done, but for those that wait on a click: a
        run whose approval card is out, its thread's poster, and the card's poll for a decision.
        Woken by a task's end or by anything sent to Slack (a task started meanwhile, such as
        the card's, is seen then)."""
        deadline = asyncio.get_running_loop().time() + SETTLE_S
        sent = asyncio.Event()
        self.record.listeners.append(lambda _: sent.set())
        try:
            await self._until_settled(deadline, sent)
        finally:
            self.record.listeners.pop()

    async def _until_settled(self, deadline: float, sent: asyncio.Event) -> None:
        ctx = self.bot.ctx
        loop = asyncio.get_running_loop()
        while True:
            sent.clear()
            out = [p for p in ctx.pending.values() if p.ts is not None and not p.future.done()]
            blocked = {ctx.runs.get(p.request.run_id) for p in out}
            names = {f"eagle-run-{p.request.run_id}-slack" for p in out} | ({"eagle-approval-poll"} if out else set())
            active = [t for t in (*ctx.tasks, *ctx.runs.values())
                      if not t.done() and t not in blocked and t.get_name() not in names]
            if not active:
                return
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"the bot's work did not settle within {SETTLE_S:.0f} s: "
                                     f"{sorted(t.get_name() for t in active)}")
            woken = asyncio.ensure_future(sent.wait())
            await asyncio.wait([*active, woken], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()


@dataclass(frozen=True)
class _StateProbe:
    """Matches the engine's state-folder round trip (with or without making the folder)."""

    commands: set[str]

    def __call__(self, cmd: str) -> bool:
        return cmd in self.commands

    def __repr__(self) -> str:
        return "the engine's state-folder probe"


def _waiting(bot: SlackBot, card: Sent) -> bool:
    """Whether the card's buttons are those of an approval still waiting."""
    return any(str(b.get("value")) in bot.ctx.pending for b in card.buttons)


def _ack_text(body: str) -> str | None:
    if not body.strip():
        return None
    if body.lstrip().startswith("{"):
        text = json.loads(body).get("text")
        return str(text) if text is not None else None
    return body
