"""No orphans: what each step started on its host is recorded and stopped.

Before a step's first command the engine records a tag (the store's `remote_procs` row);
the transport puts it in the environment of every process the step starts and reports
the process groups (`eaglebot.transport.base.StepProcs`). On a timeout, a cancel or a lost
connection the transport kills the groups and every tagged process (setsid descendants
too) and says so; what it could not stop (host unreachable) stays `pending`, and so does
what a crashed `eagle` left `running`: the next run on that host stops it before its first
step, and the step that started it says so. The host lock is kept (ownerless, with a
reason) until then.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Protocol

from eaglebot.errors import EagleError
from eaglebot.store import AsyncStore
from eaglebot.transport.base import CURRENT, StepProcs

log = logging.getLogger("eaglebot.engine")


class _Cleans(Protocol):
    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False) -> str: ...


async def begin(store: AsyncStore, run_id: int, step_id: int, host: str) -> tuple[StepProcs, int, Any]:
    """Record the step's tag and make it the current one (the skill's task inherits it)."""
    sp = StepProcs(tag=f"{run_id}-{step_id}-{os.urandom(4).hex()}")
    row = await store.procs_started(run_id, step_id, host, sp.tag)
    return sp, row, CURRENT.set(sp)


async def end(store: AsyncStore, sp: StepProcs, row: int, token: Any) -> None:
    CURRENT.reset(token)
    state = {"none": "done", "stopped": "stopped", "pending": "pending"}[sp.state]
    await store.procs_finished(row, state=state, note="; ".join(sp.notes), pgids=sp.pgids)


def current() -> StepProcs | None:
    """The running step's processes (the context variable the transport fills in)."""
    return CURRENT.get()


def summary_note(sp: StepProcs | None, default: str, prefix: str) -> str:
    """`default` when every kill was verified, else `prefix` + what could not be stopped."""
    if sp is not None and sp.state == "pending" and sp.notes:
        return prefix + sp.notes[-1]
    return default


async def clear_pending(store: AsyncStore, transport: _Cleans, run_id: int, host: str) -> list[str]:
    """Stop what earlier runs left on `host` (crash, unreachable host); one message each."""
    msgs: list[str] = []
    for row in await store.pending_procs(host):
        try:
            note = await transport.cleanup(row["tag"], None)
        except EagleError as e:
            msgs.append(f"processes of run #{row['run_id']} on {host} could not be stopped: {e}")
            continue
        if "could not" in note or "survived" in note:
            msgs.append(f"processes of run #{row['run_id']} on {host} could not be stopped: {note}")
            continue
        text = f"its processes on {host} were stopped by run #{run_id} ({note})"
        await store.procs_cleaned(row["id"], by_run=run_id, note=text)
        msgs.append(f"run #{row['run_id']} had left processes on {host}: {note}")
    return msgs
