"""Per-step engine overhead (a channel per command) vs asyncssh's own conn.run, vs a raw
long-lived shell (and ansible-playbook if present).

A playbook of 20 `shell` steps running `true` over loopback OpenSSH (a real sshd started
here, as in the tests), audit writes included. The raw shell is the floor of any protocol:
one sh on one channel, `/bin/true` then `echo` of a sentinel, no engine, no audit. (The
retired `shell: persistent` mode and its numbers: docs/benchmarks.md.)
Run as root (it creates a test user):

    .venv/bin/python tests/bench/bench_engine.py [--rounds 5] [--steps 20]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncssh  # noqa: E402
import yaml  # noqa: E402

from support.sshd import start_sshd  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.playbook import parse_playbook  # noqa: E402
from eaglebot.engine.runner import RunRequest  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402


async def bench_asyncssh(server, n: int) -> float:
    async with asyncssh.connect("127.0.0.1", port=server.port, username=server.user,
                                client_keys=[str(server.client_key)], known_hosts=str(server.known_hosts)) as conn:
        await conn.run("true", check=True)  # warm
        t0 = time.perf_counter()
        for _ in range(n):
            await conn.run("true", check=True)
        return (time.perf_counter() - t0) / n


async def bench_raw_shell(server, n: int) -> float:
    async with asyncssh.connect("127.0.0.1", port=server.port, username=server.user,
                                client_keys=[str(server.client_key)], known_hosts=str(server.known_hosts)) as conn:
        proc = await conn.create_process("exec /bin/sh", encoding=None)

        async def one() -> None:
            proc.stdin.write(b"/bin/true; echo \"__END $?\"\n")
            await proc.stdout.readuntil(b"__END ")
            await proc.stdout.readline()

        await one()
        t0 = time.perf_counter()
        for _ in range(n):
            await one()
        took = (time.perf_counter() - t0) / n
        proc.close()
        return took


async def bench_engine(server, work: Path, n: int) -> float:
    cfg = work / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / "eagle.db"),
                                   "hosts": {"box": server.host_config()}}))
    svc = await Services.open(load_settings(cfg))
    steps = "\n".join(f"  - {{name: s{i}, skill: shell, with: {{command: 'true'}}}}" for i in range(n))
    book = parse_playbook(f"name: twenty\nsteps:\n{steps}\n", "bench")
    try:
        await svc.engine.run(RunRequest(playbook=book, hosts=["box"]))  # warm: connect once
        t0 = time.perf_counter()
        out = await svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
        took = time.perf_counter() - t0
        assert out.status == "succeeded", out.error
        return took / n
    finally:
        await svc.close()


def ansible_playbook_s(server, work: Path, hosts: list[str], commands: list[str], *, warm: bool = False,
                       forks: int | None = None) -> float | None:
    """Seconds one ansible-playbook run of `commands` on `hosts` (all on the loopback sshd)
    takes, with pipelining and ControlPersist; None when Ansible is not installed."""
    exe = shutil.which("ansible-playbook")
    if not exe:
        return None
    inv = work / "inv.ini"
    inv.write_text("".join(f"{h} ansible_host=127.0.0.1 ansible_port={server.port} ansible_user={server.user} "
                           f"ansible_ssh_private_key_file={server.client_key} ansible_python_interpreter=/usr/bin/python3\n"
                           for h in hosts))
    play = work / "play.yaml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"name": f"t{i}", "command": c} for i, c in enumerate(commands)]}]))
    env = dict(os.environ, ANSIBLE_PIPELINING="1", ANSIBLE_HOST_KEY_CHECKING="True",
               ANSIBLE_SSH_ARGS=f"-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile={server.known_hosts}")
    if forks:
        env["ANSIBLE_FORKS"] = str(forks)
    argv = [exe, "-i", str(inv), str(play)]
    if warm:
        subprocess.run(argv, env=env, check=True, capture_output=True)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eagle-bench-"))
    os.chmod(work, 0o755)  # sshd reads authorized_keys as the test user
    server = start_sshd(work / "sshd")
    try:
        raw, shell, ex = [], [], []
        for _ in range(args.rounds):
            raw.append(await bench_asyncssh(server, args.steps))
            shell.append(await bench_raw_shell(server, args.steps))
            ex.append(await bench_engine(server, work, args.steps))
            (work / "eagle.db").unlink(missing_ok=True)
        ans = ansible_playbook_s(server, work, ["box"], ["true"] * args.steps, warm=True)
        ans = ans / args.steps if ans is not None else None
        r = statistics.median(raw)

        def spread(xs: list[float]) -> str:
            return f"[{min(xs) * 1000:.2f}-{max(xs) * 1000:.2f}]"

        print(f"{args.steps} steps of `true` over loopback OpenSSH, median of {args.rounds} rounds [min-max]:")
        print(f"  asyncssh conn.run, one connection : {r * 1000:7.2f} ms per command {spread(raw)}")
        sh = statistics.median(shell)
        print(f"  raw long-lived sh, /bin/true      : {sh * 1000:7.2f} ms per command {spread(shell)}  ({sh / r:.2f}x asyncssh)")
        x = statistics.median(ex)
        print(f"  engine, a channel per command     : {x * 1000:7.2f} ms per step {spread(ex)}  ({x / r:.2f}x asyncssh)")
        if ans is not None:
            print(f"  ansible-playbook (pipelining+CP) : {ans * 1000:7.2f} ms per task  ({ans / r:.1f}x asyncssh)")
        else:
            print("  ansible-playbook                  : not installed (pip install ansible-core to compare)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
