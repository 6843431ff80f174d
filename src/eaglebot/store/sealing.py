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
floor(unix time / epoch_s) of the key held; `epoch_s` is fixed at `init-key`. A sealing key
that has started sealing a chain says so (`"started": true`, written once, store/base.py):
from then on it never records a "sealing started" entry again, so a chain whose seals were
stripped (or a database written without the key, swapped in) is never blessed by the next
command that writes it.

A key file is read in bounded time whatever it holds: only a regular file (a FIFO would
block the read), at most 4 KiB, strict UTF-8, in a folder nobody else may write (whoever
may write the folder may replace the key), and an epoch at most MAX_EPOCHS behind the clock
(each epoch behind is one SHA-256 to catch up: `"epoch_s": 1` on a key of day numbers would
be 1.7 billion).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from eaglebot.errors import UsageError

EPOCH_S = 86400
# Tests only: a shorter epoch, so a test can watch the key evolve. Read once, at `init-key`
# (the key file then carries its epoch length); never set it in production.
EPOCH_ENV = "EAGLE_AUDIT_EPOCH_S"
_EVOLVE_TAG = b"eaglebot audit key evolve v1\x00"
_SEAL_TAG = b"eaglebot audit seal v1\x00"
_ID_TAG = b"eaglebot audit key id v1\x00"
SEALING, VERIFICATION = "sealing", "verification"
# How far behind the clock a key may be: each epoch is one SHA-256 to derive (~1 us), so
# 100,000 (273 years of days) costs about 0.1 s; anything further is not a key this bot wrote.
MAX_EPOCHS = 100_000
MAX_EPOCH_S = 10 * 366 * 86400
KEY_BYTES_MAX = 4096
# How long a writer waits for another process's key evolution (it takes milliseconds).
LOCK_WAIT_S = 30.0


class KeyFileError(UsageError):
    """A key file that cannot be used (missing, malformed, readable by others): exit 2."""


def evolve(key: bytes) -> bytes:
    return hashlib.sha256(_EVOLVE_TAG + key).digest()


def seal_mac(key: bytes, epoch: int, entry_hash: str) -> str:
    return hmac.new(key, _SEAL_TAG + f"{epoch}\x1f{entry_hash}".encode(), hashlib.sha256).hexdigest()


def key_id(key: "AuditKey") -> str:
    """A key's name in the chain: a hash of key_0 and its epoch (what `init-key` and `rotate-key`
    print, or a sealing file not yet evolved). It tells which key `--key` seals an era of the
    chain with, and reveals nothing of the key (an evolved key cannot compute it)."""
    return hashlib.sha256(_ID_TAG + f"{key.epoch}\x1f".encode() + key.key).hexdigest()[:32]


def epoch_now(epoch_s: int, now: float | None = None) -> int:
    return int((time.time() if now is None else now) // epoch_s)


@dataclass(frozen=True)
class AuditKey:
    kind: str
    epoch: int
    epoch_s: int
    key: bytes
    started: bool = False   # a sealing key that has sealed a chain (see the module docstring)

    def line(self) -> str:
        d: dict[str, object] = {"eagle_audit_key": self.kind, "epoch": self.epoch, "epoch_s": self.epoch_s,
                                "key": self.key.hex()}
        if self.started:
            d["started"] = True
        return json.dumps(d, sort_keys=True)

    def at(self, epoch: int) -> "AuditKey":
        """The key of a later (or the same) epoch."""
        if epoch < self.epoch:
            raise ValueError("a key cannot be evolved backwards")
        if epoch - self.epoch > MAX_EPOCHS + 2:
            raise ValueError("a key is evolved at most MAX_EPOCHS epochs")
        k = self.key
        for _ in range(epoch - self.epoch):
            k = evolve(k)
        return AuditKey(self.kind, epoch, self.epoch_s, k, self.started)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_key(text: str, where: str, now: float | None = None) -> AuditKey:
    try:
        d = json.loads(text)
        kind, epoch, epoch_s, key = d["eagle_audit_key"], d["epoch"], d["epoch_s"], bytes.fromhex(d["key"])
        started = d.get("started", False)
        ok = kind in (SEALING, VERIFICATION) and _is_int(epoch) and _is_int(epoch_s) \
            and epoch >= 0 and 0 < epoch_s <= MAX_EPOCH_S and len(key) == 32 and isinstance(started, bool)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        ok = False
    if not ok:
        raise KeyFileError(f"{where} is not an eaglebot audit key (one JSON line from `eagle audit init-key`)")
    today = epoch_now(epoch_s, now)
    if epoch > today + 1:
        raise KeyFileError(f"{where} holds the key of epoch {epoch}, which has not begun (now {today} of "
                           f"{epoch_s} s): not a key `eagle audit init-key` wrote; restore the right file")
    if today - epoch > MAX_EPOCHS:
        raise KeyFileError(f"{where} is {today - epoch} epochs of {epoch_s} s behind the clock (at most "
                           f"{MAX_EPOCHS}): not a key `eagle audit init-key` wrote; restore the right file")
    return AuditKey(kind, epoch, epoch_s, key, started)


def _check_private(path: Path, st: os.stat_result) -> None:
    if st.st_mode & 0o077:
        raise KeyFileError(f"audit key file {path} is readable or writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):04o}): run `chmod 600 {path}`, then try again")


def check_folder(path: Path) -> None:
    """Refuse a key whose folder group or others may write: they could replace the key file
    (or plant its lock and temporary files) without reading it."""
    folder = path.absolute().parent
    try:
        st = os.stat(folder)
    except OSError as e:
        raise KeyFileError(f"cannot read the audit key folder {folder}: {e.strerror}") from None
    if st.st_mode & 0o022:
        raise KeyFileError(f"audit key file {path}: its folder {folder} is writable by group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):04o}), so anyone could replace the key: run "
                           f"`chmod go-w {folder}` (or keep the key in a folder of its own), then try again")


def read_key_file(path: Path, *, private: bool) -> AuditKey:
    """The key in `path`; `private`: refuse a file group or others may read, or a folder they
    may write (a sealing key). Bounded whatever `path` is (module docstring)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyFileError(f"audit key file {path} does not exist: create it with "
                           f"`eagle audit init-key {path}`") from None
    except OSError as e:
        raise KeyFileError(f"cannot read audit key file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"audit key file {path} is not a regular file (a FIFO, a device or a folder): "
                               f"point it at the file `eagle audit init-key` wrote")
        if private:
            _check_private(path, st)
            check_folder(path)
        data = os.read(fd, KEY_BYTES_MAX + 1)
    except OSError as e:
        raise KeyFileError(f"cannot read audit key file {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    where = f"audit key file {path}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(f"{where} is not an eaglebot audit key (it is not UTF-8 text; one JSON line "
                           f"from `eagle audit init-key`)") from None
    if len(data) > KEY_BYTES_MAX:
        raise KeyFileError(f"{where} is not an eaglebot audit key (over {KEY_BYTES_MAX} bytes; one JSON line "
                           f"from `eagle audit init-key`)")
    return parse_key(text, where)


def _write_new(path: Path, text: str) -> None:
    """Create `path` (mode 0600) with `text`; never replaces an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def next_key(old: AuditKey, now: float | None = None) -> AuditKey:
    """A fresh key_0 for `rotate-key`: the old key's epoch length, today's epoch (never before
    the old key's: epochs do not go backwards along the chain), already sealing this chain."""
    return AuditKey(SEALING, max(epoch_now(old.epoch_s, now), old.epoch), old.epoch_s, os.urandom(32), True)


def init_key(path: Path, epoch_s: int | None = None, now: float | None = None) -> AuditKey:
    """Create a sealing key file; returns the verification key (the same key_0)."""
    if epoch_s is None:
        epoch_s = int(os.environ.get(EPOCH_ENV) or EPOCH_S)
    if os.path.lexists(path):
        raise KeyFileError(f"{path} already exists: `eagle audit init-key` never overwrites a key "
                           f"(move it away first if you mean to start a new one)")
    check_folder(Path(path))
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
        self._ident = self._file_ident()

    def _file_ident(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _reread_if_replaced(self) -> None:
        """`eagle audit rotate-key` replaced the file with the next key: every later seal of every
        process that holds it uses that key (one stat per sealed transaction)."""
        ident = self._file_ident()
        if ident != self._ident:
            self._key = read_key_file(self.path, private=True)
            self._ident = ident

    @property
    def key(self) -> AuditKey:
        return self._key

    def install(self, key: AuditKey) -> None:
        """Replace the key file with `key` (a rotation, or putting the old key back when the
        rotation's transaction did not commit)."""
        with self._locked("rotate the audit key"):
            self._replace(key)
            self._key = key

    @property
    def epoch_s(self) -> int:
        return self._key.epoch_s

    @property
    def started(self) -> bool:
        """Has this key sealed a chain already (then it never starts one again)?"""
        return self._key.started

    def mark_started(self) -> None:
        """Record in the key file that it seals a chain now (once; store/base.py)."""
        if self._key.started:
            return
        with self._locked("record that it has started sealing"):
            cur = read_key_file(self.path, private=True)
            if not cur.started:
                cur = AuditKey(cur.kind, cur.epoch, cur.epoch_s, cur.key, True)
                self._replace(cur)
            self._key = cur

    def key_for(self, min_epoch: int = 0, now: float | None = None) -> AuditKey:
        """The key to seal with now: the current epoch, never one before `min_epoch` (the last
        sealed entry's) nor before the key file's (another process may have evolved it)."""
        self._reread_if_replaced()
        today = epoch_now(self._key.epoch_s, now)
        # A last seal claiming an epoch that has not begun is forged (or the clock was set
        # back): never follow it further than tomorrow, where the derivation would be unbounded
        # (one SHA-256 per epoch); `verify` names that entry.
        want = max(today, min(min_epoch, today + 1))
        if want <= self._key.epoch:
            return self._key
        with self._locked("move on to today's key"):
            cur = read_key_file(self.path, private=True)
            if cur.epoch < want:
                cur = cur.at(want)
                self._replace(cur)
            # Only the newest key stays in memory, as in the file.
            self._key = cur
        return self._key

    @contextlib.contextmanager
    def _locked(self, what: str) -> Iterator[None]:
        """The lock file next to the key, held for a read-change-replace of the key file;
        waited for at most LOCK_WAIT_S (a process stopped while holding it must not hang us)."""
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise KeyFileError(f"cannot {what} in audit key file {self.path} ({e.strerror}): its folder must "
                               f"be writable by eaglebot") from None
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                        raise KeyFileError(f"cannot {what} in audit key file {self.path}: its lock {lock} "
                                           f"stayed held by another process for {LOCK_WAIT_S:g} s") from None
                    time.sleep(0.01)
            try:
                yield
            except OSError as e:
                raise KeyFileError(f"cannot {what} in audit key file {self.path} ({e.strerror}): its folder "
                                   f"must be writable by eaglebot") from None
        finally:
            os.close(fd)  # releases the lock

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
        self._ident = self._file_ident()


class Verifier:
    """Checks seals with a verification key (every epoch from its first) or a sealing key
    (only its epoch and later: the earlier keys are gone)."""

    def __init__(self, key: AuditKey):
        self.base = key
        self._cache: AuditKey = key

    def can_check(self, epoch: int) -> bool:
        return self.base.epoch <= epoch <= self.base.epoch + MAX_EPOCHS

    def check(self, epoch: int, entry_hash: str, seal: str) -> bool:
        """The seal of an entry of `epoch` (callers check epochs in order: keys are derived
        forward only, so a whole chain costs at most MAX_EPOCHS derivations)."""
        if epoch < self._cache.epoch:
            self._cache = self.base  # epochs only go forward along a sound chain; restart if not
        self._cache = self._cache.at(epoch)
        return hmac.compare_digest(seal_mac(self._cache.key, epoch, entry_hash), seal)
