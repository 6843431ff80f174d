"""The first-node walkthrough, run as written (issue 47, "Done when").

docs/first-node.md is read the way a person reads it: its `eagle.yaml` block is written into an
empty folder, and every `$ ...` line of its `console` blocks is typed, in order, into the real
`eagle` CLI under a pseudo-terminal (a reader's terminal: the host-key question is answered
by the `y` the page shows after `[y/N]`). The node is a fresh one: a real OpenSSH sshd on
127.0.0.1, a new non-root login user with a real home, 8 SIMULATED H200s and the SIMULATED SGLang
0.5.23 (src/eaglebot/sim) installed in that home, and the default state_dir and config (no `state_dir`, no
`known_hosts`, no test-friendly env: the bot's side has its own `$HOME` with `~/.ssh/id_ed25519`).

Only what a real reader must change is substituted (the host's address and port, the login user);
the page says so. What each command printed is compared with the output the page quotes after it,
line for line, after `normalise` (the page documents the same rules): a `...` line of the page
stands for any number of lines. The README's quick start must be the same walkthrough: its
`eagle.yaml` is the page's and each of its commands is one the page runs.

To refresh the page's quotes after a change of wording, `EAGLE_FIRST_NODE_DUMP=FILE` writes what
each command printed (the reader's values in, nothing else replaced) to FILE.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import pwd
import re
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from support.helpers import wait_for
from support.sshd import start_sshd
from test_shipped_playbooks import _ensure_home_user, _kill_user_processes
from test_sglang_sim import write_models

from eaglebot.sim import gpu_state, install_sim_bin

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first-node.md"
README = ROOT / "README.md"

# What the page shows, for what the test's node really is (a real reader's own values).
READER = {"address": "10.0.0.7", "port": "22", "user": "ops", "node_home": "/home/ops", "home": "/home/you"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Values that differ from run to run, in the page and in the output alike (the page lists them).
VOLATILE = [
    (re.compile(r"SHA256:[A-Za-z0-9+/=]{20,}"), "SHA256:<fingerprint>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?Z?"), "<time>"),
    (re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])"), "<n.n>"),   # durations, throughputs, ratios (not 3.11.2)
    (re.compile(r"\b\d{3,}\b"), "<nnn>"),                # pids, ports, tok/s, latencies
]


@dataclass
class Step:
    command: str
    status: int = 0            # `$ eagle doctor  # exits 1: ...` on the page
    expected: list[str] = field(default_factory=list)
    where: str = ""


def fenced(text: str, lang: str) -> list[tuple[int, str]]:
    """(line number, body) of every ```lang block."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)]


def steps(text: str) -> list[Step]:
    """The `$ command` lines of the console blocks, each with the lines quoted after it."""
    out: list[Step] = []
    for first, body in fenced(text, "console"):
        for n, line in enumerate(body.splitlines()):
            if line.startswith("$ "):
                command, _, comment = line[2:].partition("  # ")
                status = re.match(r"exits? (\d+)", comment.strip())
                out.append(Step(command.strip(), int(status.group(1)) if status else 0, where=f"{PAGE.name}:{first + n}"))
            elif out:
                out[-1].expected.append(line)
    return out


def quick_start(readme: str) -> tuple[str, list[str]]:
    """The README quick start's eagle.yaml and its `eagle ...` command lines (comments cut)."""
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [(_, yaml_text)] = fenced(section, "yaml")
    cmds = [re.split(r"\s{2,}#", line)[0].strip()
            for _, body in fenced(section, "bash") for line in body.splitlines() if line.startswith("eagle ")]
    return yaml_text, cmds


def normalise(lines: list[str], real: dict[str, str], volatile: bool = True) -> list[str]:
    """The page's rules: escape sequences and \\r dropped; the test's own values (`real`) read as the
    reader's (READER); then VOLATILE values replaced by their placeholders; trailing blanks cut, runs
    of spaces and of dashes read as two (a table's column widths follow its values)."""
    out = []
    for line in lines:
        line = _ANSI.sub("", line).replace("\r", "")
        line = line.replace(f":{real['port']}", f":{READER['port']}")
        for key in ("home", "node_home", "address", "user"):   # (a home before the user its path names)
            line = line.replace(real[key], READER[key])
        for pattern, placeholder in VOLATILE if volatile else []:
            line = pattern.sub(placeholder, line)
        out.append(re.sub(r"-{2,}", "--", re.sub(r" {2,}", "  ", line.rstrip())))   # (a wider column moves the rest)
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """Does `got` read as `expected`, where a `...` line of `expected` is any number of lines, and a
    line that ends in ` ...` is any line that starts with what comes before (a table cell cut at a
    width that a number before it moves)?"""
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[i:]) for i in range(len(got) + 1))
    head = expected[0][:-4] if expected[0].endswith(" ...") else None
    same = bool(got) and (got[0] == expected[0] or (head is not None and got[0].startswith(head)))
    return same and matches(expected[1:], got[1:])


def in_a_terminal(argv: list[str], cwd: Path, env: dict[str, str], answer: str | None) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal (120 columns) as its stdin, stdout and stderr, as a
    reader's shell would; `answer` is typed in (the terminal echoes it, as it shows in the page)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    while True:
        if not select.select([master], [], [], max(0.0, deadline - time.monotonic()))[0]:
            os.killpg(proc.pid, signal.SIGKILL)   # (its own session: the command and what it started)
            raise AssertionError(f"`{shlex.join(argv)}` did not finish within 300 s:\n{b''.join(chunks).decode()}")
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
        if answer is not None and b"".join(chunks).endswith(b"[y/N] "):   # typed once asked, as a person does
            os.write(master, answer.encode() + b"\n")
            answer = None
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode(errors="replace")


@contextlib.contextmanager
def fresh_node(root: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh node (its login user, sshd, 8 simulated H200s, SGLang in the user's home) and the
    reader's side under `root`: a `$HOME` with the SSH key the quick start names, and an empty
    folder `~/eagle`. Yields that home and the test's own values of READER's keys."""
    pw = _ensure_home_user(f"eaglefirst{os.getpid()}")
    sshd = start_sshd(Path("/tmp") / f"eagle-first-sshd-{os.getpid()}", user=pw.pw_name)
    try:
        node_home = Path(pw.pw_dir)
        for p in node_home.iterdir():   # (a home left by an earlier session of the same pid)
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        tools = install_sim_bin(node_home / "sglang" / "bin", node_home / ".sim-gpu")
        gpu_state.init_state(node_home / ".sim-gpu", 8)
        for tool in ("nvidia-smi", "dmesg"):   # on the login PATH, as the driver's tools are
            os.symlink(tools[tool.replace("-", "_")], sshd.bin_dir / tool)
        target, draft = write_models(node_home / "models")
        draft.rename(node_home / "models" / "eagle3")
        for dirpath, dirnames, filenames in os.walk(node_home):
            for n in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
                os.lchown(n, pw.pw_uid, pw.pw_gid)
        home = root / "you"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        shutil.copy(sshd.client_key, home / ".ssh" / "id_ed25519")
        os.chmod(home / ".ssh" / "id_ed25519", 0o600)
        (home / "eagle").mkdir()
        # `localhost`, not 127.0.0.1: the page's address then stands for the node alone (the server's
        # own `--host 127.0.0.1` is the same on every node).
        yield home, {"address": "localhost", "port": str(sshd.port), "user": pw.pw_name,
                     "node_home": str(node_home), "home": str(home)}
    finally:
        sshd.stop()
        _kill_user_processes(pw.pw_uid)
        # userdel refuses a user with a live process: wait until the kills have taken
        wait_for(lambda: not _processes_of(pw.pw_uid), 30, 0.05, f"{pw.pw_name}'s processes to end")
        def deleted() -> bool:   # (another worker's useradd may hold /etc/passwd's lock a moment)
            subprocess.run(["userdel", "--remove", pw.pw_name], capture_output=True)
            return pw.pw_name not in {p.pw_name for p in pwd.getpwall()}
        wait_for(deleted, 30, 0.1, f"userdel {pw.pw_name}")
        shutil.rmtree(sshd.root, ignore_errors=True)


def _processes_of(uid: int) -> list[str]:
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and os.stat(f"/proc/{d}").st_uid == uid:
                out.append(d)
        except OSError:
            continue
    return out


def write_config(home: Path, real: dict[str, str]) -> Path:
    """The page's eagle.yaml in `~/eagle`, with the node's address, port and user for the reader's."""
    [(_, config), *_] = fenced(PAGE.read_text(), "yaml")
    assert f"address: {READER['address']}" in config and f"user: {READER['user']}" in config
    config = config.replace(f"address: {READER['address']}", f"address: {real['address']}\n    port: {real['port']}")
    path = home / "eagle" / "eagle.yaml"
    path.write_text(config.replace(f"user: {READER['user']}", f"user: {real['user']}"))
    return path


@pytest.fixture
def first_node(tmp_path):
    with fresh_node(tmp_path) as node:
        yield node


def test_the_readme_quick_start_is_the_page_s_walkthrough():
    page = PAGE.read_text()
    readme_yaml, readme_cmds = quick_start(README.read_text())
    [(_, page_yaml), *_] = fenced(page, "yaml")
    assert readme_yaml == page_yaml, "README.md's quick-start eagle.yaml differs from docs/first-node.md's"
    ran = {s.command for s in steps(page)}
    assert readme_cmds and all(c in ran for c in readme_cmds if c != "eagle serve"), \
        f"README quick-start commands the page does not run: {[c for c in readme_cmds if c not in ran]}"


@pytest.mark.e2e  # a fresh node over a real sshd, every command of the page
def test_the_first_node_walkthrough_runs_as_written(first_node):
    home, real = first_node
    page = PAGE.read_text()
    write_config(home, real)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EAGLE_", "PYTEST", "PYTHONDONTWRITE"))}
    env.update(HOME=str(home), USER="you", LOGNAME="you", TERM="xterm", COLUMNS="120",
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}")
    walked = steps(page)
    assert [s.command for s in walked][:2] == ["eagle doctor", "eagle hosts pin gpu-01"], walked
    dump = os.environ.get("EAGLE_FIRST_NODE_DUMP")   # a file: what ran, to quote in the page
    wrong = []   # every command runs (the next ones need the earlier ones' effect), then all that differ
    for step in walked:
        words = shlex.split(step.command)
        assert words[0] == "eagle", f"{step.where}: the page runs only `eagle` commands: {step.command}"
        asked = [line for line in step.expected if line.endswith("[y/N] y")]
        rc, out = in_a_terminal([sys.executable, "-m", "eaglebot", *words[1:]], home / "eagle", env,
                                "y" if asked else None)
        got, want = normalise(out.split("\n"), real), normalise(step.expected, real)
        if dump:
            with open(dump, "a") as f:
                f.write(f"$ {step.command}\n" + "\n".join(normalise(out.split("\n"), real, volatile=False)) + "\n")
        if rc != step.status or not matches(want, got):
            wrong.append(f"{step.where}: `{step.command}`: exit {rc} (the page: {step.status})\n--- the page\n"
                         + "\n".join(want) + "\n--- what ran\n" + "\n".join(got))
    assert not wrong, "\n\n".join(wrong)
