"""`eagle audit verify [--head HASH] [--key FILE ...] [--json]`, `eagle audit head`,
`eagle audit init-key PATH`, `eagle audit rotate-key`, `eagle audit backup FILE`: the audit hash
chain (store/chain.py) and its keyed seals (store/sealing.py).

`verify` only reads (the DB is opened read-only: no migration, no repair, no seal). Exit 0 when
the chain, every chained table's schema and every audit row are intact (and contain the
anchored head, when given) and every seal was checked; 1 when something is broken: the first
broken row or table is named on one line; 4 when nothing checked is broken but seals were
left unchecked (no key, or a sealing key that cannot derive earlier epochs' keys): not
verifiable without the verification key.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglebot.errors import StoreError, UsageError

if TYPE_CHECKING:
    from eaglebot.config import Settings
    from eaglebot.store.protocol import AuditAdmin
    from eaglebot.store.sealing import AuditKey

_HEX = "0123456789abcdef"


def _where(p: dict[str, Any]) -> str:
    if not p["table"]:
        return "the chain"
    return f"{p['table']} row {p['row_id']}" if p["row_id"] is not None else f"table `{p['table']}`"


def seals_line(report: dict[str, Any]) -> str | None:
    """What the seals say, for a person: None when there is nothing to say (no key, none sealed)."""
    s = report.get("seals") or {}
    parts = []
    if s.get("key"):
        parts.append(f"{s['checked']} seal(s) checked with the {s['key']} key (epoch {s['key_epoch']} on)")
    parts += s.get("notes") or []
    return "; ".join(parts) or None


UNVERIFIABLE = 4   # `verify`'s exit when seals were left unchecked (docs/cli.md: exit codes)


def verify_exit(report: dict[str, Any]) -> int:
    """0 intact and every seal checked, 1 broken, 4 intact as far as checked but not verifiable."""
    if not report["ok"]:
        return 1
    return 0 if report.get("complete", True) else UNVERIFIABLE


def verify_line(report: dict[str, Any]) -> str:
    """One sentence for a person (the CLI and doctor)."""
    if report["ok"] and not report.get("complete", True):
        s = report.get("seals") or {}
        parts = []
        if s.get("unchecked"):
            parts.append(f"{s['unchecked']} seal(s) of epochs before {s.get('key_epoch')} not checked")
        if s.get("unkeyed"):
            parts.append(f"{s['unkeyed']} seal(s) of a key era no key given holds not checked")
        left = "; ".join(parts) or f"{s.get('sealed')} seal(s) not checked (no key given)"
        return (f"audit chain not verifiable without the verification key: {left}; the hash links and rows of "
                f"{report['entries']} entries are intact, but entries sealed then could be rewritten unseen: "
                f"`eagle audit verify --key VERIFICATION_KEY_FILE`")
    if report["ok"]:
        anchored = f"; contains the anchored head at entry #{report['anchor_seq']}" if report.get("anchor") else ""
        sealed = (report.get("seals") or {}).get("checked")
        keyed = f", {sealed} seals checked" if sealed else ""
        return (f"audit chain intact: {report['entries']} entries, {report['rows_checked']} rows checked{keyed}, "
                f"head {str(report['head'])[:16]} (entry #{report['head_seq']}){anchored}")
    p = report["first_broken"]
    entry = f" (chain entry #{p['seq']})" if p["seq"] is not None else ""
    more = len(report["problems"]) - 1
    return f"audit chain broken at {_where(p)}{entry}: {p['reason']}" + (f" (+{more} more)" if more > 0 else "")


def verify_key(settings: Settings, key_arg: list[str] | str | None) -> list[AuditKey]:
    """The keys to check seals with: each `--key FILE` (verification or sealing; one per key era
    of a rotated chain), else the configured sealing key (read, never evolved here), else none."""
    from eaglebot.store.sealing import read_key_file

    if key_arg:
        return [read_key_file(Path(k), private=False) for k in ([key_arg] if isinstance(key_arg, str) else key_arg)]
    path = settings.audit_key_path
    return [read_key_file(path, private=True)] if path is not None else []


def _existing(settings: Settings, what: str = "") -> str | Path:
    """The audit store to read; an SQLite file must exist (reading must not create an empty,
    "intact" DB). A PostgreSQL database is the server's to find (its error says what is missing)."""
    target = settings.audit_store
    if isinstance(target, Path) and not target.is_file():
        raise StoreError(f"audit store {target}: there is no database file{' ' + what if what else ''}")
    return target


def verify_report(settings: Settings, head: str | None = None, key: list[AuditKey] | None = None) -> dict[str, Any]:
    from eaglebot.store import open_store

    store = open_store(_existing(settings, "to verify"), readonly=True)
    try:
        return store.audit_verify(head, key)
    finally:
        store.close()


def cmd_verify(args: argparse.Namespace) -> int:
    from eaglebot.config import load_settings

    head = args.head.strip().lower() if args.head else None
    if head is not None and (len(head) != 64 or set(head) - set(_HEX)):
        raise UsageError("--head expects the 64-hex-digit chain head posted by the bot")
    settings = load_settings(getattr(args, "config", None))
    report = verify_report(settings, head, verify_key(settings, args.key))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(verify_line(report))
        seals = seals_line(report)
        if seals:
            print(f"  seals: {seals}", file=sys.stderr)
        for p in report["problems"][1:10]:
            print(f"  also: {_where(p)}: {p['reason']}", file=sys.stderr)
    return verify_exit(report)


def cmd_head(args: argparse.Namespace) -> int:
    from eaglebot.config import load_settings
    from eaglebot.store import open_store, redact_url

    settings = load_settings(getattr(args, "config", None))
    store: AuditAdmin = open_store(_existing(settings), readonly=True)
    try:
        head = store.audit_head()
    finally:
        store.close()
    if args.json:
        print(json.dumps(head))
    elif head["hash"] is None:
        raise StoreError(f"audit store {redact_url(str(settings.audit_store))}: the audit chain has no entry yet")
    else:
        print(head["hash"])
        print(f"entry #{head['seq']}; check the DB against it later: `eagle audit verify --head {head['hash']}`",
              file=sys.stderr)
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """A consistent copy of the audit DB while the bot runs, then the copy's chain verified
    (read-only, with the configured key's seals): a backup that does not verify exits 1."""
    from eaglebot.config import load_settings
    from eaglebot.store import open_store

    settings = load_settings(getattr(args, "config", None))
    dest = Path(args.file)
    store: AuditAdmin = open_store(_existing(settings, "to back up"), readonly=True)
    try:
        head = store.backup(dest)
    finally:
        store.close()
    copy = open_store(dest, readonly=True)
    try:
        report = copy.audit_verify(None, verify_key(settings, None))
    finally:
        copy.close()
    if args.json:
        print(json.dumps({"file": str(dest), **head, "verified": bool(report["ok"]), "entries": report["entries"],
                          "first_broken": report["first_broken"]}))
    else:
        print(dest)
    if not report["ok"]:
        print(f"eagle: the copy at {dest} does NOT verify (kept for inspection; do not rely on it): "
              f"{verify_line(report)}", file=sys.stderr)
        return 1
    if not args.json:
        anchor = f"; its chain head is {head['hash']} (entry #{head['seq']})" if head["hash"] else ""
        print(f"eagle: audit DB copied to {dest} and verified ({report['entries']} chain entries){anchor}; "
              f"step output files ({settings.output_root}) are not in it", file=sys.stderr)
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    """Hand the chain over to a new key: a sealed 'R' entry (the old key's last seal) names it,
    and `audit_key_file` is replaced with it in the same transaction; prints its verification key."""
    from eaglebot.config import load_settings
    from eaglebot.store import open_store

    settings = load_settings(getattr(args, "config", None))
    if settings.audit_key_path is None:
        raise UsageError("no audit key to rotate: `audit_key_file` is not set in eagle.yaml (create one with "
                         "`eagle audit init-key PATH`)")
    store: AuditAdmin = open_store(_existing(settings, "to rotate its key"), key_file=settings.audit_key_path)
    try:
        verification = store.audit_rotate_key()
        head = store.audit_head()
    finally:
        store.close()
    print(verification.line())
    print(f"eagle: {settings.audit_key_path} now holds the next sealing key; chain entry #{head['seq']} records "
          f"the handover, sealed with the old key. The line above is the NEW verification key: keep it with the "
          f"old one (the old key checks the entries before the handover, this one those after): "
          f"`eagle audit verify --key OLD --key NEW`.", file=sys.stderr)
    return 0


def cmd_init_key(args: argparse.Namespace) -> int:
    from eaglebot.store.sealing import init_key

    path = Path(args.path)
    verification = init_key(path)
    print(verification.line())
    print(f"eagle: sealing key written to {path} (mode 0600; set `audit_key_file: {path}` in eagle.yaml). "
          f"The line above is the VERIFICATION key: keep it somewhere the bot's host cannot write, and check "
          f"the chain with `eagle audit verify --key FILE`.", file=sys.stderr)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("audit", parents=[common], help="the tamper-evident audit trail")
    ss = s.add_subparsers(dest="audit_cmd", metavar="verify|head|init-key|rotate-key|backup")
    ss.required = True
    v = ss.add_parser("verify", parents=[common],
                      help="walk the audit hash chain (reads only); exit 0 intact, 1 broken, 4 not verifiable "
                           "without the verification key")
    v.add_argument("--head", metavar="HASH", help="a chain head posted earlier (Slack): it must be in the chain")
    v.add_argument("--key", metavar="FILE", action="append",
                   help="the verification key from `eagle audit init-key` (or a sealing key file): check every seal; "
                        "once per key after `rotate-key` (each checks its own era of the chain)")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)
    h = ss.add_parser("head", parents=[common], help="print the chain head (the anchor to keep outside the DB)")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=cmd_head)
    k = ss.add_parser("init-key", parents=[common],
                      help="create an audit sealing key file (0600); prints the verification key")
    k.add_argument("path", metavar="PATH")
    k.set_defaults(func=cmd_init_key)
    r = ss.add_parser("rotate-key", parents=[common],
                      help="replace audit_key_file with a new key, the handover sealed in the chain with the old "
                           "one; prints the new verification key")
    r.set_defaults(func=cmd_rotate_key)
    b = ss.add_parser("backup", parents=[common], help="copy the audit DB consistently while the bot runs, then verify the copy's chain")
    b.add_argument("file", metavar="FILE", help="a new file for the copy")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_backup)
