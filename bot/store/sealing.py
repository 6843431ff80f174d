"""Keyed, forward-evolving seals for the audit chain (after journald's Forward Secure Sealing).

Why: the hash chain alone has no secret, so whoever can write the DB file can also append
(or rewrite) entries with correct hashes. With a key, every chain entry also carries
`HMAC(key_epoch, epoch || hash)`. The sealing key evolves once per epoch (one UTC day by
default): key_{n+1} = SHA-256(tag || key_n), and the key file is overwritten with the new key,
so a thief of today's key cannot seal anything for yesterday. The verification key (key_0
and its epoch, printed once by `eagle audit init-key`) is kept elsewhere and derives every
later key, so `eagle audit verify --key FILE` checks every seal.

Key files are one line of JSON:
    {"eagle_audit_key": "sealing", "epoch": 20423, "epoch_s": 86400, "key": "<64 hex>"}
`eagle_audit_key` is "sealing" (the file the bot writes with, mode 0600, evolved in place)
or "verification" (key_0 of the first epoch; what `init-key` prints). `epoch` is
floor(unix time / epoch_s) of the key held; `epoch_s` is fixed at `init-key`.
"""
from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from eaglebot.errors import UsageError

EPOCH_S = 86400
# Tests only: a shorter epoch, so a test can watch the key evolve. Read once, at `init-key`
# (the key file then carries its epoch length); never set it in production.
EPOCH_ENV = "EAGLE_AUDIT_EPOCH_S"
_EVOLVE_TAG = b"eaglebot audit key evolve v1\x00"
_SEAL_TAG = b"eaglebot audit seal v1\x00"
SEALING, VERIFICATION = "sealing", "verification"


class KeyFileError(UsageError):
    """A key file that cannot be used (missing, malformed, readable by others): exit 2."""


def evolve(key: bytes) -> bytes:
    return hashlib.sha256(_EVOLVE_TAG + key).digest()


def seal_mac(key: bytes, epoch: int, entry_hash: str) -> str:
    return hmac.new(key, _SEAL_TAG + f"{epoch}\x1f{entry_hash}".encode(), hashlib.sha256).hexdigest()


def epoch_now(epoch_s: int, now: float | None = None) -> int:
    return int((time.time() if now is None else now) // epoch_s)


@dataclass(frozen=True)
class AuditKey:
    kind: str
    epoch: int
    epoch_s: int
    key: bytes

    def line(self) -> str:
        return json.dumps({"eagle_audit_key": self.kind, "epoch": self.epoch, "epoch_s": self.epoch_s,
                           "key": self.key.hex()}, sort_keys=True)

    def at(self, epoch: int) -> "AuditKey":
        """The key of a later (or the same) epoch."""
        if epoch < self.epoch:
            raise ValueError("a key cannot be evolved backwards")
        k = self.key
        for _ in range(epoch - self.epoch):
            k = evolve(k)
        return AuditKey(self.kind, epoch, self.epoch_s, k)


def parse_key(text: str, where: str) -> AuditKey:
    try:
        d = json.loads(text)
        kind, epoch, epoch_s, key = d["eagle_audit_key"], d["epoch"], d["epoch_s"], bytes.fromhex(d["key"])
        ok = kind in (SEALING, VERIFICATION) and isinstance(epoch, int) and isinstance(epoch_s, int) \
            and epoch >= 0 and epoch_s > 0 and len(key) == 32
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise KeyFileError(f"{where} is not an eaglebot audit key (one JSON line from `eagle audit init-key`)")
    return AuditKey(kind, epoch, epoch_s, key)


def _check_private(path: Path, st: os.stat_result) -> None:
    if st.st_mode & 0o077:
        raise KeyFileError(f"audit key file {path} is readable or writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):04o}): run `chmod 600 {path}`, then try again")


def read_key_file(path: Path, *, private: bool) -> AuditKey:
    """The key in `path`; `private`: refuse a file group or others may read (a sealing key)."""
    try:
        with open(path, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            if private:
                _check_private(path, st)
            text = f.read(4096)
    except FileNotFoundError:
        raise KeyFileError(f"audit key file {path} does not exist: create it with "
                           f"`eagle audit init-key {path}`") from None
    except OSError as e:
        raise KeyFileError(f"cannot read audit key file {path}: {e.strerror}") from None
    return parse_key(text, f"audit key file {path}")


def _write_new(path: Path, text: str) -> None:
    """Create `path` (mode 0600) with `text`; never replaces an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def init_key(path: Path, epoch_s: int | None = None, now: float | None = None) -> AuditKey:
    """Create a sealing key file; returns the verification key (the same key_0)."""
    if epoch_s is None:
        epoch_s = int(os.environ.get(EPOCH_ENV) or EPOCH_S)
    if os.path.lexists(path):
        raise KeyFileError(f"{path} already exists: `eagle audit init-key` never overwrites a key "
                           f"(move it away first if you mean to start a new one)")
    first = AuditKey(SEALING, epoch_now(epoch_s, now), epoch_s, os.urandom(32))
    try:
        _write_new(path, first.line() + "\n")
    except FileExistsError:
        raise KeyFileError(f"{path} already exists: `eagle audit init-key` never overwrites a key") from None
    except OSError as e:
        raise KeyFileError(f"cannot create audit key file {path}: {e.strerror}") from None
    return AuditKey(VERIFICATION, first.epoch, epoch_s, first.key)


class Sealer:
    """The sealing key of one process: evolved (and the file overwritten) when the epoch
    advances. The bot and the CLI share the file: a lock file next to it serialises the
    read-evolve-replace, since the key file itself is replaced (a lock on it would stay with
    the old inode)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._key = read_key_file(self.path, private=True)

    @property
    def epoch_s(self) -> int:
        return self._key.epoch_s

    def key_for(self, min_epoch: int = 0, now: float | None = None) -> AuditKey:
        """The key to seal with now: the current epoch, never one before `min_epoch` (the last
        sealed entry's) nor before the key file's (another process may have evolved it)."""
        want = max(epoch_now(self._key.epoch_s, now), min_epoch)
        if want <= self._key.epoch:
            return self._key
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                cur = read_key_file(self.path, private=True)
                if cur.epoch < want:
                    cur = cur.at(want)
                    self._replace(cur)
                # Only the newest key stays in memory, as in the file.
                self._key = cur
            finally:
                os.close(fd)  # releases the lock
        except OSError as e:
            raise KeyFileError(f"cannot move audit key file {self.path} on to today's key "
                               f"({e.strerror}): its folder must be writable by eaglebot") from None
        return self._key

    def _replace(self, key: AuditKey) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        _write_new(tmp, key.line() + "\n")
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class Verifier:
    """Checks seals with a verification key (every epoch from its first) or a sealing key
    (only its epoch and later: the earlier keys are gone)."""

    def __init__(self, key: AuditKey):
        self.base = key
        self._cache: AuditKey = key

    def can_check(self, epoch: int) -> bool:
        return epoch >= self.base.epoch

    def check(self, epoch: int, entry_hash: str, seal: str) -> bool:
        if epoch < self._cache.epoch:
            self._cache = self.base  # epochs only go forward along a sound chain; restart if not
        self._cache = self._cache.at(epoch)
        return hmac.compare_digest(seal_mac(self._cache.key, epoch, entry_hash), seal)
