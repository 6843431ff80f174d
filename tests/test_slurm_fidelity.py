"""The SIMULATED scontrol/sinfo (src/eaglebot/sim/cluster.py) held to the REAL Slurm (tests/support/slurm.py): the
same sequence of commands, the skills' own (eaglebot.facts.host.cluster builds them), against both;
the same exit codes, the same stdout and the same refusals, and the same parse of every sinfo
line (state, reason, draining, responding) by the parser the skills use.

What the real one does that the comparison allows for, each documented in src/eaglebot/sim/cluster.py:
- right after `State=RESUME` Slurm marks the node not responding (`idle*`) until its next ping
  of slurmd (under a second here); the simulator never does. The `*` is compared after it goes.
- `sinfo -n NODE` alone may say `allocated` for a node partly allocated until the whole node list
  is asked for (22.05 refreshes a node's allocated CPUs only then); the real side asks for the
  whole list before each `sinfo -n`, as any other sinfo on the cluster would.
"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from support.gpu_helpers import PY
from support.slurm import NODE, PARTITIONS, SlurmCluster

from eaglebot.facts.host import cluster as fc
from eaglebot.sim import cluster as sim_cluster
from eaglebot.sim import install_sim_bin

XID = "eaglebot: Xid 79 (GPU has fallen off the bus)"
PERSON = "hands off: bad fan (ops)"


class Real:
    def __init__(self, slurm: SlurmCluster, bin_dir: Path):
        self.slurm, self.tools = slurm, slurm.shims(bin_dir)

    def run(self, cmd: str) -> tuple[int, str, str]:
        if cmd.startswith(self.tools["sinfo"]):
            self.slurm.state()                         # the whole list first (see the module's docstring)
        res = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=60)
        return res.returncode, res.stdout, res.stderr

    def job(self, on: bool) -> None:
        if on:
            self.slurm.start_job(cpus=1)
        else:
            self.slurm.end_jobs()

    def settle(self) -> None:
        self.slurm.wait(lambda: not self.slurm.state().endswith("*"), "the node to answer again")


class Sim:
    def __init__(self, root: Path):
        self.state = root / "state"
        self.tools = install_sim_bin(root / "bin", self.state, python=PY)
        sim_cluster.save({"slurm": {NODE: {"base": "idle", "drain": False, "reason": None,
                                           "partitions": list(PARTITIONS)}}}, self.state)

    def run(self, cmd: str) -> tuple[int, str, str]:
        res = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=60)
        return res.returncode, res.stdout, res.stderr

    def load(self) -> dict:
        return json.loads((self.state / sim_cluster.STATE_FILE).read_text())

    def job(self, on: bool) -> None:
        c = self.load()
        c["slurm"][NODE]["base"] = "mixed" if on else "idle"
        sim_cluster.save(c, self.state)

    def settle(self) -> None:
        pass


def _steps(t: dict[str, str]) -> list[tuple[str, str | bool]]:
    """(what, arg): `cmd` a command line, `job` a job of 1 CPU starting (True) or ending, `settle`."""
    sinfo = fc.sinfo_command(NODE, t["sinfo"])

    def drain(reason: str, node: str = NODE) -> str:
        return fc.scontrol_drain(node, reason, t["scontrol"])
    resume = fc.scontrol_resume(NODE, t["scontrol"])
    no_reason = shlex.join([t["scontrol"], "update", f"NodeName={NODE}", "State=DRAIN"])
    down = shlex.join([t["scontrol"], "update", f"NodeName={NODE}", "State=DOWN", "Reason=hw fault"])
    return [("cmd", sinfo),                                            # idle
            ("cmd", resume),                                           # refused: not drained
            ("cmd", no_reason),                                        # refused: no reason
            ("cmd", drain("x", "gpu-99")), ("cmd", fc.sinfo_command("gpu-99", t["sinfo"])),   # no such node
            ("cmd", drain(XID)), ("cmd", sinfo),                       # idle + drain: drained
            ("cmd", drain(PERSON)), ("cmd", sinfo),                    # a person's reason replaces ours
            ("cmd", resume), ("settle", True), ("cmd", sinfo),         # idle again, no reason
            ("job", True), ("cmd", sinfo),                             # mixed
            ("cmd", drain(XID)), ("cmd", sinfo),                       # busy + drain: draining
            ("cmd", resume), ("settle", True), ("cmd", sinfo),         # mixed again
            ("cmd", drain(XID)), ("job", False), ("cmd", sinfo),       # the job ends: drained
            ("cmd", resume), ("settle", True), ("cmd", sinfo),         # idle
            ("cmd", no_reason.replace("State=DRAIN", "State=DOWN")),   # refused: no reason
            ("cmd", down), ("cmd", sinfo),                             # down, with its reason
            ("cmd", drain(XID)), ("cmd", sinfo),                       # down + drain: drained (no job)
            ("cmd", resume), ("settle", True), ("cmd", sinfo)]         # a resume brings a down node back


def _play(backend) -> list[tuple[str, tuple]]:
    out = []
    for what, arg in _steps(backend.tools):
        if what == "job":
            backend.job(bool(arg))
        elif what == "settle":
            backend.settle()
        else:
            rc, stdout, stderr = backend.run(str(arg))
            tool = Path(shlex.split(str(arg))[0]).name
            parsed = fc.parse_sinfo(stdout, NODE) if tool == "sinfo" else None
            view = (parsed.state, parsed.reason, parsed.draining, parsed.responding) if parsed else None
            # `str(arg)` names each side's own tool path: the step is named by the tool and its arguments.
            out.append((f"{tool} {shlex.join(shlex.split(str(arg))[1:])}",
                        (rc, stdout, stderr.strip().splitlines()[-1:], view)))
    return out


def test_the_simulated_slurm_answers_as_the_real_one(slurm, tmp_path):
    real = _play(Real(slurm, tmp_path / "real-bin"))
    sim = _play(Sim(tmp_path / "sim"))
    assert [step for step, _ in real] == [step for step, _ in sim]
    diffs = [(step, r, s) for (step, r), (_, s) in zip(real, sim) if r != s]
    assert diffs == [], "\n".join(f"{step}\n  real: {r}\n  sim:  {s}" for step, r, s in diffs)
    states = [v[3][0] for _, v in real if v[3]]
    assert {"idle", "drained", "draining", "mixed", "down"} <= set(states)    # every state the skills tell apart was seen
    refusals = [v[2] for _, v in real if v[0] != 0]
    assert refusals == [["slurm_update error: Invalid node state specified"],
                        ["You must specify a reason when DOWNING or DRAINING a node. Request denied"],
                        ["slurm_update error: Invalid node name specified"],
                        ["You must specify a reason when DOWNING or DRAINING a node. Request denied"]]


def test_a_user_who_is_not_a_slurm_operator_is_refused_by_both(slurm):
    """Slurm refuses an update from a user who is neither root nor SlurmUser (the bot's SSH user
    must be an operator); so does the simulator, for a user not in its state's `operators`."""
    try:
        other = pwd.getpwnam("nobody").pw_name
    except KeyError:
        pytest.fail("the user `nobody` is missing; this test drains as a user who is not a Slurm operator")
    root = Path(f"/tmp/eagle-slurm-fidelity-{os.getpid()}-{os.urandom(4).hex()}")     # `nobody` reads it
    root.mkdir(mode=0o755)
    try:
        sim = Sim(root)
        c = sim.load()
        c["slurm_operators"] = [slurm.slurm_user]
        sim_cluster.save(c, sim.state)
        os.chmod(sim.state, 0o777)
        argv = ["update", f"NodeName={NODE}", "State=DRAIN", "Reason=x"]
        real = slurm.run("scontrol", *argv, user=other)
        simulated = subprocess.run(["runuser", "-u", other, "--", sim.tools["scontrol"], *argv],
                                   capture_output=True, text=True, timeout=60)
        assert (real.returncode, real.stderr.strip()) == (1, "slurm_update error: Invalid user id")
        assert (simulated.returncode, simulated.stderr.strip()) == (real.returncode, real.stderr.strip())
        assert slurm.state() == "idle" and sim.load()["slurm"][NODE]["drain"] is False
    finally:
        shutil.rmtree(root, ignore_errors=True)


CAPTURE = Path(__file__).parent / "fixtures" / "cluster" / "sinfo-N-h-n-NTE-slurm-22.05.txt"


def test_the_skills_parser_reads_a_capture_of_the_real_slurm():
    """Each step of the capture (tests/fixtures/cluster/, made on the cluster of tests/support/slurm.py)
    as node.drain and node.resume read it: state, reason, draining, responding."""
    blocks = CAPTURE.read_text().split("# after: ")[1:]
    read = [(b.split("\n", 1)[0], fc.parse_sinfo(b.split("\n", 1)[1], NODE)) for b in blocks]
    assert [(n.state, n.reason, n.draining, n.responding) for _, n in read] == [
        ("idle", None, False, True), ("mixed", None, False, True),
        ("draining", XID, True, True), ("drained", XID, True, True),
        ("idle", None, False, False), ("idle", None, False, True), ("allocated", None, False, True),
        ("down", "hw fault", False, True), ("drained", "RMA ticket 4471", True, True), ("idle", None, False, True)]
    assert all(len(b.strip().splitlines()) == 3 for b in blocks)   # the step, then one line per partition
