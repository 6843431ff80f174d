"""A real one-node Slurm cluster for the tests, from Debian's slurm-wlm (`.ci/run` installs it).

One cluster per test session (an xdist worker): slurmctld and slurmd of the installed Slurm
(22.05 on Debian 12), in the foreground as this process's children, with their own slurm.conf,
ports on 127.0.0.1, state, spool, log and pid files in a folder of their own; the machine's
/etc/slurm, /etc/munge and any cluster it runs are never touched. The node is `gpu-01`
(NodeAddr=127.0.0.1) in two partitions, `gpu` (the default) and `debug`, as the fixtures'
captures are.

Authentication: auth/none and cred/none where the installed Slurm still ships them (22.05
does): no key and no daemon to start, and Slurm still checks the uid a request claims
against SlurmUser, so a drain by a user who is not an operator is refused as on a real
cluster. Where they are gone (later releases), munge: a munged of the cluster's own, with its
own key and socket (AuthInfo=socket=...). `EAGLE_SLURM_AUTH=munge` picks munge anyway.

SlurmUser is the SSH test user (tests/support/sshd.py) when the tests run as root, so the bot's
`scontrol update` over SSH is an operator's; slurmd runs as root (it starts jobs as their
user). The tools reach the cluster through SLURM_CONF; `shims()` writes `scontrol` and `sinfo`
that set it and exec the real binaries, for the host vars (the skills take a tool's path,
quoted, so an `env ...` prefix cannot ride in the host var).
"""
from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODE = "gpu-01"
PARTITIONS = ("gpu", "debug")
SINFO_FORMAT = "%N %T %E"
START_DEADLINE_S = 90.0       # generous: a busy 2-core machine; the start takes well under 1 s idle


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be installed or started here: the Slurm tests fail with this sentence."""


def slurm_bin(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)),
                                       "")
    if not found:
        raise SlurmUnavailable(f"Slurm's {name} is not installed; the Slurm tests need it: "
                               f"apt-get install -y slurm-wlm munge")
    return found


def _plugin_dir() -> str:
    found = sorted(glob.glob("/usr/lib/*/slurm-wlm")) + sorted(glob.glob("/usr/lib/slurm*"))
    return found[0] if found else ""


def _has_auth_none() -> bool:
    d = _plugin_dir()
    return bool(d) and os.path.exists(os.path.join(d, "auth_none.so")) and os.path.exists(os.path.join(d, "cred_none.so"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    auth: str
    slurm_user: str
    port: int = 0                   # slurmctld's
    procs: list[subprocess.Popen] = field(default_factory=list)
    started_s: float = 0.0          # from the first daemon's start to the node idle in sinfo

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, user: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm command of this cluster, as this process's user or as `user` (root only)."""
        cmd = [slurm_bin(argv[0]), *argv[1:]]
        if user is not None:
            cmd = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.conf}", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=timeout)

    def check(self, *argv: str) -> str:
        res = self.run(*argv)
        if res.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)}: exit {res.returncode}: {res.stderr.strip() or res.stdout}")
        return res.stdout

    def sinfo(self, node: str = NODE) -> str:
        """`sinfo -N -h -n NODE -o "%N %T %E"`, exactly as node.drain runs it."""
        return self.check("sinfo", "-N", "-h", "-n", node, "-o", SINFO_FORMAT)

    def state(self, node: str = NODE) -> str:
        """The node's state from the whole node list: `sinfo -n NODE` alone can be stale (Slurm
        22.05 refreshes a node's allocated CPUs, what tells `mixed` from `allocated`, only when
        the whole list is asked for), so the waits ask for the whole list."""
        for line in self.check("sinfo", "-N", "-h", "-o", SINFO_FORMAT).splitlines():
            if line.split(" ", 1)[0] == node:
                return line.split(" ", 2)[1]
        return ""

    def wait(self, cond, what: str, timeout: float = START_DEADLINE_S) -> None:
        """Poll `cond` (the cluster's own answers) until true; the cluster's logs in the failure."""
        deadline = time.monotonic() + timeout
        while not cond():
            if any(p.poll() is not None for p in self.procs):
                raise SlurmUnavailable(f"a Slurm daemon exited while waiting for {what}: {self.logs()}")
            if time.monotonic() > deadline:
                now = self.run("sinfo", "-N", "-h", "-o", SINFO_FORMAT, timeout=30)
                raise AssertionError(f"Slurm: timed out waiting for {what} (sinfo: {now.stdout!r} {now.stderr!r}); "
                                     f"{self.logs()}")
            time.sleep(0.05)

    def jobs(self) -> list[str]:
        return self.check("squeue", "-h", "-o", "%i %T").split("\n")[:-1]

    def start_job(self, cpus: int = 1) -> str:
        """A batch job of `cpus` of the node's 2 CPUs, sleeping until cancelled; its id once it runs
        and the node is `mixed` (1 CPU) or `allocated` (2)."""
        if "drain" in self.state():
            raise AssertionError(f"{NODE} is {self.state()}: Slurm starts no job there; reset() the cluster first")
        out = self.check("sbatch", "--parsable", "-p", PARTITIONS[0], "-n", str(cpus), "-o", "/dev/null",
                         "--wrap", "exec sleep 3600")
        job = out.strip().split(";")[0]
        busy = "allocated" if cpus >= 2 else "mixed"
        self.wait(lambda: f"{job} RUNNING" in self.jobs() and self.state() == busy, f"job {job} to run ({busy})")
        return job

    def end_jobs(self) -> None:
        """Cancel every job and wait until the node has none (not `completing` any more)."""
        ids = [j.split()[0] for j in self.jobs()]
        if ids:
            self.check("scancel", "--quiet", *ids)
        self.wait(lambda: not self.jobs() and "completing" not in self.state(), "the jobs to end")

    def reset(self) -> None:
        """The node as a test expects it: no job, not drained, idle."""
        self.end_jobs()
        if self.state() != "idle":
            self.check("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
        self.wait(lambda: self.state() == "idle", f"{NODE} to be idle")

    def shims(self, bin_dir: Path) -> dict[str, str]:
        """`scontrol` and `sinfo` in bin_dir that reach this cluster: host vars for them."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(bin_dir, 0o755)
        out = {}
        for tool in ("scontrol", "sinfo"):
            p = bin_dir / tool
            p.write_text(f"#!/bin/sh\nSLURM_CONF={shlex.quote(str(self.conf))} exec {shlex.quote(slurm_bin(tool))} "
                         f"\"$@\"\n")
            os.chmod(p, 0o755)
            out[tool] = str(p)
        return out

    def logs(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.root / name
            if p.exists():
                tails.append(f"{name}: " + " | ".join(p.read_text(errors="replace").splitlines()[-8:]))
        return "; ".join(tails) or "no log written"

    def stop(self) -> None:
        try:
            if self.procs and all(p.poll() is None for p in self.procs):
                self.end_jobs()
        except (AssertionError, SlurmUnavailable, subprocess.TimeoutExpired, OSError):
            pass                # stopping anyway: the daemons go below
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _slurm_user() -> str:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    from support.sshd import TEST_USER, ensure_user

    return ensure_user(TEST_USER).pw_name


def _conf(root: Path, auth: str, user: str, ctld_port: int, slurmd_port: int) -> str:
    auth_lines = ("AuthType=auth/none\nCredType=cred/none\n" if auth == "none" else
                  f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={root / 'munge.sock'}\n")
    return f"""# eaglebot's test cluster (tests/support/slurm.py)
ClusterName=eagletest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={"root" if os.geteuid() == 0 else user}
{auth_lines}StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'slurmctld.log'}
SlurmdLogFile={root / 'slurmd.log'}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={NODE} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName={PARTITIONS[0]} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName={PARTITIONS[1]} Nodes={NODE} MaxTime=INFINITE State=UP
"""


def _start_munge(root: Path, user: str) -> subprocess.Popen:
    munged = slurm_bin("munged")
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    (root / "munge").mkdir()
    # Its own key, socket, pid and seed: the machine's munged (if any) and /etc/munge are not ours.
    proc = subprocess.Popen([munged, "--foreground", "--force", f"--key-file={key}", f"--socket={root / 'munge.sock'}",
                             f"--pid-file={root / 'munge' / 'munged.pid'}", f"--seed-file={root / 'munge' / 'seed'}",
                             f"--log-file={root / 'munged.log'}"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_DEADLINE_S
    while not (root / "munge.sock").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (root / "munged.log").read_text(errors="replace") if (root / "munged.log").exists() else ""
            raise SlurmUnavailable(f"munged did not start: {log.strip()[-400:] or 'no log'}")
        time.sleep(0.02)
    return proc


def start_slurm() -> SlurmCluster:
    """slurmctld and slurmd of a cluster of one node, `gpu-01`, idle; SlurmUnavailable otherwise."""
    ctld_bin, slurmd_bin = slurm_bin("slurmctld"), slurm_bin("slurmd")
    slurm_bin("sinfo")
    auth = os.environ.get("EAGLE_SLURM_AUTH") or ("none" if _has_auth_none() else "munge")
    user = _slurm_user()
    pw = pwd.getpwnam(user)
    last = ""
    for _ in range(5):             # a port another worker took between our pick and the bind: try others
        t0 = time.monotonic()
        root = Path(tempfile.mkdtemp(prefix="eagle-slurm-"))
        os.chmod(root, 0o755)
        for d in ("state", "spool"):
            (root / d).mkdir()
        os.chown(root / "state", pw.pw_uid, pw.pw_gid)     # slurmctld writes it as SlurmUser
        conf = root / "slurm.conf"
        port = _free_port()
        conf.write_text(_conf(root, auth, user, port, _free_port()))
        os.chmod(conf, 0o644)
        cluster = SlurmCluster(root, conf, auth, user, port)
        env = cluster.env
        try:
            if auth == "munge":
                cluster.procs.append(_start_munge(root, user))
            # -i: no state of an earlier cluster to recover (the folder is new); -D: our child.
            for argv in ([ctld_bin, "-D", "-i", "-f", str(conf)], [slurmd_bin, "-D", "-N", NODE, "-f", str(conf)]):
                cluster.procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL, start_new_session=True))
            # sinfo finding no controller yet waits a whole second before it tries again: ask once it listens.
            cluster.wait(lambda: _listening(port), "slurmctld to listen")
            cluster.wait(lambda: cluster.run("sinfo", "-N", "-h", "-n", NODE, "-o", "%T", timeout=30).stdout.strip()
                         == "idle\nidle", f"{NODE} to be idle in sinfo")
            cluster.started_s = time.monotonic() - t0
            return cluster
        except SlurmUnavailable as e:
            last = str(e)
            cluster.stop()
            if "Address already in use" not in last and "bind" not in last.lower():
                break
    raise SlurmUnavailable(f"could not start the test Slurm cluster: {last}")
