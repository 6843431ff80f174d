"""A step's whole output: byte for byte in a gzip file next to the audit DB (NUL, invalid
UTF-8, a last line without a newline), its SHA-256 in the step's row, a head and a tail in
the DB with a marker line, `eagle show ID --output` giving it back, redaction before any
byte is written, and `eagle prune` deleting the files; through the real CLI, over the real
sshd in both shell modes."""
from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest


from support.helpers import eagle, write_yaml
from support.inproc import eagle_here

from eaglebot.engine.output import OutputBuffer
from eaglebot.engine.redact import Redactor
from eaglebot.sdk import StreamCallback
from eaglebot.transport.base import LINE_MAX, SINK_HEAD, SINK_TAIL, LineSplitter

TOKEN = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1"
# NUL, an invalid UTF-8 byte, a secret, and a last line without a newline.
COMMAND = rf"printf 'a\000b\377c\ntoken={TOKEN}\nlast'"
WANT = b"a\x00b\xffc\ntoken=***\nlast"


def eagle_bytes(*args: str, config: Path) -> subprocess.CompletedProcess[bytes]:
    """The real CLI with stdout as bytes (`--output` writes raw bytes)."""
    e = dict(os.environ)
    e.pop("EAGLE_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "eaglebot", *args, "--config", str(config)],
                          capture_output=True, timeout=120, env=e, stdin=subprocess.DEVNULL)


def setup(tmp: Path, command: str, hosts: dict | None = None, **extra) -> Path:
    (tmp / "playbooks").mkdir(exist_ok=True)
    write_yaml(tmp / "playbooks" / "out.yaml", {
        "name": "out", "description": "prints what it is told",
        "steps": [{"name": "print", "skill": "shell", "with": {"command": command}}]})
    return write_yaml(tmp / "eagle.yaml", {"audit_db": str(tmp / "eagle.db"), "playbooks_dir": "playbooks",
                              "hosts": hosts or {}, **extra})


def step_row(tmp: Path, run_id: int = 1) -> dict:
    conn = sqlite3.connect(tmp / "eagle.db")
    conn.row_factory = sqlite3.Row
    try:
        return dict(conn.execute("select * from steps where run_id = ? order by id limit 1", [run_id]).fetchone())
    finally:
        conn.close()


@pytest.fixture(params=["local", "ssh"])
def where(request, sshd) -> dict:
    if request.param == "local":
        return {"local": {"transport": "local"}}
    return {"box": sshd.host_config()}


def test_show_output_gives_back_nul_invalid_utf8_and_a_last_line_without_newline(tmp_path, where):
    host = next(iter(where))
    cfg = setup(tmp_path, COMMAND, where)
    res = eagle("run", "out", "-H", host, config=cfg)
    assert res.returncode == 0, res.stderr
    shown = eagle_bytes("show", "1", "--output", config=cfg)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == WANT
    assert b"== step 1 of run #1" in shown.stderr and f"{len(WANT)} bytes".encode() in shown.stderr
    row = step_row(tmp_path)
    assert row["output_sha256"] == hashlib.sha256(WANT).hexdigest()
    assert row["output_bytes"] == len(WANT)
    # The DB shows the bytes escaped and never stops at the NUL; the secret is masked.
    assert row["output"] == "a\\x00b\\xffc\ntoken=***\nlast"
    assert TOKEN not in row["data"] and "\\x00" in row["data"]
    path = Path(row["output_file"])
    assert path.is_absolute() and path.is_relative_to(tmp_path / "eagle-output")  # next to the DB
    assert gzip.decompress(path.read_bytes()) == WANT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for d in (path.parent, path.parents[1], path.parents[2]):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_db_keeps_a_head_and_a_tail_with_a_marker_and_the_file_keeps_everything(tmp_path):
    cfg = setup(tmp_path, "seq 1 100000", output_keep_bytes=8192)
    assert eagle_here("run", "out", config=cfg).returncode == 0
    want = "".join(f"{i}\n" for i in range(1, 100001)).encode()
    row = step_row(tmp_path)
    out = row["output"]
    assert out.startswith("1\n2\n3\n") and out.endswith("99999\n100000\n")
    head, marker, tail = out.split("\n[... ", 1)[0] + "\n", *out.split("\n[... ", 1)[1].split("\n", 1)
    assert marker.endswith("bytes not kept here; whole output: eagle show 1 --output ...]")
    left_out = int(marker.split()[0])
    assert len(head) + left_out + len(tail) == len(want)  # the count is exact
    assert len(head) <= 4096 and len(tail) <= 4096
    assert row["output_bytes"] == len(want) and row["output_sha256"] == hashlib.sha256(want).hexdigest()
    stdout = json.loads(row["data"])["stdout"]  # registered: the last 64 KiB, whole lines, and a note
    assert stdout.startswith("[... earlier output cut; whole output: eagle show 1 --output]\n")
    assert len(stdout) < 64 * 1024 + 100 and stdout.endswith("\n100000\n")
    assert stdout.split("\n")[1] == str(int(stdout.split("\n")[2]) - 1)  # starts at a whole line
    assert eagle_bytes("show", "1", "--output", config=cfg).stdout == want


def test_show_output_refuses_a_changed_or_missing_file_in_one_sentence(tmp_path):
    cfg = setup(tmp_path, "echo hello")
    assert eagle("run", "out", config=cfg).returncode == 0
    path = Path(step_row(tmp_path)["output_file"])
    path.write_bytes(gzip.compress(b"hellO\n"))
    res = eagle("show", "1", "--output", config=cfg)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("eagle: step 1 of run #1 (local: print): its output file")
    assert "does not match the SHA-256 in the audit DB" in res.stderr and res.stdout == ""
    path.unlink()
    res = eagle("show", "1", "--output", config=cfg)
    assert res.returncode == 1 and "is missing" in res.stderr and "Traceback" not in res.stderr
    assert eagle("show", "1", "--output", "--json", config=cfg).returncode == 2


def test_prune_deletes_the_output_files_of_pruned_runs(tmp_path):
    cfg = setup(tmp_path, "echo pruned")
    assert eagle_here("run", "out", config=cfg).returncode == 0
    path = Path(step_row(tmp_path)["output_file"])
    assert path.exists()
    res = eagle_here("prune", "--older-than", "0d", "--yes", config=cfg)
    assert res.returncode == 0 and "pruned 1 runs" in res.stdout, res.stdout + res.stderr
    assert not path.exists() and not path.parent.exists()


# -- the pieces ----------------------------------------------------------------


def test_line_splitter_hands_on_at_most_64_kib_and_keeps_a_bounded_head_and_tail():
    pieces: list[str] = []
    sink: list[str] = []
    sp = LineSplitter("stdout", StreamCallback(lambda _s, p: pieces.append(p)), sink)
    blob = "x" * (3 * LINE_MAX + 5)  # no newline at all
    sp.feed(blob[:1000])
    sp.feed(blob[1000:])
    for _ in range(5 * (SINK_HEAD + SINK_TAIL) // 1_000_000):
        sp.feed("y" * 999_999 + "\n")
    sp.feed("tail without newline")
    sp.close()
    assert max(len(p) for p in pieces) <= LINE_MAX
    assert "".join(pieces).startswith(blob) and pieces[-1] == "tail without newline"
    total = sum(len(p) for p in pieces)
    kept = "".join(sink)
    assert len(kept) <= SINK_HEAD + SINK_TAIL + LINE_MAX
    assert kept.startswith(blob) and kept.endswith("y\ntail without newline")
    assert len(kept) + sp.cut_bytes == total


def test_plain_callbacks_still_get_lines_without_their_newline():
    lines: list[tuple[str, str]] = []
    sp = LineSplitter("stderr", lambda s, line: lines.append((s, line)), [])
    sp.feed("one\ntw")
    sp.feed("o\nthree")
    sp.close()
    assert lines == [("stderr", "one"), ("stderr", "two"), ("stderr", "three")]


async def test_periodic_flush_shows_head_and_tail_of_a_running_step(tmp_path):
    written: list[str] = []

    async def write(text: str) -> None:
        written.append(text)

    buf = OutputBuffer(Redactor(), write, lambda line: None, keep_bytes=4096,
                       path=tmp_path / "output" / "db" / "7" / "1.gz", run_id=7)
    for i in range(2000):
        buf.line(f"line {i}")
    await buf.flush()
    assert written[-1].startswith("line 0\n") and written[-1].endswith("line 1999\n")
    assert "bytes not kept here; whole output: eagle show 7 --output ...]" in written[-1]
    n = len(written)
    await buf.flush()
    assert len(written) == n  # nothing new: no write
    buf.text("no newline")
    await buf.close()
    assert written[-1].endswith("line 1999\nno newline")
    want = "".join(f"line {i}\n" for i in range(2000)).encode() + b"no newline"
    assert gzip.decompress((tmp_path / "output" / "db" / "7" / "1.gz").read_bytes()) == want
    assert buf.sha256 == hashlib.sha256(want).hexdigest() and buf.nbytes == len(want)


async def test_a_step_that_prints_nothing_writes_no_file(tmp_path):
    async def write(text: str) -> None:
        pass

    buf = OutputBuffer(Redactor(), write, lambda line: None, path=tmp_path / "o" / "d" / "1" / "1.gz")
    buf.start()
    await asyncio.sleep(0)
    await buf.close()
    assert buf.file is None and buf.nbytes == 0 and not (tmp_path / "o").exists()


def test_migration_v8_adds_the_output_columns_to_a_v6_database(tmp_path):
    from eaglebot.store import Store
    from eaglebot.store.db import SCHEMA_VERSION

    s = Store(tmp_path / "a.db")
    for (name,) in s.db.execute("select name from sqlite_master where type = 'trigger' and tbl_name = 'steps'"):
        s.db.execute(f"drop trigger [{name}]")  # a v6 DB's triggers knew none of the three
    for col in ("output_bytes", "output_sha256", "output_file"):
        s.db.execute(f"alter table steps drop column {col}")
    s.db.execute("PRAGMA user_version = 6")
    s.close()
    s = Store(tmp_path / "a.db")
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 8
    assert {"output_bytes", "output_sha256", "output_file"} <= set(s.db.table("steps").columns_dict)
    s.close()


def test_terminal_shows_nul_and_invalid_bytes_escaped(tmp_path):
    cfg = setup(tmp_path, r"printf 'a\000b\377c\n'; printf 'bad\000\376' >&2; exit 3")
    res = eagle_bytes("run", "out", "-v", config=cfg)
    assert res.returncode == 1
    assert b"\x00" not in res.stderr and b"\xff" not in res.stderr and b"\xfe" not in res.stderr
    assert b"a\\x00b\\xffc" in res.stderr and b"exit status 3: bad\\x00\\xfe" in res.stderr
    shown = eagle_bytes("show", "1", config=cfg)
    assert b"\x00" not in shown.stdout and b"bad\\x00\\xfe" in shown.stdout


async def test_live_views_and_slack_get_escaped_text_never_a_raw_nul(services):
    from eaglebot.engine.runner import Observer, RunRequest
    from support.gpu_helpers import playbook

    seen: list[str] = []

    class Capture(Observer):
        def step_output(self, run_id, rec, line):
            seen.append(line)

        async def step_finished(self, run_id, rec, result):
            seen.extend([rec.summary, rec.output_tail, result.output])

    svc = await services()
    book = playbook('{"name": "nul", "steps": [{"skill": "shell", "with": '
                    r'{"command": "printf \"x\\000y\\377\\n\"; exit 4"}}]}')
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["local"]), Capture())
    assert out.status == "failed"
    text = "\n".join(seen)
    assert "x\\x00y\\xff" in text
    assert "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    row = (await svc.store.call(lambda s: s.steps(out.run_id)))[0]
    assert row["output"] == "x\\x00y\\xff\n"


def test_an_unwritable_output_folder_warns_and_the_db_still_keeps_the_output(tmp_path):
    (tmp_path / "blocker").write_text("a file where the output folder should be")
    cfg = setup(tmp_path, "echo kept", output_dir=str(tmp_path / "blocker" / "out"))
    res = eagle_here("run", "out", config=cfg)
    assert res.returncode == 0, res.stderr
    assert "its whole output could not be saved" in res.stderr
    row = step_row(tmp_path)
    assert row["output"] == "kept\n" and row["output_file"] is None and row["output_bytes"] == 5
    shown = eagle_bytes("show", "1", "--output", config=cfg)
    assert shown.returncode == 0 and shown.stdout == b"kept\n"
    assert b"its output file could not be written" in shown.stderr


async def test_binary_output_stays_within_the_kept_bytes_once_escaped(tmp_path):
    written: list[str] = []

    async def write(text: str) -> None:
        written.append(text)

    buf = OutputBuffer(Redactor(), write, lambda line: None, keep_bytes=4096)
    blob = bytes(range(256)) * 64  # NULs and invalid UTF-8: 4 characters each when escaped
    for i in range(0, len(blob), 1000):
        buf.text(blob[i:i + 1000].decode("utf-8", "surrogateescape"))
    await buf.flush()
    text = written[-1]
    assert len(text.encode()) <= 4096 + 100 and "\x00" not in text
    marker = text[text.index("[... "):].split("\n", 1)[0]
    assert 0 < int(marker.split()[1]) < len(blob) and buf.nbytes == len(blob)
