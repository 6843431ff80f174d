"""Approvals (a step that needs a person's yes, the Slack message asking, the decision) and
events (notes on a run, refused requests): what people asked and decided."""
from __future__ import annotations

from eaglebot.store.base import Args, StoreBase, first, insert, now_iso, rows, to_json
from eaglebot.store.rows import ApprovalRow, EventRow, StaleApprovalRow


class ApprovalsMixin(StoreBase):
    """The `approvals` and `events` tables."""

    def approval_requested(self, run_id: int, step_idx: int, host: str, step: str, action: str,
                           details: list[str]) -> int:
        """A pending approval for one step on one host; its id."""
        with self._tx():
            return insert(self.db, "approvals", {
                "run_id": run_id, "step_idx": step_idx, "host": host, "step": step, "action": action,
                "details": to_json(details), "status": "pending", "requested_at": now_iso()})

    def approval_decided(self, approval_id: int, status: str, decided_by: str) -> bool:
        """Record a decision once; a second decision on the same request is refused."""
        with self._tx():
            cur = self.db.execute(
                "update approvals set status = $1, decided_by = $2, decided_at = $3 "
                "where id = $4 and status = 'pending'", [status, decided_by, now_iso(), approval_id])
            return cur.rowcount > 0

    def get_approval(self, approval_id: int) -> ApprovalRow | None:
        """An approval by id, or None."""
        return first(self.db, ApprovalRow, "select * from approvals where id = $1", [approval_id])

    def set_approval_message(self, approval_id: int, channel: str | None, ts: str | None,
                             requester: str | None = None) -> None:
        """The Slack message that asks (and who asked); values not given are kept."""
        with self._tx():
            self.db.execute("update approvals set channel = coalesce($1, channel), message_ts = coalesce($2, message_ts), "
                            "requester = coalesce($3, requester) where id = $4", [channel, ts, requester, approval_id])

    def pending_approval(self, run_id: int, step_idx: int, host: str) -> ApprovalRow | None:
        """The newest pending approval of a step on a host, or None."""
        return first(self.db, ApprovalRow, "select * from approvals where run_id = $1 and step_idx = $2 and host = $3 "
                                           "and status = 'pending' order by id desc limit 1", [run_id, step_idx, host])

    def stale_approvals(self) -> list[StaleApprovalRow]:
        """Pending approvals whose run is no longer running (its process died): nobody waits on them."""
        return rows(self.db, StaleApprovalRow,
                    "select a.*, r.status as run_status, r.channel as run_channel, r.thread_ts as run_thread_ts, "
                    "r.playbook as playbook from approvals a join runs r on r.id = a.run_id "
                    "where a.status = 'pending' and r.status != 'running' order by a.id")

    def add_event(self, run_id: int | None, kind: str, message: str) -> None:
        """A note on a run (or on the bot, run_id None)."""
        with self._tx():
            insert(self.db, "events", {"run_id": run_id, "at": now_iso(), "kind": kind, "message": message})

    def add_rejection(self, kind: str, actor: str, text: str, reason: str, run_id: int | None = None) -> None:
        """A refused request (kind `rejected` or `access_denied`): an event, never a run row."""
        with self._tx():
            insert(self.db, "events", {"run_id": run_id, "at": now_iso(), "kind": kind,
                                       "message": f"{actor}: {text}: {reason}", "actor": actor,
                                       "text": text, "reason": reason})

    def events(self, kind: str | None = None, limit: int = 100) -> list[EventRow]:
        """Events newest first (of one kind, if given)."""
        args = Args()
        where = f"where kind = {args.mark(kind)}" if kind else ""
        return rows(self.db, EventRow, f"select * from events {where} order by id desc limit {args.mark(limit)}", args)
