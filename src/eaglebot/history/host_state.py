"""A host's state as of a run (its last fingerprint advanced by the steps since), and the
fingerprint every finished run records. Apart from the regression machinery (loader.py,
recorder.py) because every run needs this and only a run with metrics needs that: `eagle
run hello` does not load the judges."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from eaglebot.history.fingerprint import apply_steps, empty_state

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore


def host_state(store: HistoryStore, host: str, run_id: int) -> dict[str, Any]:
    """The host's state as of run_id: the newest fingerprint at or before it, advanced by
    the steps and file changes recorded since."""
    base = store.last_fingerprinted_run(host, run_id)
    if base and base["run_id"] == run_id:
        recorded: dict[str, Any] = base["state"]
        return recorded
    after = base["run_id"] if base else 0
    state = base["state"] if base else empty_state()
    changes = store.host_changes(host, after, run_id)
    return apply_steps(state, store.host_steps(host, after, run_id), changes)


def record_fingerprint(store: HistoryStore, run_id: int, hosts: list[str]) -> dict[str, Any]:
    """Record each host's state as of run_id on the run (later runs start from it)."""
    fp = {h: host_state(store, h, run_id) for h in hosts}
    store.set_fingerprint(run_id, fp)
    return fp
