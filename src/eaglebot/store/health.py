"""The fleet health watch's state: one row per host and GPU (`health_state`), every transition
and every Xid seen as an event (`health_events`, chained with the state), and how far each
host's kernel log has been read (`health_cursors`, transient like locks)."""
from __future__ import annotations

from eaglebot.store.base import Args, StoreBase, first, insert, now_iso, rows
from eaglebot.store.rows import HealthEventRow, HealthStateRow, LifecycleStepRow

# States in which a host refuses relaunch, bench and scheduled runs (`resuming` is back in its
# scheduler, on probation: the watch's clean probes make it healthy, a finding quarantines it).
HELD_STATES = ("quarantined", "draining", "drained")
# Rows that note, not hold: `expected` is a GPU whose last Xids came from the bot's own teardown.
REFRESHED = ("expected",)
_LIFECYCLE = ("gpu.cleanup", "server.stop", "gpu.verify", "server.launch")


class HealthMixin(StoreBase):
    """The `health_state`, `health_events` and `health_cursors` tables."""

    def health_states(self, host: str | None = None) -> list[HealthStateRow]:
        """Every host's and GPU's state row (healthy ones included once they had a finding), by host, GPU."""
        if host is None:
            return rows(self.db, HealthStateRow, "select * from health_state order by host, gpu")
        return rows(self.db, HealthStateRow, "select * from health_state where host = $1 order by gpu", [host])

    def health_transition(self, host: str, gpu: int, state: str, reason: str, actor: str) -> bool:
        """Move one host's GPU (-1: the host) to `state` with its reason and actor, as one event;
        the clean count starts over. False (nothing written) when it already is in that state
        (`expected` is written again: its reason and time say which teardown it was)."""
        with self._tx():
            row = self.db.execute("select state from health_state where host = $1 and gpu = $2",
                                  [host, gpu]).fetchone()
            before = row[0] if row else "healthy"
            if before == state and state not in REFRESHED:
                return False
            at = now_iso()
            if row:   # healthy again: the incident is over, and so is its silence
                self.db.execute("update health_state set state = $1, since = $2, reason = $3, clean = 0, actor = $4, "
                                "silenced_until = case when $5 = 'healthy' then null else silenced_until end, "
                                "silenced_by = case when $6 = 'healthy' then null else silenced_by end "
                                "where host = $7 and gpu = $8", [state, at, reason, actor, state, state, host, gpu])
            else:
                self.db.execute("insert into health_state (host, gpu, state, since, reason, clean, actor) "
                                "values ($1, $2, $3, $4, $5, 0, $6)", [host, gpu, state, at, reason, actor])
            insert(self.db, "health_events", {"host": host, "gpu": gpu, "kind": "transition", "code": None,
                                              "from_state": before, "to_state": state, "reason": reason,
                                              "actor": actor, "at": at})
            return True

    def health_set_clean(self, host: str, gpu: int, clean: int) -> None:
        """The clean probes counted in a row towards clearing one host's GPU (0: a finding again)."""
        with self._tx():
            self.db.execute("update health_state set clean = $1 where host = $2 and gpu = $3 and clean <> $4",
                            [clean, host, gpu, clean])

    def health_set_alert(self, host: str, gpu: int, channel: str | None, message_ts: str | None) -> None:
        """The Slack message of the incident of one host's GPU (updated in place as it evolves)."""
        with self._tx():
            self.db.execute("update health_state set channel = $1, message_ts = $2 where host = $3 and gpu = $4",
                            [channel, message_ts, host, gpu])

    def health_silence(self, host: str, gpu: int, until: str, by: str) -> bool:
        """Silence the alerts of one host's GPU incident until `until` (ISO time), as an event;
        False when it has no state row."""
        with self._tx():
            cur = self.db.execute("update health_state set silenced_until = $1, silenced_by = $2 "
                                  "where host = $3 and gpu = $4", [until, by, host, gpu])
            if not cur.rowcount:
                return False
            insert(self.db, "health_events", {"host": host, "gpu": gpu, "kind": "silence", "code": None,
                                              "from_state": None, "to_state": None,
                                              "reason": f"alerts silenced until {until}", "actor": by,
                                              "at": now_iso()})
            return True

    def health_record_xid(self, host: str, gpu: int, code: int, reason: str, window: str | None = None,
                          expected: bool = False, at: str | None = None) -> None:
        """An Xid the watch read from a host's kernel log (each one once), with the lifecycle
        window it fell in; `expected`: an application's Xid in the bot's own teardown (kind
        `xid_expected`, never counted towards a rule's fail_after); `at`: the Xid's own time (ISO,
        from the kernel's timestamp), else now."""
        with self._tx():
            insert(self.db, "health_events", {"host": host, "gpu": gpu, "kind": "xid_expected" if expected else "xid",
                                              "code": code, "from_state": window, "to_state": None,
                                              "reason": reason, "actor": "health-watch", "at": at or now_iso()})

    def health_note(self, host: str, gpu: int, reason: str, actor: str, kind: str = "note") -> None:
        """Something the watch said about one host's GPU without changing its state (it left a
        person's drain alone), as an event. Kind `takeover`: the drain is someone else's now (a
        person changed it in the scheduler): the row's reason and actor say whose, and its clean
        probes start over (so the watch says, once, that it left it)."""
        with self._tx():
            if kind == "takeover":   # clean starts over: the watch says it left it after clear_after more
                self.db.execute("update health_state set reason = $1, actor = $2, clean = 0 where host = $3 and gpu = $4",
                                [reason, actor, host, gpu])
            insert(self.db, "health_events", {"host": host, "gpu": gpu, "kind": kind, "code": None,
                                              "from_state": None, "to_state": None, "reason": reason,
                                              "actor": actor, "at": now_iso()})

    def health_lifecycle_steps(self, host: str, limit: int = 64) -> list[LifecycleStepRow]:
        """The newest `limit` steps on a host that kill, verify or launch (the watch's lifecycle
        windows), oldest first, with their run's status."""
        args = Args([host])
        found = rows(self.db, LifecycleStepRow,
                     "select s.run_id, s.skill, s.status, s.started_at, s.finished_at, r.status as run_status, "
                     "r.finished_at as run_finished_at from steps s join runs r on r.id = s.run_id "
                     f"where s.host = $1 and s.skill in ({args.marks(_LIFECYCLE)}) order by s.id desc "
                     f"limit {args.mark(limit)}", args)
        return found[::-1]

    def health_xid_count(self, host: str, gpu: int, code: int, since: str) -> int:
        """How many times Xid `code` was read on one host's GPU at or after `since` (ISO time)."""
        row = self.db.execute("select count(*) from health_events where host = $1 and gpu = $2 and kind = 'xid' "
                              "and code = $3 and at >= $4", [host, gpu, code, since]).fetchone()
        return int(row[0]) if row else 0

    def health_events(self, host: str | None = None, limit: int = 100) -> list[HealthEventRow]:
        """The watch's events, newest first (of one host when given)."""
        if host is None:
            return rows(self.db, HealthEventRow, "select * from health_events order by id desc limit $1", [limit])
        return rows(self.db, HealthEventRow, "select * from health_events where host = $1 order by id desc limit $2",
                    [host, limit])

    def health_held(self, host: str) -> HealthStateRow | None:
        """The row that keeps a host out of relaunch, bench and schedules (quarantined or being
        drained), or None when it may run."""
        args = Args([host])
        return first(self.db, HealthStateRow, f"select * from health_state where host = $1 and state in "
                                              f"({args.marks(HELD_STATES)}) order by since limit 1", args)

    def health_cursor(self, host: str) -> float | None:
        """How far (kernel log seconds) the watch has read a host's kernel log, or None (never)."""
        row = self.db.execute("select cursor from health_cursors where host = $1", [host]).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def health_set_cursor(self, host: str, cursor: float | None, status: str) -> None:
        """A host's probe ended: its kernel log cursor and the probe's status (ok, hung, failed)."""
        with self._tx():
            self.db.execute("insert into health_cursors (host, cursor, probed_at, status) values ($1, $2, $3, $4) "
                            "on conflict(host) do update set cursor = coalesce(excluded.cursor, health_cursors.cursor), "
                            "probed_at = excluded.probed_at, status = excluded.status",
                            [host, cursor, now_iso(), status])
