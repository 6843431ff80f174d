"""/proc facts (stat records, environments, port listeners) and the one "is this process ours" rule.

Real processes throughout: the parser reads the kernel's own /proc/PID/stat text, and
the ownership rule is checked on a real session with a scheduler-like child, a child
in its own process group and a child that called setsid.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from support.helpers import wait_for

from eaglebot.sdk import SkillContext
from eaglebot.facts.host import ports, procs
from eaglebot.skills.lib import processes
from eaglebot.store.db import owner_alive, proc_start_time
from eaglebot.transport import LocalTransport


def stat_line(pid: int = 4242, comm: str = "python3", state: str = "S", ppid: int = 1, pgrp: int = 4242,
              session: int = 4242, starttime: int = 987654) -> str:
    """A /proc/PID/stat record as Linux 6 prints it (52 fields), with the fields we read set."""
    tail = [state, ppid, pgrp, session, 0, -1, 4194560, 1234, 0, 0, 0, 10, 3, 0, 0, 20, 0, 1, 0, starttime,
            123456789, 4567, 18446744073709551615] + [0] * 29
    return f"{pid} ({comm}) " + " ".join(str(x) for x in tail) + "\n"


def read_stat(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read()


# -- the parser ----------------------------------------------------------------------------------

def test_parse_stat_reads_the_kernels_own_record_of_this_process():
    text = read_stat(os.getpid())
    st = procs.parse_stat(text)
    assert (st.pid, st.ppid, st.pgrp, st.session) == (os.getpid(), os.getppid(), os.getpgrp(), os.getsid(0))
    with open(f"/proc/{os.getpid()}/comm") as f:
        assert st.comm == f.read().rstrip("\n")
    assert st.state == "R" and not st.zombie
    assert st.starttime == text[text.rindex(")") + 2:].split()[19] == proc_start_time(os.getpid())


@pytest.mark.parametrize("comm", ["sglang::schedul", "tmux: server", "a) S (b", ")", "(", "x ) ) Z 1 2 3", ""])
def test_parse_stat_takes_the_command_name_up_to_the_last_parenthesis(comm):
    st = procs.parse_stat(stat_line(pid=31337, comm=comm, state="S", ppid=7, pgrp=31300, session=31000))
    assert (st.pid, st.comm, st.state, st.ppid, st.pgrp, st.session, st.starttime) == \
        (31337, comm, "S", 7, 31300, 31000, "987654")


def test_parse_stat_marks_zombies_and_dead_processes():
    assert procs.parse_stat(stat_line(state="Z")).zombie
    assert procs.parse_stat(stat_line(state="X")).zombie
    assert not procs.parse_stat(stat_line(state="D")).zombie


@pytest.mark.parametrize("text", ["", "\n", "hello", "12 (x) S", stat_line().replace("4242 (", "abc (", 1),
                                  stat_line().replace(" 987654 ", " 98x654 "), "12 x) S 1 1 1"])
def test_parse_stat_refuses_text_that_is_not_one_record(text):
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        procs.parse_stat(text)


def test_parse_stats_keeps_the_records_and_skips_everything_else():
    text = stat_line(1, "init") + "cat: /proc/99/stat: No such file or directory\n" + stat_line(2, "a) b") + "\n"
    assert [(s.pid, s.comm) for s in procs.parse_stats(text)] == [(1, "init"), (2, "a) b")]


def test_a_process_that_renames_itself_with_parentheses_is_parsed_from_proc():
    code = ("import time\nopen('/proc/self/comm', 'w').write('x) Z (y 1 2')\ntime.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for(lambda: open(f"/proc/{p.pid}/comm").read().startswith("x) Z"), what="the rename")
        st = procs.parse_stat(read_stat(p.pid))
        assert (st.pid, st.comm, st.ppid, st.zombie) == (p.pid, "x) Z (y 1 2", os.getpid(), False)
        assert proc_start_time(p.pid) == st.starttime
    finally:
        p.kill()
        p.wait()


def test_the_store_counts_a_zombie_run_owner_as_gone():
    p = subprocess.Popen(["true"])
    try:
        wait_for(lambda: procs.parse_stat(read_stat(p.pid)).zombie, what="the zombie")
        assert proc_start_time(p.pid) is None
        assert not owner_alive(p.pid, socket.gethostname(), None)
    finally:
        p.wait()
    assert proc_start_time(p.pid) is None


def test_the_store_tells_a_reused_pid_by_its_start_time():
    me = proc_start_time(os.getpid())
    assert owner_alive(os.getpid(), socket.gethostname(), me)
    assert not owner_alive(os.getpid(), socket.gethostname(), str(int(me) + 1))


# -- through a host ------------------------------------------------------------------------------

async def test_stats_reads_the_processes_asked_for_and_skips_those_that_are_gone():
    host = LocalTransport()
    gone = subprocess.Popen(["true"])
    gone.wait()
    got = await procs.stats(host, [os.getpid(), gone.pid])
    assert [s.pid for s in got] == [os.getpid()]
    assert got[0].session == os.getsid(0)
    assert os.getpid() in {s.pid for s in await procs.stats(host)}
    assert await procs.stat_of(host, gone.pid) is None


async def test_environ_is_read_from_a_live_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         env={**os.environ, "SGLANG_SIMULATE_ACC_LEN": "3.2", "EAGLE_X": "a=b c"})
    try:
        env = await procs.environ(LocalTransport(), p.pid)
        assert env is not None and env["SGLANG_SIMULATE_ACC_LEN"] == "3.2" and env["EAGLE_X"] == "a=b c"
    finally:
        p.kill()
        p.wait()
    assert await procs.environ(LocalTransport(), p.pid) is None


def test_parse_environ_splits_on_nul_and_the_first_equals_sign():
    assert procs.parse_environ(b"A=1\0SGLANG_SIMULATE_ACC_LEN=3.2\0B=x=y\0") == {
        "A": "1", "SGLANG_SIMULATE_ACC_LEN": "3.2", "B": "x=y"}


# -- ports ---------------------------------------------------------------------------------------

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4455667 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0
   2: 0100007F:7530 0100007F:D2C4 01 00000000:00000000 00:00000000 00000000  1001        0 4455700 1 0000000000000000 20 4 30 10 -1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:7530 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1002        0 998877 1 0000000000000000 100 0 0 10 0
"""


def test_listening_sockets_on_a_port_are_found_in_proc_net_tcp():
    assert set(ports.parse_listening(PROC_NET_TCP + PROC_NET_TCP6, 30000)) == {"4455667", "998877"}
    assert set(ports.parse_listening(PROC_NET_TCP, 22)) == {"1234"}
    assert set(ports.parse_listening(PROC_NET_TCP, 31000)) == set()
    assert ports.parse_fd_socket_pids("/proc/4242/fd/7\n/proc/4242/fd/9\n/proc/77/fd/3\n") == {4242, 77}


async def test_listeners_names_the_process_that_listens_and_nothing_on_a_free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        lis = await ports.listeners(LocalTransport(), port)
        assert lis.pids == {os.getpid()} and lis.busy and not lis.unseen
    free = await ports.listeners(LocalTransport(), port)
    assert not free.busy and free.pids == set()


# -- ours ----------------------------------------------------------------------------------------

FAMILY = """
sleep 300 & echo plain $!
{py} -c 'import os, time; os.setpgid(0, 0); time.sleep(300)' & echo own_group $!
{py} -c 'import os, time; os.setsid(); time.sleep(300)' & echo left $!
wait
"""


@pytest.fixture
def family():
    """A session as spawn_detached starts it: a leader and three children, one of which left."""
    leader = subprocess.Popen(["sh", "-c", FAMILY.format(py=sys.executable)], start_new_session=True,
                              stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    pids = {"leader": leader.pid}
    for _ in range(3):
        word, pid = leader.stdout.readline().split()
        pids[word] = int(pid)

    def settled():
        st = {k: procs.parse_stat(read_stat(v)) for k, v in pids.items()}
        return st["left"].session == pids["left"] and st["own_group"].pgrp == pids["own_group"]
    wait_for(settled, what="the children's setsid/setpgid")
    yield pids
    for pid in pids.values():
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    leader.wait()


async def test_the_sessions_children_are_ours_and_a_child_that_called_setsid_is_not(family):
    host = LocalTransport()
    infos = await procs.proc_info(host, list(family.values()))
    ours = {k for k, pid in family.items() if processes.is_ours(infos[pid], {family["leader"]})}
    assert ours == {"leader", "plain", "own_group"}
    assert not processes.is_ours(infos[family["plain"]], {family["left"] + 100000})


async def test_session_children_stay_ours_after_the_leader_is_gone(family):
    os.kill(family["leader"], 9)
    wait_for(lambda: not os.path.exists(f"/proc/{family['leader']}")
             or procs.parse_stat(read_stat(family["leader"])).zombie, what="the leader's death")
    stats = {s.pid: s for s in await procs.stats(LocalTransport(), list(family.values()))}
    assert processes.is_ours(stats[family["plain"]], {family["leader"]})
    assert processes.is_ours(stats[family["own_group"]], {family["leader"]})
    assert not processes.is_ours(stats[family["left"]], {family["leader"]})


async def test_alive_checks_the_start_time_not_just_the_pid():
    host = LocalTransport()
    ctx = SkillContext(host=host, host_name="local", vars={}, run_id=1, step_idx=0, step_name="x")
    p = subprocess.Popen(["sleep", "60"])
    try:
        info = (await procs.proc_info(host, [p.pid]))[p.pid]
        assert await processes.alive(ctx, [info]) == {p.pid}
        # The same PID with another start time is a different process: not the one we saw.
        reused = procs.ProcInfo(procs.Stat(p.pid, info.comm, "S", 1, p.pid, p.pid, "1"), info.user, info.cmdline)
        assert await processes.alive(ctx, [reused]) == set()
    finally:
        p.kill()
        p.wait()
    assert await processes.alive(ctx, [info]) == set()
