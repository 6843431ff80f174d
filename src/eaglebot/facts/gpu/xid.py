"""The kernel log's Xid lines, as pure and total parsers: whatever a host prints, each function
returns data, never raises.

Only the driver's own lines count: a line whose message *starts* with `NVRM: Xid (PCI:...): N,`
(after dmesg's `[seconds]` and an optional `[T123]` caller id); an `audit:` line that quotes one
is not an Xid. A line that starts like the driver's but cannot be read (a 5,000-digit code, no
bus id) is returned as unreadable: the watch reports it as a finding of its own instead of
stopping. Each probe's command also prints the host's boot id and uptime, so the watch counts
a line once per boot (by its timestamp and text) and can place an Xid in wall-clock time.
"""
from __future__ import annotations

import re
import shlex
from collections import deque
from dataclasses import dataclass, field

# One line each (NVIDIA's Xid catalogue); severity: what the Xid says about the node.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (usually the application)", "warn"),
    31: ("GPU memory page fault (usually the application)", "warn"),
    43: ("GPU stopped processing", "warn"),
    45: ("preemptive cleanup after earlier errors", "warn"),
    48: ("double-bit ECC error", "fail"),
    61: ("internal micro-controller breakpoint/warning", "fail"),
    62: ("internal micro-controller halt", "fail"),
    63: ("ECC page retirement or row remap recorded", "warn"),
    64: ("ECC page retirement or row remap recording failure", "fail"),
    68: ("video processor exception (usually the application)", "warn"),
    69: ("graphics engine class error (usually the application)", "warn"),
    74: ("NVLink error", "fail"),
    79: ("GPU has fallen off the bus", "fail"),
    92: ("high single-bit ECC error rate", "warn"),
    94: ("contained ECC error (restart the application)", "fail"),
    95: ("uncontained ECC error (reset the GPU)", "fail"),
    119: ("GSP RPC timeout", "fail"),
    120: ("GSP error", "fail"),
    154: ("GPU recovery action changed", "warn"),
}

# What a workload's own death leaves in the log. The catalogue's immediate action for each is
# RESTART_APP or IGNORE, never a GPU reset: 13 (graphics engine exception) and 31 (MMU fault)
# are raised by the application's own kernels and accesses; 43 (channel stopped, "user
# application hit a software induced fault") and 45 (preemptive removal of a channel, logged
# for every channel of a process killed with work in flight, informational) are the teardown
# itself; 68 and 69 are engine exceptions of the application's video and graphics classes.
# Inside the bot's own teardown window these are expected, never a reason to quarantine.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 69})
# The fatal class: the driver recorded an event no later reading can make untrue and whose
# remedy is a GPU reset or a node reboot (48 double-bit ECC, 64 remap/retirement failure, 79
# off the bus, 94/95 contained/uncontained ECC, 119/120 GSP timeout/error). These act at once;
# every other finding needs a second probe to agree.
AT_ONCE_XIDS = frozenset({48, 64, 79, 94, 95, 119, 120})
RECOVERY_XID = 154          # "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"

LINE_LIMIT = 240            # characters of a line kept in a finding or an event
MAX_LINES = 1000            # the command's tail: a teardown burst never hides a later Xid

_LINE = re.compile(r"^\s*(?:\[\s*(?P<ts>\d{1,10}(?:\.\d{1,9})?)\]\s*)?(?:\[\s*[TC]\d{1,10}\]\s*)?"
                   r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,2}(?:\.[0-7])?)\): "
                   r"(?P<code>\d{1,5})(?:,\s*(?P<text>.*?))?\s*$")
# A line that claims to be the driver's: its message begins with NVRM: Xid.
_CLAIM = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*){0,2}NVRM: Xid\b")
_HEADER = re.compile(r"^eagle-boot (?P<boot>[0-9a-f-]{36})? ?(?P<up>\d{1,10}(?:\.\d{1,9})?)?\s*$")
_RECOVERED = re.compile(r"\bto 0x0+ \(None\)")


def clip(line: str, limit: int = LINE_LIMIT) -> str:
    """One line as a finding may quote it: control characters out, at most `limit` characters."""
    s = "".join(c if c.isprintable() else "?" for c in line.strip())
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass
class Xid:
    bus_id: str           # as the kernel prints it: 0000:00:06 (domain:bus:device)
    code: int
    text: str
    meaning: str
    severity: str
    ts: float | None = None   # the kernel's seconds since boot (`[  123.456]`), when printed

    def line(self) -> str:
        return f"Xid {self.code} ({self.meaning})"

    @property
    def key(self) -> tuple[float | None, int, str, str]:
        """What makes a line the same line when the log is read again: its time and text."""
        return (self.ts, self.code, self.bus_id, self.text)

    @property
    def recovered(self) -> bool:
        """An Xid 154 that says the driver needs no recovery action any more."""
        return self.code == RECOVERY_XID and bool(_RECOVERED.search(self.text))


@dataclass
class KernelLog:
    """What the kernel log command printed: the Xids, the lines that claim to be Xids but cannot
    be read, and the host's boot id and uptime (None where not printed)."""
    xids: list[Xid] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    boot_id: str | None = None
    uptime_s: float | None = None


def _xid(m: re.Match[str]) -> Xid:
    code = int(m.group("code"))
    meaning, severity = XID_MEANINGS.get(code, ("see NVIDIA's Xid catalogue", "warn"))
    ts = m.group("ts")
    return Xid(m.group("bus").lower(), code, clip(m.group("text") or ""), meaning, severity,
               float(ts) if ts is not None else None)


def parse_kernel_log(text: str) -> KernelLog:
    """The kernel log command's output (kernel_log_command) or plain `dmesg` text."""
    out = KernelLog()
    for line in text.splitlines():
        h = _HEADER.match(line)
        if h:
            out.boot_id = h.group("boot")
            out.uptime_s = float(h.group("up")) if h.group("up") else None
            continue
        if not _CLAIM.match(line[:200]):
            continue
        m = _LINE.match(line)
        if m:
            out.xids.append(_xid(m))
        else:
            out.unreadable.append(clip(line))
    return out


def parse_xids(text: str) -> list[Xid]:
    """Xid lines of `dmesg` (`NVRM: Xid (PCI:0000:00:06): 79, pid=..., GPU has fallen off the bus.`)."""
    return parse_kernel_log(text).xids


def kernel_log_command(dmesg: str) -> str:
    """The kernel log's Xid lines (the last MAX_LINES), then the host's boot id and uptime
    (`eagle-boot ID SECONDS`, read after the log: no line is newer); exit 3 with the error's
    last line when the log cannot be read (non-root with kernel.dmesg_restrict=1)."""
    d = shlex.quote(dmesg)
    return (f"if out=$(LC_ALL=C {d} 2>&1); then printf '%s\\n' \"$out\" | grep -F 'Xid' | tail -n {MAX_LINES}; "
            f"rc=0; else printf '%s\\n' \"$out\" | tail -n 1; rc=3; fi; "
            f"printf 'eagle-boot %s %s\\n' \"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\" "
            f"\"$(cut -d' ' -f1 /proc/uptime 2>/dev/null)\"; exit $rc")


def unreadable_log(dmesg: str, printed: str, exit_status: int | None) -> str:
    """Why the kernel log could not be read, as `dmesg: <its error>`."""
    last = [line for line in printed.splitlines() if line.strip() and not _HEADER.match(line)][-1:]
    why = clip(last[0], 200) if last else f"exit status {exit_status}"
    name = dmesg.rsplit("/", 1)[-1]
    return why if why.startswith(("dmesg:", f"{name}:")) else f"dmesg: {why}"


def xids_since(xids: list[Xid], cursor: float | None) -> tuple[list[Xid], float | None]:
    """The Xids after `cursor` (kernel seconds read up to) and the new cursor. None: never read
    (every Xid is new). A log whose newest Xid is older than the cursor was cleared or the host
    rebooted (the clock started over): all of it is new. (The watch uses LogMemory, which also
    knows the boot and each line; this is its fallback when neither is known.)"""
    stamps = [x.ts for x in xids if x.ts is not None]
    newest = max(stamps) if stamps else None
    if cursor is None or newest is None or newest < cursor:
        return [x for x in xids if x.ts is not None or cursor is None], newest if newest is not None else 0.0
    return [x for x in xids if x.ts is not None and x.ts > cursor], newest


SEEN_LIMIT = 4096


@dataclass
class LogMemory:
    """What the watch has read of one host's kernel log: its boot, the lines already counted (by
    time and text, bounded), and `floor`, the kernel time at or before which every line was
    counted before this memory began (the store's cursor after a restart, or what was evicted)."""
    boot_id: str | None = None
    floor: float | None = None
    newest: float | None = None
    seen: set[tuple[float | None, int, str, str]] = field(default_factory=set)
    order: deque[tuple[float | None, int, str, str]] = field(default_factory=deque)

    def fresh(self, log: KernelLog) -> list[Xid]:
        """The lines of `log` not counted before, remembered now; a new boot starts over."""
        if log.boot_id and self.boot_id and log.boot_id != self.boot_id:
            self.floor, self.newest = None, 0.0        # a new boot: its clock starts over, and so does the cursor
            self.seen.clear()
            self.order.clear()
        elif not self.boot_id and self.floor is not None:
            stamps = [x.ts for x in log.xids if x.ts is not None]
            if stamps and max(stamps) < self.floor:     # no boot id known: a clock that went back rebooted
                self.floor = None
        self.boot_id = log.boot_id or self.boot_id
        out = []
        for x in log.xids:
            k = x.key
            if k in self.seen or (self.floor is not None and x.ts is not None and x.ts <= self.floor):
                continue
            self._remember(k)
            out.append(x)
            if x.ts is not None and (self.newest is None or x.ts > self.newest):
                self.newest = x.ts
        return out

    def fresh_lines(self, lines: list[str]) -> list[str]:
        """The unreadable lines not reported before (each once, like an Xid)."""
        out = []
        for line in lines:
            k = (None, -1, "", line)
            if k not in self.seen:
                self._remember(k)
                out.append(line)
        return out

    def _remember(self, k: tuple[float | None, int, str, str]) -> None:
        self.seen.add(k)
        self.order.append(k)
        while len(self.order) > SEEN_LIMIT:
            old = self.order.popleft()
            self.seen.discard(old)
            if old[0] is not None and (self.floor is None or old[0] > self.floor):
                self.floor = old[0]


def xid_gpu(xid: Xid, bus_ids: dict[int, str]) -> int | None:
    """The GPU index whose `pci.bus_id` (00000000:00:06.0) matches the Xid's PCI:0000:00:06."""
    want = xid.bus_id.split(".")[0].split(":")
    for idx, bus in bus_ids.items():
        have = bus.lower().split(".")[0].split(":")
        try:
            if len(have) == 3 and len(want) >= 2 and have[-2:] == want[-2:] and \
                    (len(want) == 2 or int(have[0], 16) == int(want[0], 16)):
                return idx
        except ValueError:          # a bus id nvidia-smi printed oddly matches nothing
            continue
    return None
