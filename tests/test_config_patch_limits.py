"""config.patch on hostile files: only regular files, a size cap, a read-only file needs
`force`, mode and owner kept, the formatting style kept, and a capped diff in the store."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eaglebot.engine.playbook import parse_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.skills import config_patch
from support.gpu_helpers import playbook


async def run1(svc, with_: dict):
    book = playbook(json.dumps({"name": "one", "steps": [{"skill": "config.patch", "with": with_}]}))
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["h"]))
    return out, out.steps[0]


@pytest.fixture
async def local(services):
    return await services({"h": {"transport": "local"}})


async def test_a_character_device_is_refused_without_reading_it(local):
    out, st = await run1(local, {"path": "/dev/zero", "set": {"a": 1}})
    assert st.status == "failed"
    assert st.summary == "/dev/zero on h is a character special file, not a regular file"


async def test_a_fifo_is_refused_and_the_host_lock_is_freed(local, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    out, st = await run1(local, {"path": str(fifo), "set": {"a": 1}})
    assert st.status == "failed" and "is a fifo, not a regular file" in st.summary
    assert await local.store.call(lambda s: s.locks()) == []


async def test_a_file_over_the_size_cap_is_refused(local, tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"a": "x" * 5000}))
    monkeypatch.setattr(config_patch, "MAX_BYTES", 4096)
    out, st = await run1(local, {"path": str(big), "set": {"a": 1}})
    assert st.status == "failed" and "config.patch reads at most" in st.summary
    assert json.loads(big.read_text())["a"] == "x" * 5000


async def test_a_read_only_file_needs_force_and_keeps_its_mode(local, tmp_path):
    f = tmp_path / "ro.json"
    f.write_text('{"a": 1}\n')
    f.chmod(0o444)
    out, st = await run1(local, {"path": str(f), "set": {"a": 2}})
    assert st.status == "failed" and "is read-only (mode 0444); set force: true" in st.summary
    assert json.loads(f.read_text()) == {"a": 1}
    out, st = await run1(local, {"path": str(f), "set": {"a": 2}, "force": True})
    assert st.status == "changed", st.summary
    assert json.loads(f.read_text()) == {"a": 2} and (f.stat().st_mode & 0o777) == 0o444


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
async def test_the_owner_and_group_are_kept(local, tmp_path):
    f = tmp_path / "owned.json"
    f.write_text('{"a": 1}\n')
    os.chown(f, 4321, 4322)
    out, st = await run1(local, {"path": str(f), "set": {"a": 2}})
    assert st.status == "changed", st.summary
    assert (f.stat().st_uid, f.stat().st_gid) == (4321, 4322)
    bak = Path(f"{f}.eagle-{out.run_id}-0.bak")
    assert (bak.stat().st_uid, bak.stat().st_gid) == (4321, 4322)


@pytest.mark.parametrize("text,expected", [
    ('{"a":1,"b":[1,2]}', '{"a":2,"b":[1,2]}'),
    ('{"a": 1, "b": [1, 2]}', '{"a": 2, "b": [1, 2]}'),
    ('{\n    "a": 1,\n    "b": 2\n}\n', '{\n    "a": 2,\n    "b": 2\n}\n'),
    ('{\n\t"a": 1\n}', '{\n\t"a": 2\n}'),
])
async def test_the_formatting_style_is_kept(local, tmp_path, text, expected):
    f = tmp_path / "c.json"
    f.write_text(text)
    out, st = await run1(local, {"path": str(f), "set": {"a": 2}})
    assert st.status == "changed", st.summary
    assert f.read_text() == expected


async def test_a_minified_file_stays_minified_and_a_huge_diff_is_capped(local, tmp_path):
    f = tmp_path / "big.json"
    doc = {f"k{i}": "v" * 50 for i in range(4000)}
    f.write_text(json.dumps(doc, separators=(",", ":")))
    size = f.stat().st_size
    out, st = await run1(local, {"path": str(f), "set": {"k0": "w"}})
    assert st.status == "changed", st.summary
    assert f.stat().st_size == size - 49  # "v" * 50 became "w"; not re-indented
    change = (await local.store.call(lambda s: s.changes(out.run_id)))[0]
    assert len(change["diff"]) <= config_patch.DIFF_CAP
    assert "bytes of the diff omitted" in change["diff"] and "sha256" in change["diff"]
    step = (await local.store.call(lambda s: s.steps(out.run_id)))[0]
    assert len(step["output"]) < config_patch.DIFF_CAP + 4096


def test_lint_accepts_a_literal_path_with_a_templated_set():
    pb = parse_playbook("""
name: ok
inputs: {layers: {type: "list[int]"}}
steps:
  - skill: config.patch
    with: {path: /models/draft/config.json, set: "{{ {'eagle_config.ids': layers} }}"}
""", "ok.yaml")
    assert pb.steps[0].skill == "config.patch"
