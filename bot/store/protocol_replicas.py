"""The replicas' part of the store contract (`StoreProtocol` extends it): the leader lease,
heartbeats and the claim of a schedule's fire, which every backend implements alike
(SQLite: a lease row with an expiry; PostgreSQL may hold an advisory lock as well)."""
from __future__ import annotations

from typing import Protocol

from eaglebot.store.rows import LeaseRow, ReplicaRow


class ReplicasProtocol(Protocol):
    """Coordination of several `eagle serve` replicas on one store."""

    # -- replicas: the leader lease, heartbeats, claimed fires ------------------------------------
    def lease_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take the lease if free or expired, renew it if `holder` has it; True while it holds."""
        ...

    def lease_release(self, name: str, holder: str) -> None:
        """Give the lease up at once (a replica stopping cleanly), if `holder` has it."""
        ...

    def lease_holder(self, name: str) -> LeaseRow | None:
        """The lease's row (holder, acquired, renewed, expires), expired or not; None if free."""
        ...

    def replica_beat(self, replica_id: str, *, hostname: str, pid: int, proc_start: str | None,
                     version: str) -> None:
        """A replica is alive now (its first beat records when it started)."""
        ...

    def replicas(self) -> list[ReplicaRow]:
        """Every replica that beat within the last day, most recently seen first."""
        ...

    def claim_fire(self, schedule: str, fire_time: str, holder: str) -> int | None:
        """Claim one fire (schedule, slot time) and record it `started`: its id, or None if claimed."""
        ...

    def claim_requests(self, keys: list[str], window_s: float, max_keys: int) -> bool:
        """Record a Slack request's `keys` for `window_s`, for every replica: True when none was
        seen within its window (answer it), False when one was (a copy). One transaction, so
        two replicas racing with one request cannot both win; expired keys are dropped, and
        past `max_keys` the soonest to expire."""
        ...
