"""The `/eagle` words, each declared once: its name, access class, help lines, argument parser
and handler. The grammar's dispatch, the help, the access classes and the router's handlers are
read from this table; the engine's reserved playbook names (`engine/words.py`, which the
engine can import) are checked against it below.

Adding a word is one `Word` here plus its handler (`on_WORD` in `handlers.py`, or `tuning.py`
for the tuning words) and its name in `engine/words.py`; tests/test_words.py holds them together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

from eaglebot.engine import words as engine_words
from eaglebot.frontends.chat import args, handlers as h, tuning as t
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.command import Access, Command
from eaglebot.frontends.chat.reply import Reply
from eaglebot.frontends.services import Services

Parser = Callable[[str, list[str], str], Command]         # (word, its arguments, the whole text)
Handler = Callable[[Services, Command, Caller], Awaitable[Reply]]


@dataclass(frozen=True)
class Word:
    name: str
    access: Access | Callable[[tuple[str, ...]], Access]   # a function of the arguments where they decide
    usage: str            # its lines of `/eagle help`; "" where the line of the word above names it too
    parse: Parser
    handler: Handler
    verb: str = ""        # what a refusal says the user may not do ("cancel runs"); the name if ""

    def access_of(self, cmd_args: tuple[str, ...]) -> Access:
        return self.access(cmd_args) if callable(self.access) else self.access


async def _help(services: Services, cmd: Command, caller: Caller) -> Reply:
    return await h.help_reply(services, cmd, USAGE)


_COL = " " * 36   # where a help line's description starts

# `/eagle <playbook> ...`: not a word (any name that is not one), but dispatched like one.
RUN = Word("run", "operate",
           "/eagle <playbook> [host[,host]] [key=value ...] [--dry-run] [--force]   run a playbook (e.g. relaunch "
           f"gpu-01\n{_COL}spec_steps=5); --force: on a quarantined host (approvers only, audited)",
           args.run, h.on_run)

WORDS: tuple[Word, ...] = (   # in the order of `/eagle help`
    Word("help", "free", "/eagle help [playbook|skill|skills] this help, a playbook's inputs, a skill's parameters, "
         "every skill", args.help_args, _help),
    Word("playbooks", "view", "/eagle playbooks | hosts            what can run, and where", args.no_args,
         h.on_playbooks),
    Word("hosts", "view", "", args.no_args, h.on_hosts),
    Word("history", "view", "/eagle history [playbook] [host] [n]", args.history, h.on_history),
    Word("show", "view", "/eagle show ID                      one run: steps, metrics, warnings, regressions",
         args.show, h.on_show),
    Word("status", "view", "/eagle status                       running runs and busy hosts", args.no_args,
         h.on_status),
    Word("fleet", "view", "/eagle fleet                        health state per host and GPU (the health watch)",
         args.no_args, h.on_fleet),
    Word("cancel", "operate", "/eagle cancel ID | rerun ID [failed]  stop a run (its always-steps still run) / run "
         f"it again (failed: only\n{_COL[:-1]}the hosts that failed or were unreachable)", args.run_id, h.on_cancel,
         verb="cancel runs"),
    Word("rerun", "operate", "", args.rerun, h.on_rerun, verb="re-run runs"),
    Word("logs", "view", "/eagle logs HOST [LINES]            tail of the inference server's log on a host (default 60 lines)",
         args.logs, h.on_logs),
    Word("schedule", args.schedule_access, "/eagle schedule [pause|resume NAME] scheduled runs and their next fire "
         "time; pause or resume one", args.schedule, h.on_schedule),
    Word("baseline", "operate", "/eagle baseline set ID              make a run the reference for its playbook + "
         "host", args.baseline, h.on_baseline, verb="set baselines"),
    Word("trend", "view", "/eagle trend PLAYBOOK HOST METRIC   plot a metric over recent runs", args.trend,
         h.on_trend),
    Word("reload", "approve", "/eagle reload                       re-read eagle.yaml, playbooks, skills and "
         "tokens (approvers)", args.no_args, h.on_reload, verb="reload the configuration"),
    Word("diff", "view", "/eagle diff A B                     two runs side by side: inputs, launch args, config "
         "patch, versions, env, metrics", args.tuning_args, t.on_diff),
    Word("bisect", "operate", "/eagle bisect GOOD BAD HOST         relaunch subsets of the changes between two runs; "
         "names the culprit", args.tuning_args, t.on_bisect, verb="bisect runs"),
    Word("sweep", "operate", "/eagle sweep PLAYBOOK HOST k=v1,v2  a grid of inputs, relaunch + bench each; ranked "
         "table + heatmap", args.tuning_args, t.on_sweep, verb="run sweeps"),
    Word("tune", "operate", "/eagle tune PLAYBOOK HOST [batch_sizes=1,8,32] [budget=30m] [apply]\n"
         f"{_COL}speculative config per batch size from one profile, verified; a\n"
         f"{_COL}Pareto plot; apply: relaunch with it after an approval", args.tuning_args, t.on_tune),
    Word("ack", "operate", "/eagle ack INCIDENT reason          close an open regression incident, every metric of "
         f"it (audited);\n{_COL}also /eagle ack RUN all reason, /eagle ack RUN METRIC reason", args.tuning_args,
         t.on_ack, verb="acknowledge regressions"),
)

BY_NAME = {w.name: w for w in WORDS}
USAGE = "\n".join(w.usage for w in (RUN, *WORDS) if w.usage)
HANDLERS: dict[str, Handler] = {w.name: w.handler for w in (RUN, *WORDS)}

if set(BY_NAME) != set(engine_words.NAMES):   # the engine refuses these as playbook names
    raise ImportError(f"the /eagle words {sorted(set(BY_NAME) ^ set(engine_words.NAMES))} are in one of "
                      "frontends/chat/words.py and engine/words.py only; name each word in both")
