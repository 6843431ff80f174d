"""Finding and stopping what a step started on its host: the sh that every transport sends.

A step's processes are not known by anything the step can shed. An environment variable
(`EAGLE_PROC_TAG`) is unset by `env -u`, a process group or session is left by `setsid`, and
a parent chain breaks when the parent exits (the orphan goes to PID 1). What no process can
change about itself: its start time, its user (without root), and, where the host gives each
login or service a cgroup of its own (systemd: a scope per SSH session, a cgroup per
service), that cgroup (without root, or a cgroup tree delegated to the user). So a
process on the host is the step's when it was started after the step's first command
(`since`, the host's boot clock, reported by that command) by the same user, and

1. it is in one of the step's commands' process groups or sessions; or
2. one of its ancestors is one of the step's commands (whatever its user: a root step may
   start processes as another); or
3. walking up its ancestors started since then, the first one whose parent is gone (PID 1,
   or systemd's user manager, adopted it) is in the scan's own cgroup: an orphan of this
   connection (over SSH) or of this bot (`local`).

Not the step's, whatever it does: a process whose chain of ancestors reaches one started
before the step (the user's login shell, cron, tmux, another channel of the bot: a health
probe) before it reaches one of the step's commands, and the sessions of servers the step
started on purpose (`keep`, from `spawn_detached`). On a host with one cgroup for everything
(no systemd, a container) rule 3 also takes an orphan that another process of the same user
made during the step: give the bot an SSH user of its own.

Every rule reads only /proc (one `awk` over every /proc/PID/stat, and the status and cgroup
files of the few orphans started since), so the scan costs the same whatever the step did.
The tag (`EAGLE_PROC_TAG`) is looked for only when the step's start is unknown (a command cut
off before it reported it).

A process that forks and exits every few milliseconds (a fork-hopper) is never in one listing
of /proc for long: each scan also looks at every pid allocated since its listing, newest first,
and the kill freezes what it finds (SIGSTOP the moment a process is found, scan after scan, until
one finds none still running) before SIGKILL, so a generation is stopped before it can fork the
next (`kill_script`). The start the scan goes by is never the step's own word: a command's start
announcement is read only from its first line, within the host's clock as the connection read it
(transport/ssh.py, `_since`).
"""
from __future__ import annotations

import shlex
from typing import Sequence

from eaglebot.transport.base import KILL_GRACE_S, TAG_VAR, valid_tag

# The walk, in POSIX awk (mawk, gawk, busybox). Input: `/proc/PID` paths, one a line, and
# `tag PID` lines (processes carrying the step's tag: taken whatever the rules say). Variables:
# me (the scan's shell, whose own descendants are skipped), since (the host's boot-clock
# seconds at the step's first command) or wall/now (the step's start as unix time, and this
# host's unix time: for a step whose start is only in the audit DB), groups/cmds/keep
# (space-framed lists of pids), fresh (print only processes not stopped yet: the freeze).
# Each pid is printed once, and at once (fflush): the freeze stops it before it can fork.
# Pids allocated after the list was taken (the kernel's last pid, /proc/loadavg) are looked at
# before and after the list, newest first, until no new one comes: a process that forks and
# exits faster than a scan (a fork-hopper) is found alive in its newest generation, never
# only in gone ones.
_AWK = r"""
function rd(p,   f, line, s, c, a) {
    if (p in st) return st[p] != ""
    f = "/proc/" p "/stat"
    if ((getline line < f) <= 0) { close(f); st[p] = ""; return 0 }
    close(f)
    s = line; sub(/^[0-9]+ \(/, "", s); c = s; sub(/\) [^)]*$/, "", c); sub(/^.*\) /, "", s)
    split(s, a, " ")
    st[p] = a[1]; pp[p] = a[2]; pg[p] = a[3]; si[p] = a[4]; start[p] = a[20] + 0; comm[p] = c
    return 1
}
function uidof(p,   f, line, a) {
    f = "/proc/" p "/status"
    while ((getline line < f) > 0) if (line ~ /^Uid:/) { close(f); split(line, a, /[ \t]+/); return a[2] " " a[3] " " a[4] " " a[5] " " }
    close(f); return ""
}
function cg(p,   f, line, out) {
    f = "/proc/" p "/cgroup"; out = ""
    while ((getline line < f) > 0) out = out line ";"
    close(f); return out
}
function has(list, x) { return x != "" && index(list, " " x " ") > 0 }
function ours(p,   a, q, d) {
    if (p in tagged) return 1
    if (has(groups, pg[p]) || has(groups, si[p])) return 1
    if (t0 < 0 || start[p] < t0) return 0
    a = p
    for (d = 0; d < 4096; d++) {
        if (a == me) return 0
        if (has(cmds, a)) return 1   # (of any user: a root step may start some as others)
        q = pp[a]
        if (q + 0 <= 1 || !rd(q) || (comm[q] == "systemd" && start[q] < t0)) {
            return cg(p) == mycg && has(" " uidof(p), uid)   # (p's own: `a` may be a zombie by now)
        }
        if (start[q] < t0) return 0
        a = q
    }
    return 0
}
function consider(p) {
    if (p in done) return
    done[p] = 1
    if (p == me || !rd(p) || st[p] == "Z" || has(keep, si[p])) return
    if (fresh != "" && (st[p] == "T" || st[p] == "t")) return
    if (ours(p)) { print p; fflush() }
}
function lastpid(   f, line, a) {
    f = "/proc/loadavg"; line = ""; getline line < f; close(f); split(line, a, " "); return a[5] + 0
}
BEGIN {
    split(uidof("self"), u, " "); uid = u[1]; mycg = cg("self")
    # Clock ticks a second (USER_HZ, 100 on every common architecture) without forking
    # getconf: this process's start in ticks over the boot clock's seconds now.
    f = "/proc/uptime"; getline upl < f; close(f); split(upl, w, " ")
    if (rd("self") && w[1] > 0) { hz = start["self"] / w[1]; if (hz > 95 && hz < 105) hz = 100 }
    if (hz + 0 <= 0) hz = 100
    if (wall != "") since = wall - now + w[1]
    t0 = (since == "" || since + 0 < 0) ? -1 : since * hz - 5
    f = "/proc/sys/kernel/pid_max"; pidmax = 32768; if ((getline l < f) > 0) pidmax = l + 0; close(f)
}
$1 == "last" { lo = $2 + 0; next }
$1 == "tag" { tagged[$2] = 1; todo[$2] = 1; next }
{ sub(/^\/proc\//, ""); if ($0 ~ /^[0-9]+$/) todo[$0] = 1 }
function born(   r, hi, p, n) {
    for (r = 0; r < 64; r++) {
        hi = lastpid()
        if (hi == lo) return
        # down from the last pid to the one before, wrapping at pid_max as the kernel does
        for (p = hi; p != lo && n < 4096; n++) { consider(p ""); p = p > 1 ? p - 1 : pidmax - 1 }
        lo = hi
    }
}
END { born(); for (p in todo) consider(p); born() }
"""


def _framed(pids: Sequence[int]) -> str:
    return " " + " ".join(str(int(p)) for p in pids) + " "


def find_script(tag: str | None, pgids: Sequence[int] = (), *, since: float | None = None,
                since_wall: float | None = None, keep: Sequence[int] = ()) -> str:
    """sh that defines `eagle_pids`, which prints the pid of every live process of the step
    (module docstring), one a line, each once, and `eagle_fresh`, the same less those already
    stopped. `pgids`: the step's commands (each leads its process group); `since`: the host's
    boot-clock seconds at its first command, or `since_wall`: the step's start in unix time
    (converted on the host, with two seconds for the clocks' skew)."""
    v = f"-v me=\"$$\" -v groups='{_framed(pgids)}' -v cmds='{_framed(pgids)}' -v keep='{_framed(keep)}'"
    if since is not None:
        v += f" -v since={since:.2f}"
    elif since_wall is not None:
        v += f" -v wall={since_wall - 2:.2f} -v now=\"$(date +%s)\""
    # (the kernel's last pid before the listing: the scan looks at every pid allocated since)
    listing = '{ read -r _ _ _ _ eagle_last </proc/loadavg; echo "last $eagle_last"; printf "%s\\n" /proc/[0-9]*; }'
    if since is None and tag:
        # The step's start unknown (a command cut off before it said when it started): its tag
        # is what is left to go by.
        mark = shlex.quote(TAG_VAR + "=" + valid_tag(tag))
        listing = (f'{{ grep -lzx {mark} /proc/[0-9]*/environ 2>/dev/null '
                   '| while IFS=/ read -r _ _ p _; do echo "tag $p"; done; ' + listing + '; }')
    awk = shlex.quote(_AWK)
    return (f"eagle_pids() {{ {listing} | awk {v} {awk} 2>/dev/null; }}; "
            f"eagle_fresh() {{ {listing} | awk {v} -v fresh=1 {awk} 2>/dev/null; }}; ")


def kill_script(tag: str | None, pgids: Sequence[int] = (), now: Sequence[int] = (),
                cont: Sequence[int] = (), *, since: float | None = None, since_wall: float | None = None,
                keep: Sequence[int] = ()) -> str:
    """sh that stops every live process of the step (`find_script`): TERM (and CONT: a stopped
    process acts on TERM only once continued, as systemd sends CONT after TERM), up to
    KILL_GRACE_S; then what is left is frozen (STOP to each process as the scan finds it, scan
    after scan until one finds none still running: a process that forks and exits every few
    milliseconds is stopped in the generation the scan finds, and a stopped process forks no
    more) and killed (KILL) until none is left; whatever was stopped and still lives at the end
    (no longer the step's by the rules) is continued. `now` (a wedged shell) gets KILL at once; `cont`
    (a stopped sshd) gets CONT. It prints `EAGLE-KILL <found> <left>`: how many processes it
    found and how many are left."""
    ticks = int(KILL_GRACE_S * 10)
    first = "".join(f"kill -KILL {int(p)} 2>/dev/null; " for p in now)
    first += "".join(f"kill -CONT {int(p)} 2>/dev/null; " for p in cont)
    return (
        first + find_script(tag, pgids, since=since, since_wall=since_wall, keep=keep) +
        'l=$(eagle_pids); if [ -z "$l" ]; then echo "EAGLE-KILL 0 0"; exit 0; fi; '
        'found=$(echo "$l" | wc -l); '
        'eagle_sig() { for p in $(eagle_pids); do kill -"$1" "$p" 2>/dev/null; done; true; }; '
        'eagle_sig TERM; eagle_sig CONT; i=0; '
        f'while [ -n "$(eagle_pids)" ] && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done; '
        'stopped=""; i=0; while [ $i -lt 20 ] && [ -n "$(eagle_pids)" ]; do '
        '  j=0; while [ $j -lt 200 ]; do '
        '    s=$(eagle_fresh | while read -r p; do kill -STOP "$p" 2>/dev/null && echo "$p"; done); '
        '    [ -n "$s" ] || break; stopped="$stopped $s"; j=$((j+1)); done; '
        '  eagle_sig KILL; i=$((i+1)); [ -z "$(eagle_pids)" ] || sleep 0.01; done; '
        # Whatever was stopped and lives on (no longer the step's by the rules: a root step's
        # process of another user whose parent went) is continued, never left frozen.
        'for p in $stopped; do kill -CONT "$p" 2>/dev/null; done; '
        'echo "EAGLE-KILL $found $(eagle_pids | wc -l)"'
    )


def parse_kill(out: str) -> tuple[int, int] | None:
    for line in out.splitlines():
        if line.startswith("EAGLE-KILL "):
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                return int(parts[1]), int(parts[2])
    return None


def kill_note(found_left: tuple[int, int] | None, what: str) -> tuple[bool, str]:
    """(all gone, one sentence) for a kill's result."""
    if found_left is None:
        return False, f"could not confirm that {what} stopped"
    found, left = found_left
    if left:
        return False, f"{left} of {found} processes of {what} survived SIGKILL"
    if found == 0:
        return True, f"{what}: nothing was left running"
    return True, f"{what}: {found} process{'es' if found != 1 else ''} stopped (SIGTERM, then SIGKILL)"


def leftover_note(found_left: tuple[int, int] | None) -> tuple[int, str]:
    """(found, one sentence) for the end-of-step clean-up; (0, "") when nothing was left."""
    if found_left is None:
        return 0, "could not check for processes it left running"
    found, left = found_left
    if not found:
        return 0, ""
    s = "es" if found != 1 else ""
    if left:
        return found, f"left {found} process{s} running; {left} survived SIGKILL"
    return found, f"left {found} process{s} running in the background; stopped at the end of the step"
