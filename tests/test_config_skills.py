"""config.patch / config.revert / pycache.clear through the engine, locally and over real SSH."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.skills import config_patch
from eaglebot.skills.lib import files
from support.gpu_helpers import PY, playbook

ORIGINAL = (b'{\n  "architectures": [\n    "LlamaForCausalLMEagle3"\n  ],\n  "hidden_size": 4096,\n'
            b'  "eagle_config": {\n    "use_aux_hidden_state": true\n  },\n  "rope_theta": 500000.0\n}\n')


def step(skill: str, with_: dict, name: str = "one") -> str:
    return json.dumps({"name": name, "steps": [{"skill": skill, "with": with_}]})


async def run1(svc, skill: str, with_: dict, host: str = "h", **kw):
    out = await svc.engine.run(RunRequest(playbook=playbook(step(skill, with_)), hosts=[host], **kw))
    return out, out.steps[0]


@pytest.fixture
async def local(services, tmp_path):
    return await services({"h": {"transport": "local", "vars": {"python": PY}}})


# -- config.patch ----------------------------------------------------------------------------

async def test_patch_sets_nested_key_keeps_order_and_backs_up_original(local, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(ORIGINAL)
    os.chmod(cfg, 0o640)
    out, st = await run1(local, "config.patch", {"path": str(cfg), "set": {
        "eagle_config.eagle_aux_hidden_state_layer_ids": [1, 23, 44], "new.deep.key": "x"}})
    assert st.status == "changed", st.summary
    bak = Path(f"{cfg}.eagle-{out.run_id}-0.bak")
    assert bak.read_bytes() == ORIGINAL
    doc = json.loads(cfg.read_text())
    assert list(doc) == ["architectures", "hidden_size", "eagle_config", "rope_theta", "new"]
    assert doc["eagle_config"] == {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 23, 44]}
    assert doc["new"] == {"deep": {"key": "x"}}
    assert cfg.read_text().startswith('{\n  "architectures": [\n    "LlamaForCausalLMEagle3"\n  ],\n')
    assert cfg.read_text().endswith("}\n")
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o640
    [ch] = local.store.sync.changes(out.run_id)
    assert ch["path"] == str(cfg) and ch["backup_path"] == str(bak)
    assert ch["before_sha256"] == hashlib.sha256(ORIGINAL).hexdigest()
    assert ch["after_sha256"] == hashlib.sha256(cfg.read_bytes()).hexdigest()
    assert '+    "eagle_aux_hidden_state_layer_ids": [' in ch["diff"]


async def test_patch_keeps_a_four_space_indent(local, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{\n    "a": 1,\n    "b": {\n        "c": 2\n    }\n}')
    _, st = await run1(local, "config.patch", {"path": str(cfg), "set": {"b.c": 3}})
    assert st.status == "changed"
    assert cfg.read_text() == '{\n    "a": 1,\n    "b": {\n        "c": 3\n    }\n}'


async def test_patch_is_a_noop_when_already_equal(local, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(ORIGINAL)
    out, st = await run1(local, "config.patch", {"path": str(cfg), "set": {"eagle_config.use_aux_hidden_state": True}})
    assert st.status == "ok" and "already has eagle_config.use_aux_hidden_state" in st.summary
    assert cfg.read_bytes() == ORIGINAL
    assert list(tmp_path.glob("*.bak")) == [] and local.store.sync.changes(out.run_id) == []


async def test_patch_deletes_and_fails_clearly_on_a_missing_path(local, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(ORIGINAL)
    _, st = await run1(local, "config.patch", {"path": str(cfg), "delete": ["eagle_config.use_aux_hidden_state"]})
    assert st.status == "changed" and json.loads(cfg.read_text())["eagle_config"] == {}
    before = cfg.read_bytes()
    _, st = await run1(local, "config.patch", {"path": str(cfg), "delete": ["eagle_config.nope"]})
    assert st.status == "failed"
    assert st.summary == f"cannot delete eagle_config.nope: key 'eagle_config.nope' does not exist in {cfg}"
    _, st = await run1(local, "config.patch", {"path": str(cfg), "delete": ["missing.parent"]})
    assert st.summary == f"cannot delete missing.parent: key 'missing' does not exist in {cfg}"
    _, st = await run1(local, "config.patch", {"path": str(cfg), "set": {"hidden_size.x": 1}})
    assert st.summary == f"cannot set hidden_size.x: hidden_size is a number, not an object in {cfg}"
    assert cfg.read_bytes() == before


async def test_patch_replaces_a_symlink_and_never_writes_through_it(local, tmp_path):
    blob = tmp_path / "blobs" / "abc123"
    blob.parent.mkdir()
    blob.write_bytes(ORIGINAL)
    snap = tmp_path / "snapshots"
    snap.mkdir()
    link = snap / "config.json"
    link.symlink_to(blob)
    out, st = await run1(local, "config.patch", {"path": str(link), "set": {"hidden_size": 8192}})
    assert st.status == "changed"
    assert not link.is_symlink() and json.loads(link.read_text())["hidden_size"] == 8192
    assert blob.read_bytes() == ORIGINAL
    assert Path(f"{link}.eagle-{out.run_id}-0.bak").read_bytes() == ORIGINAL
    _, st = await run1(local, "config.revert", {"path": str(link)})
    assert st.status == "changed" and link.read_bytes() == ORIGINAL


async def test_revert_restores_byte_for_byte_and_twice_is_a_noop(local, tmp_path):
    odd = b'{"b":1,   "a" : [1,2],\n"z": {"k": "\\u00e9"}}'       # formatting json.dumps would not produce
    cfg = tmp_path / "config.json"
    cfg.write_bytes(odd)
    first, st = await run1(local, "config.patch", {"path": str(cfg), "set": {"a": [3]}})
    assert st.status == "changed"
    await run1(local, "config.patch", {"path": str(cfg), "set": {"b": 2}})
    # newest backup (the second patch) first, then an explicit run
    _, st = await run1(local, "config.revert", {"path": str(cfg)})
    assert st.status == "changed" and json.loads(cfg.read_text())["b"] == 1
    out, st = await run1(local, "config.revert", {"path": str(cfg), "run": first.run_id})
    assert st.status == "changed", st.summary
    assert cfg.read_bytes() == odd
    [ch] = local.store.sync.changes(out.run_id)
    assert ch["after_sha256"] == hashlib.sha256(odd).hexdigest() and ch["backup_path"] is None
    _, st = await run1(local, "config.revert", {"path": str(cfg), "run": first.run_id})
    assert st.status == "ok" and "already matches the backup" in st.summary


async def test_revert_without_a_backup_fails_clearly(local, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(ORIGINAL)
    _, st = await run1(local, "config.revert", {"path": str(cfg)})
    assert st.status == "failed"
    assert st.summary == f"no backup of {cfg} on h in the audit log; nothing to revert"
    _, st = await run1(local, "config.revert", {"path": str(cfg), "run": 999})
    assert st.summary == f"no backup of {cfg} on h from run 999 in the audit log; nothing to revert"


async def test_patch_fails_with_one_sentence_on_invalid_json_or_missing_file(local, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1,,}')
    _, st = await run1(local, "config.patch", {"path": str(bad), "set": {"a": 2}})
    assert st.status == "failed"
    assert st.summary == f"{bad} on h is not valid JSON (line 1 column 9: Expecting property name enclosed in double quotes)"
    _, st = await run1(local, "config.patch", {"path": str(tmp_path / "nope.json"), "set": {"a": 2}})
    assert st.summary == f"cannot read {tmp_path / 'nope.json'} on h: No such file or directory"


async def test_patch_dry_run_shows_the_diff_and_writes_nothing(local, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_bytes(ORIGINAL)
    out, st = await run1(local, "config.patch", {"path": str(cfg), "set": {"hidden_size": 1}}, dry_run=True)
    assert st.status == "skipped"
    assert cfg.read_bytes() == ORIGINAL and list(tmp_path.glob("*.bak")) == []
    assert any('+  "hidden_size": 1,' in p for p in out.plan)


async def test_patch_and_revert_over_ssh(services, sshd, remote_dir):
    from support.sshd import chown_to

    cfg = remote_dir / "draft" / "config.json"
    cfg.parent.mkdir()
    cfg.write_bytes(ORIGINAL)
    chown_to(remote_dir)
    svc = await services({"gpu": sshd.host_config()})
    out, st = await run1(svc, "config.patch", {"path": str(cfg), "set": {"eagle_config.eagle_aux_hidden_state_layer_ids": [2, 16, 29]}},
                         host="gpu")
    assert st.status == "changed", st.summary
    assert json.loads(cfg.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert Path(f"{cfg}.eagle-{out.run_id}-0.bak").read_bytes() == ORIGINAL
    _, st = await run1(svc, "config.revert", {"path": str(cfg)}, host="gpu")
    assert st.status == "changed" and cfg.read_bytes() == ORIGINAL
    _, st = await run1(svc, "config.patch", {"path": str(remote_dir / "nope.json"), "set": {"a": 1}}, host="gpu")
    assert st.status == "failed" and st.summary.startswith(f"cannot read {remote_dir / 'nope.json'} on gpu:")


def test_detect_style_and_apply_are_pure():
    assert config_patch.detect_style('{\n\t"a": 1\n}') == ("\t", True, False, (",", ": "))
    assert config_patch.detect_style('{"a": "\u00e9"}\n') == (None, False, True, (", ", ": "))
    doc = {"a": {"b": 1}}
    assert config_patch.apply(doc, {"a.b": 1, "a.c": [1]}, []) == ["a.c"]
    assert doc == {"a": {"b": 1, "c": [1]}}



def test_backups_are_named_after_the_file_the_run_and_the_step():
    assert files.backup_path("/models/eagle3/config.json", 42, 3) == "/models/eagle3/config.json.eagle-42-3.bak"
    assert files.backup_path("~/cfg.json", 7, 0) == "~/cfg.json.eagle-7-0.bak"

# -- pycache.clear -----------------------------------------------------------------------------

def _tree(root: Path) -> int:
    """A package tree with bytecode; returns the bytecode's total size."""
    (root / "pkg" / "sub" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (root / "pkg" / "sub" / "m.py").write_text("x = 1\n")
    files = {root / "pkg" / "__pycache__" / "__init__.cpython-311.pyc": 100,
             root / "pkg" / "sub" / "__pycache__" / "m.cpython-311.pyc": 250,
             root / "pkg" / "sub" / "__pycache__" / "m.cpython-311.opt-1.pyc": 50,
             root / "pkg" / "sub" / "legacy.pyc": 25}
    for f, n in files.items():
        f.write_bytes(b"\0" * n)
    return sum(files.values())


async def test_pycache_clear_paths_counts_then_removes(local, tmp_path):
    root = tmp_path / "src with 'quote' & space"
    size = _tree(root)
    out, st = await run1(local, "pycache.clear", {"paths": [str(root)]}, dry_run=True)
    assert st.status == "skipped"
    assert "would remove 2 __pycache__ folders and 4 bytecode files (425 B)" in st.summary
    assert (root / "pkg" / "__pycache__").exists()
    out, st = await run1(local, "pycache.clear", {"paths": [str(root)]})
    assert st.status == "changed", st.summary
    data = json.loads(local.store.sync.steps(out.run_id)[0]["data"])
    assert (data["dirs"], data["files"], data["bytes"]) == (2, 4, size)
    assert not list(root.rglob("__pycache__")) and not list(root.rglob("*.pyc"))
    assert (root / "pkg" / "sub" / "m.py").exists()
    _, st = await run1(local, "pycache.clear", {"paths": [str(root)]})
    assert st.status == "ok" and st.summary.startswith("no bytecode under")


async def test_pycache_clear_locates_a_package_without_importing_it(services, tmp_path):
    root = tmp_path / "site"
    _tree(root)
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{root}' exec {PY} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    svc = await services({"h": {"transport": "local", "vars": {"python": str(wrapper)}}})
    out, st = await run1(svc, "pycache.clear", {"package": "pkg"})
    assert st.status == "changed", st.summary          # pkg/__init__.py raises when imported
    assert not list(root.rglob("__pycache__"))
    _, st = await run1(svc, "pycache.clear", {"package": "no_such_pkg_eagle"})
    assert st.status == "failed"
    assert st.summary == f"package no_such_pkg_eagle is not installed for {wrapper} on h"


async def test_pycache_clear_refuses_missing_folders_and_system_roots(local, tmp_path):
    _, st = await run1(local, "pycache.clear", {"paths": [str(tmp_path / "nope")]})
    assert st.status == "failed" and st.summary == f"{tmp_path / 'nope'} is not a folder on h"
    from eaglebot.errors import UsageError

    with pytest.raises(UsageError, match="refusing to clean a whole system folder"):
        playbook(step("pycache.clear", {"paths": ["/usr/"]}))
