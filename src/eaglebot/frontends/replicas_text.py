"""The replicas of `eagle serve` on one store and their leader, as `eagle status` and
`/eagle status` show them (text) and `eagle status --json` gives them (dicts)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from eaglebot.store import now_iso, parse_iso
from eaglebot.store.replicas import REPLICA_DEAD_AFTER_S
from eaglebot.store.rows import LeaseRow, ReplicaRow

LEADER = "leader"   # the lease the replicas elect their leader by (service/leader.py takes it)


def leader_of(lease: LeaseRow | None, now: str | None = None) -> dict[str, Any] | None:
    """The leader lease while it is valid: {id, since, expires_at}; None when nobody leads."""
    if lease is None or (lease["expires_at"] or "") <= (now or now_iso()):
        return None
    return {"id": lease["holder"], "since": lease["acquired_at"], "expires_at": lease["expires_at"]}


def replica_rows(replicas: list[ReplicaRow], lease: LeaseRow | None,
                 now: datetime | None = None) -> list[dict[str, Any]]:
    """Each replica that beat within the last day: id, hostname, pid, started_at, seen_at,
    version, alive (beat within the dead-after time), leader."""
    now = now or datetime.now(timezone.utc)
    lead = leader_of(lease)
    out = []
    for r in replicas:
        seen = parse_iso(r["seen_at"])
        age = (now - seen).total_seconds() if seen else None
        out.append({"id": r["id"], "hostname": r["hostname"], "pid": r["pid"], "started_at": r["started_at"],
                    "seen_at": r["seen_at"], "version": r["version"],
                    "alive": age is not None and age <= REPLICA_DEAD_AFTER_S,
                    "leader": lead is not None and lead["id"] == r["id"]})
    return out


def replicas_text(rows: list[dict[str, Any]], leader: dict[str, Any] | None) -> str:
    """Two lines at most: who leads, and the replicas (live ones; gone ones counted)."""
    live = [r for r in rows if r["alive"]]
    head = f"leader: {leader['id']} since {leader['since']}" if leader else "leader: none (no `eagle serve` leads now)"
    if not live:
        return head + "\nreplicas: none running"
    gone = len(rows) - len(live)
    shown = ", ".join(f"{r['id']}{' (leader)' if r['leader'] else ''}, seen {r['seen_at']}" for r in live)
    return head + f"\nreplicas ({len(live)}): {shown}" + (f"; {gone} gone" if gone else "")
