"""`eagle audit verify [--head HASH] [--json]`: walk the audit hash chain (store/chain.py).

Exit 0 when the chain and every audit row are intact (and contain the anchored head, when
given), 1 when something is broken: the first broken row is named on one line.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from eaglebot.errors import StoreError, UsageError

_HEX = re.compile(r"^[0-9a-f]{64}$")


def verify_line(report: dict[str, Any]) -> str:
    """One sentence for a person (the CLI and doctor)."""
    if report["ok"]:
        anchored = f"; contains the anchored head at entry #{report['anchor_seq']}" if report.get("anchor") else ""
        return (f"audit chain intact: {report['entries']} entries, {report['rows_checked']} rows checked, "
                f"head {str(report['head'])[:16]} (entry #{report['head_seq']}){anchored}")
    p = report["first_broken"]
    where = f"{p['table']} row {p['row_id']}" if p["table"] else "the chain"
    entry = f" (chain entry #{p['seq']})" if p["seq"] is not None else ""
    more = len(report["problems"]) - 1
    return f"audit chain broken at {where}{entry}: {p['reason']}" + (f" (+{more} more)" if more > 0 else "")


def cmd_audit(args: argparse.Namespace) -> int:
    from eaglebot.config import load_settings

    head = args.head.strip().lower() if args.head else None
    if head is not None and not _HEX.match(head):
        raise UsageError("--head expects the 64-hex-digit chain head posted by the bot")
    settings = load_settings(getattr(args, "config", None))
    if not settings.db_path.is_file():  # verifying must not create an empty, "intact" DB
        raise StoreError(f"audit store {settings.db_path}: there is no database file to verify")
    from eaglebot.store import Store

    store = Store(settings.db_path)
    try:
        report = store.audit_verify(head)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(verify_line(report))
        for p in report["problems"][1:10]:
            where = f"{p['table']} row {p['row_id']}" if p["table"] else "the chain"
            print(f"  also: {where}: {p['reason']}", file=sys.stderr)
    return 0 if report["ok"] else 1


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("audit", parents=[common], help="the tamper-evident audit trail")
    ss = s.add_subparsers(dest="audit_cmd", metavar="verify")
    ss.required = True
    v = ss.add_parser("verify", parents=[common], help="walk the audit hash chain; exit 0 intact, 1 broken")
    v.add_argument("--head", metavar="HASH", help="a chain head posted earlier (Slack): it must be in the chain")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_audit)
