"""A step's streamed output: redacted line by line, written whole (gzip, SHA-256) to a file
in the bot's output folder (`Settings.output_root`), kept in the audit store as a head and
a tail, written to the store every `FLUSH_INTERVAL_S` by a background task.

Memory stays bounded whatever a step prints: the file is written as the output comes, the
store gets at most `keep_bytes` of it (plus one marker line), the live views a few lines.
Bytes are exact in the file (NUL, invalid UTF-8: the transports decode with surrogate
escapes); the text for the store and the views shows them escaped (`\\x00`, `\\xff`), because
SQLite text stops at a NUL for many readers and a terminal or Slack must never get one raw.
"""
from __future__ import annotations

import asyncio
import collections
import gzip
import hashlib
import logging
import os
import re
import zlib
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from eaglebot.engine.redact import Redactor
from eaglebot.errors import EagleError

log = logging.getLogger("eaglebot.engine")

FLUSH_INTERVAL_S = 0.5
TAIL_LINES = 200
VIEW_LINE_MAX = 2000   # characters of one line kept for the live views' tail
FILE_BUFFER = 256 * 1024
# Level 1: the bot compresses on its event loop, and the fastest level still shrinks logs well.
GZIP_LEVEL = 1


def raw_bytes(s: str) -> bytes:
    """The bytes a transport decoded into `s` (undoing its surrogate escapes)."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no transport made (a skill's JSON): as `\ud83d`
        return s.encode("utf-8", "backslashreplace")


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else (f"\\u{c:04x}" if c else "\\x00")


def printable(data: bytes | str) -> str:
    """Text safe for the store, a terminal and Slack: a byte that is not UTF-8 as `\\xff` (a
    transport, argv and stdin carry it as a surrogate escape, U+DC80..U+DCFF), any other lone
    surrogate (a Socket Mode payload's JSON) as `\\ud83d`, NUL as `\\x00`. SQLite refuses the
    surrogates outright and many readers cut its text at a NUL."""
    if isinstance(data, bytes):
        return data.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
    if data.isascii() and "\x00" not in data:
        return data
    return _UNSTORABLE.sub(_escape, data)


def printable_obj(v: Any) -> Any:
    """`printable` on every string of a JSON-like value."""
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, dict):
        return {printable(k) if isinstance(k, str) else k: printable_obj(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [printable_obj(x) for x in v]
    return v


def keep_last(s: str, n: int, what: str) -> str:
    """The last `n` characters of `s`, after a line saying how much of `what` was cut."""
    if len(s) <= n:
        return s
    return f"[... first {len(s) - n} characters of {what} cut]\n" + s[-n:]


def _char_start(b: bytes, i: int, step: int) -> int:
    """`i` moved by `step` (-1: back, 1: on), at most 3 bytes, off a UTF-8 continuation
    byte, so a cut does not split a character; `i` itself when that is not UTF-8 anyway."""
    j = i
    for _ in range(4):
        if not 0 <= j < len(b) or (b[j] & 0xC0) != 0x80:
            return j
        j += step
    return i


class OutputFile:
    """The whole output of one step: gzip, 0600, in a 0700 folder; SHA-256 and byte count of
    the uncompressed bytes. Opened at the first byte (most steps print nothing)."""

    def __init__(self, path: Path):
        self.path = path
        self.nbytes = 0
        self._buf = bytearray()
        self._gz: gzip.GzipFile | None = None
        self._raw: Any = None

    def write(self, data: bytes) -> None:
        self.nbytes += len(data)
        self._buf += data
        if len(self._buf) >= FILE_BUFFER:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        if self._gz is None:
            self._open()
        assert self._gz is not None
        self._gz.write(self._buf)
        self._buf.clear()

    def _open(self) -> None:
        # <output_root>/<db_id>/<run_id>/: each level 0700 (the output may hold what a step
        # printed about the host; the DB's folder may be readable by others).
        for d in (self.path.parents[2], self.path.parents[1], self.path.parent):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self._raw = os.fdopen(fd, "wb")
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=GZIP_LEVEL, mtime=0)

    def close(self) -> None:
        self.flush()
        if self._gz is not None:
            self._gz.close()
            self._raw.flush()
            os.fsync(self._raw.fileno())
            self._raw.close()
            self._gz = None

    @property
    def written(self) -> bool:
        return self.nbytes > 0


def _fit(raw: bytes, cap: int, *, keep_end: bool) -> bytes:
    """The longest start (or end) of `raw` whose `printable` text is at most `cap` bytes of UTF-8."""
    shown = len(printable(raw).encode())
    while shown > cap:
        n = min(len(raw) - 1, len(raw) * cap // shown)
        raw = raw[len(raw) - n:] if keep_end else raw[:n]
        shown = len(printable(raw).encode())
    return raw


class HeadTail:
    """The first `head` and the last `tail` bytes of a stream, and how many were between."""

    def __init__(self, keep_bytes: int):
        self.head_cap = keep_bytes // 2
        self.tail_cap = keep_bytes - self.head_cap
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0 and not self.tail:
            if len(data) <= room:
                self.head += data
                return
            cut = _char_start(data, room, -1)
            self.head += data[:cut]
            data = data[cut:]
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
            self.tail_len -= len(self.tail.popleft())

    def text(self, marker: Callable[[int], str]) -> str:
        tail = b"".join(self.tail)
        if len(tail) > self.tail_cap:
            tail = tail[_char_start(tail, len(tail) - self.tail_cap, 1):]
        # Escaped, an invalid byte takes 4: the caps hold for the text the DB gets.
        head = _fit(bytes(self.head), self.head_cap, keep_end=False)
        tail = _fit(tail, self.tail_cap, keep_end=True)
        if self.total == len(head) + len(tail):
            return printable(head + tail)
        # Whole lines on both sides of the marker where the lines are short enough.
        i = head.rfind(b"\n")
        head = head[:i + 1] if i >= 0 else head
        j = tail.find(b"\n")
        tail = tail[j + 1:] if 0 <= j < len(tail) - 1 else tail
        text = printable(head)
        if text and not text.endswith("\n"):
            text += "\n"
        return text + marker(self.total - len(head) - len(tail)) + "\n" + printable(tail)


class OutputBuffer:
    """Lines a skill logs, on their way to the output file, the store and the observer.

    `flush` marks the stored text clean only after the store took it, so a flush that
    fails or is cancelled mid-write loses nothing: the next flush (or the final one) writes
    it again.
    """

    def __init__(self, redactor: Redactor, write: Callable[[str], Awaitable[None]],
                 echo: Callable[[str], None], *, keep_bytes: int = 1024 * 1024,
                 path: Path | None = None, run_id: int | None = None):
        self._redactor = redactor
        self._write = write
        self._echo = echo
        self._kept = HeadTail(keep_bytes)
        self._file = OutputFile(path) if path is not None else None
        self._sha = hashlib.sha256()
        self._run_id = run_id
        self._dirty = False
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._file_error: str | None = None

    def line(self, line: str) -> None:
        """One line (`ctx.log`): its newline is added."""
        self.text(line.rstrip("\n") + "\n")

    def text(self, piece: str) -> None:
        """Output as the host sent it (`ctx.stream()`): a line with or without its newline."""
        nl = piece.endswith("\n")
        body = self._redactor.text(piece[:-1] if nl else piece)
        data = raw_bytes(body + "\n" if nl else body)
        self._sha.update(data)
        self._kept.add(data)
        self._dirty = True
        self._to_file(lambda f: f.write(data))
        shown = printable(body)
        self._tail.append(shown[:VIEW_LINE_MAX])
        try:
            self._echo(shown)
        except Exception:  # a live view never fails the step
            log.exception("observer failed")

    def _to_file(self, op: Callable[[OutputFile], None]) -> None:
        """`op` on the whole-output file, until it fails once: from then on the DB's head and
        tail are all there is, and the step's warning (`file_error`) says why."""
        if self._file is None or self._file_error is not None:
            return
        try:
            op(self._file)
        except OSError as e:
            self._file_error = f"{e.strerror or e} ({self._file.path})"
            log.warning("writing the step's output file failed: %s", self._file_error)

    def tail(self, n: int = 30) -> str:
        return "\n".join(list(self._tail)[-n:])

    @property
    def nbytes(self) -> int:
        return self._kept.total

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def file(self) -> Path | None:
        """The whole-output file, once closed: None when nothing was printed or it could not be written."""
        f = self._file
        return f.path if f is not None and f.written and self._file_error is None else None

    @property
    def file_error(self) -> str | None:
        """Why the whole-output file could not be written (the DB still has head and tail)."""
        return self._file_error

    def stored_text(self) -> str:
        """What the store keeps: the head, a marker line where bytes were left out, the tail."""
        run = self._run_id if self._run_id is not None else "RUN"
        return self._kept.text(lambda n: f"[... {n} bytes not kept here; whole output: "
                                         f"eagle show {run} --output ...]")

    async def flush(self) -> None:
        # Never two at once: the flusher alone calls it until close() has waited for it to end.
        self._to_file(OutputFile.flush)
        if not self._dirty:
            return
        self._dirty = False
        try:
            await self._write(self.stored_text())
        except BaseException:
            self._dirty = True
            raise

    async def _flusher(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), FLUSH_INTERVAL_S)
            except asyncio.TimeoutError:
                pass
            try:
                await self.flush()
            except Exception as e:  # the final flush tries again; the step goes on
                log.warning("streaming step output to the store failed: %s", e,
                            exc_info=not isinstance(e, EagleError))

    def start(self) -> None:
        self._task = asyncio.create_task(self._flusher())

    async def close(self) -> None:
        """Stop the periodic flush and write what is left, even when the step is being
        cancelled: a write already handed to the store's thread cannot be taken back, so
        the flusher is asked to stop rather than cancelled in the middle of one."""
        self._stop.set()
        await asyncio.shield(self._finish())

    async def _finish(self) -> None:
        if self._task is not None:
            await self._task
        try:
            await self.flush()
        finally:
            # its fsync (~2 ms) off the event loop: a thousand hosts' steps end together
            await asyncio.to_thread(self._to_file, OutputFile.close)


def read_chunks(path: str | Path, size: int = 1024 * 1024) -> Iterator[bytes]:
    """The uncompressed bytes of an output file, a chunk at a time."""
    with gzip.open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def check_output_file(path: str | Path, sha256: str | None, nbytes: int | None, what: str) -> None:
    """Raise one sentence unless the file holds exactly what the audit row says (size, SHA-256)."""
    h, n = hashlib.sha256(), 0
    try:
        for chunk in read_chunks(path):
            h.update(chunk)
            n += len(chunk)
    except FileNotFoundError:
        raise EagleError(f"{what}: its output file {path} is missing (deleted or moved?)") from None
    except (OSError, EOFError, zlib.error) as e:
        raise EagleError(f"{what}: its output file {path} cannot be read ({e})") from None
    if h.hexdigest() != sha256 or (nbytes is not None and n != nbytes):
        raise EagleError(f"{what}: its output file {path} does not match the SHA-256 in the audit DB "
                         f"(it was changed after the step)")
