"""No orphans: what each step started on its host is recorded and stopped.

Every step has a tag, `<db_id>-<run>-<step>` (derivable from its row: nothing is written
per step); the transport puts it in the environment of every process the step starts and reports
the process groups and when the first command started on the host's clock
(`eaglebot.transport.base.StepProcs`). The tag is only a help: a step can unset it and leave
its group, so the step's processes are found by what it cannot shed (transport/leftovers.py:
started since its first command by the same user, descending from its commands or orphaned
from them). On a timeout, a cancel or a lost connection, and at the end of every step, the
transport stops them and says so (a `remote_procs` row); what it could not stop (host unreachable) is
`pending`, and so is whatever a crashed `eagle`'s running steps started (`Store.recover`): the next run on that host stops it before its first
step, and the step that started it says so. The host lock is kept (ownerless, with a
reason) until then.
"""
from __future__ import annotations

import asyncio
import contextvars

import logging
import time
from typing import Callable, Protocol, TYPE_CHECKING

from eaglebot.errors import EagleError
from eaglebot.store import parse_iso
from eaglebot.transport.base import CURRENT, StepProcs

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import RunLog
    from eaglebot.store.rows import RemoteProcRow, StepRow

log = logging.getLogger("eaglebot.engine")


class _Cleans(Protocol):
    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False,
                      since_wall: float | None = None) -> str: ...


class _Ends(Protocol):
    async def leftovers(self, sp: StepProcs) -> tuple[int, str]: ...


def begin(store: Door[RunLog], run_id: int, step_id: int | None,
          skill: str | None = None) -> tuple[StepProcs, contextvars.Token[StepProcs | None]]:
    """Make the step's tag (`<db_id>-<run>-<step>`: derivable from the step row, so nothing
    is written per step) the current one; the skill's task inherits it. A step whose row a
    failing store did not take gets a random tag: its processes are still stopped on
    timeout or cancel, only not recoverable after a crash. The login files are watched for a
    step that runs a playbook's code (`skill`: `runs_given_code`), not for the bot's own."""
    if step_id is None:
        import secrets

        sp = StepProcs(tag=f"{store.db_id}-{run_id}-x{secrets.token_hex(4)}")
    else:
        sp = StepProcs(tag=f"{store.db_id}-{run_id}-{step_id}")   # = Store.proc_tag(run_id, step_id)
    if skill is not None and not runs_given_code(skill):
        sp.login = {}   # (known: not asked for, nothing compared)
        sp.watch_login = False
    return sp, CURRENT.set(sp)


async def end(store: Door[RunLog], sp: StepProcs, token: contextvars.Token[StepProcs | None], run_id: int,
              step_id: int | None,
              host: str, transport: _Ends | None = None) -> str:
    """Stop what the step left running (its process groups, the sessions they lead and every
    process with its tag: a background job never outlives its step, nor writes into the next
    one), and record a kill (only then is anything written; not for a step the store did not
    take). Returns a sentence when the step had left something running, else ""."""
    left = ""
    # After a timeout's or a cancel's kill too (it checks the login files), unless that kill could not
    # reach the host (`pending`): the next run on it stops what is left.
    if transport is not None and sp.pgids and sp.state != "pending":
        try:
            found, left = await transport.leftovers(sp)
        except EagleError as e:
            found, left = 0, f"could not check for processes it left running: {e}"
        if found:
            sp.notes.append(left)
            sp.state = "stopped" if "survived" not in left else "pending"
    CURRENT.reset(token)
    if sp.login_changed:
        said = f"{host}: {refused(sp)}"
        await store.call(lambda s: s.add_event(run_id, "login_files_changed", said))
    if sp.state != "none" and step_id is not None:
        note = "; ".join(sp.notes)
        await store.call(lambda s: s.procs_record(run_id, step_id, host, tag=sp.tag, state=sp.state, note=note,
                                                  pgids=sp.pgids))
    return left


def refused(sp: StepProcs) -> str:
    """Why a step that changed the login's startup files failed (one sentence)."""
    files = ", ".join(f"~/{f}" for f in sp.login_changed)
    return (f"it changed {files}, which would run before every later command on this login: refused "
            f"({sp.login_note})")


# Shipped skills whose commands are the bot's own. Every other one (`shell` and `metric.record`
# run a command the playbook gives; a plugin's code the bot cannot know) may start a process
# that writes into another command's output on the same login (`/proc/PID/fd/1`): a lock-free
# run's commands never run beside one (`quiet`, `beside`).
_GIVEN_CODE = frozenset({"shell", "metric.record"})
QUIET_WAIT_S = 120.0
QUIET_POLL_S = 0.25


def runs_given_code(skill: str) -> bool:
    from eaglebot.engine.shipped import SHIPPED

    return skill not in SHIPPED or skill in _GIVEN_CODE


class Neighbours(Protocol):
    """The two store reads the neighbour checks need (the engine's slice and the watch's both have them)."""

    def steps_beside(self, host: str, run_id: int, after_id: int | None) -> tuple[int, list[StepRow]]: ...

    def pending_procs(self, host: str) -> list[RemoteProcRow]: ...


async def code_beside(store: Door[Neighbours], host: str, run_id: int, after_id: int | None) -> tuple[int, str]:
    """(the newest step id, "" or what of another run may be running code on `host`)."""
    last, steps = await store.call(lambda s: s.steps_beside(host, run_id, after_id))
    for step in steps:
        if runs_given_code(step["skill"]):
            return last, f"step `{step['name']}` of run #{step['run_id']} ({step['skill']})"
    pending = await store.call(lambda s: s.pending_procs(host))
    if pending:
        return last, f"processes run #{pending[0]['run_id']} left that could not be stopped"
    return last, ""


async def quiet(store: Door[RunLog], host: str, run_id: int, cancel: asyncio.Event | None,
                say: Callable[[str], None]) -> tuple[int, str]:
    """Before a command of a lock-free run: wait (up to QUIET_WAIT_S) until no other run runs
    code of its playbook on `host`. (the newest step id then, to check against afterwards;
    "" or why it gave up)."""
    deadline = time.monotonic() + QUIET_WAIT_S
    said = False
    while True:
        last, busy = await code_beside(store, host, run_id, None)
        if not busy or (cancel is not None and cancel.is_set()):
            return last, ""
        if time.monotonic() > deadline:
            return last, (f"{host} is busy: {busy} runs there, and a process of it could write into this "
                          f"command's output; run it again when that ends")
        if not said:
            say(f"waiting until {busy} ends on {host}: a process of it could write into this command's output")
            said = True
        await asyncio.sleep(QUIET_POLL_S)


async def beside(store: Door[RunLog], host: str, run_id: int, mark: int) -> str:
    """After it: "" when nothing of another run that runs code was on `host` meanwhile, else what."""
    return (await code_beside(store, host, run_id, mark))[1]


def current() -> StepProcs | None:
    """The running step's processes (the context variable the transport fills in)."""
    return CURRENT.get()


def summary_note(sp: StepProcs | None, default: str, prefix: str) -> str:
    """`default` when every kill was verified, else `prefix` + what could not be stopped."""
    if sp is not None and sp.state == "pending" and sp.notes:
        return prefix + sp.notes[-1]
    return default


async def clear_pending(store: Door[RunLog], transport: _Cleans, run_id: int, host: str) -> list[str]:
    """Stop what earlier runs left on `host` (crash, unreachable host); one message each."""
    msgs: list[str] = []
    for row in await store.call(lambda s: s.pending_procs(host)):
        started = parse_iso(row.get("step_started_at"))
        try:
            note = await transport.cleanup(row["tag"], None, since_wall=started.timestamp() if started else None)
        except EagleError as e:
            msgs.append(f"processes of run #{row['run_id']} on {host} could not be stopped: {e}")
            continue
        if "could not" in note or "survived" in note:
            msgs.append(f"processes of run #{row['run_id']} on {host} could not be stopped: {note}")
            continue
        if note.endswith("nothing was left running"):
            text = f"run #{run_id} found none of its processes left on {host}"
            msgs.append(f"run #{row['run_id']} had not stopped its processes on {host}: none was left running")
        else:
            text = f"its processes on {host} were stopped by run #{run_id} ({note})"
            msgs.append(f"run #{row['run_id']} had left processes on {host}: {note}")
        await store.call(lambda s: s.procs_cleaned(row["id"], by_run=run_id, note=text))
    return msgs
