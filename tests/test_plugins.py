"""A team's own skills, from `skill_paths:` and from the `eaglebot.skills` entry point group,
are linted, run, listed and documented like shipped ones; a bad plugin stops start-up in one line."""
from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from support.helpers import eagle, eagle_json, write_playbook, write_yaml

from eaglebot.config import load_settings
from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.registry import SkillRegistry, shipped
from eaglebot.engine.runner import RunRequest
from eaglebot.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The skill in docs/skills.md's "Writing a skill": the tests run that very text, so it cannot rot."""
    page = (ROOT / "docs" / "skills.md").read_text()
    m = re.search(r"^## Writing a skill\n.*?^````python\n(.*?)^````$", page, re.S | re.M)
    assert m, "docs/skills.md has no ````python example under '## Writing a skill'"
    return m.group(1)


def skill_source(name: str, body: str = "return StepResult.ok('hi')") -> str:
    return textwrap.dedent(f'''
        """A test skill.

        ```yaml
        - skill: {name}
        ```
        """
        from pydantic import Field

        from eaglebot.sdk import SkillParams, StepResult

        NAME = {name!r}


        class Params(SkillParams):
            word: str = Field("hi", description="what to say")


        async def run(ctx, params):
            {body}
        ''')


@pytest.fixture
def team_dir(tmp_path) -> Path:
    d = tmp_path / "team_skills"
    d.mkdir()
    (d / "disk_free.py").write_text(readme_example())
    return d


DISK_BOOK = """
    name: disk
    description: How much room is left.
    steps:
      - skill: disk.free
        with: {path: /tmp, min_free_gib: 0}
"""


# -- skill_paths -------------------------------------------------------------------------

async def test_readme_skill_from_skill_paths_runs_over_ssh_and_lands_in_the_audit_db(
        services, sshd, team_dir, tmp_path):
    # Relative to the config file's folder, like audit_db.
    svc = await services({"box": sshd.host_config()}, skill_paths=["team_skills"])
    book = load_playbook(write_playbook(tmp_path, "disk", DISK_BOOK + """
      - skill: disk.free
        continue_on_error: true
        with: {path: /no/such/folder}
    """), svc.registry)
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out.status == "succeeded", out.error
    ok, missing = svc.store.sync.steps(out.run_id)
    assert ok["skill"] == "disk.free" and ok["status"] == "ok" and ok["host"] == "box"
    assert "GiB free under /tmp" in ok["summary"]
    assert "/tmp: " in ok["output"]  # ctx.log reached the audit output
    assert missing["status"] == "failed" and missing["summary"].startswith("df /no/such/folder failed: ")
    [metric] = svc.store.sync.metrics(out.run_id)
    assert metric["name"] == "disk_free_gib" and metric["unit"] == "GiB" and metric["value"] > 0


def test_readme_skill_follows_the_rules_shipped_skills_are_checked_for(team_dir, tmp_path):
    settings = load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["team_skills"]}))
    mod = SkillRegistry.from_settings(settings)["disk.free"]
    assert mod.Params.model_config.get("extra") == "forbid"
    assert "```yaml" in mod.__doc__ and "skill: disk.free" in mod.__doc__
    assert all(f.description for f in mod.Params.model_fields.values())
    imported = re.findall(r"^(?:from|import) (eaglebot\S*)", readme_example(), re.M)
    assert set(imported) <= {"eaglebot.sdk", "eaglebot.errors"}


def test_plugin_skill_is_linted_listed_and_documented_like_a_shipped_one(team_dir, tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "skill_paths": ["team_skills"]})
    book = write_playbook(tmp_path, "disk", DISK_BOOK)

    res = eagle("lint", str(book), config=cfg)
    assert res.returncode == 0, res.stderr
    bad = write_playbook(tmp_path, "bad", """
        name: bad
        steps:
          - skill: disk.free
            with: {pth: /tmp}
    """)
    res = eagle("lint", str(bad), config=cfg)
    assert res.returncode == 2 and "unknown key (did you mean 'path'?)" in res.stderr

    res, listing = eagle_json("skills", config=cfg)
    by_name = {s["name"]: s for s in listing}
    assert by_name["disk.free"]["source"] == str(team_dir / "disk_free.py")
    assert by_name["disk.free"]["summary"].startswith("Report the free disk space")
    assert "shell" in by_name

    res = eagle("chat", "help skills", config=cfg)
    assert res.returncode == 0 and "  disk.free: Report the free disk space" in res.stdout
    res = eagle("chat", "help disk.free", config=cfg)
    assert res.returncode == 0, res.stderr
    assert "min_free_gib (float, default: 0; allowed: >= 0): fail when fewer GiB than this are free" in res.stdout
    assert "path (str, default: '/'): a folder on the file system to check" in res.stdout


def test_without_the_config_the_plugin_skill_is_unknown(team_dir, tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res = eagle("lint", str(write_playbook(tmp_path, "disk", DISK_BOOK)), config=cfg)
    assert res.returncode == 2 and "unknown skill 'disk.free'" in res.stderr


def test_files_without_name_and_underscore_files_are_not_skills(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "helpers.py").write_text("X = 1\n")
    (d / "_private.py").write_text("raise RuntimeError('never imported')\n")
    (d / "hello.py").write_text(skill_source("team.hello"))
    reg = SkillRegistry.from_settings(load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["s"]})))
    assert set(reg) == set(shipped()) | {"team.hello"}
    assert reg.source("team.hello") == str(d / "hello.py")


def test_the_shipped_registry_knows_no_plugins(team_dir, tmp_path):
    load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["team_skills"]}))
    assert "disk.free" not in shipped() and "shell" in shipped()


# -- entry points ------------------------------------------------------------------------

def write_distribution(site: Path, module: str, source: str, entry_name: str, dist: str = "acme-skills") -> None:
    """A minimal installed distribution: importlib.metadata finds it through sys.path."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[eaglebot.skills]\n{entry_name} = {module}\n")


def test_entry_point_plugin_is_discovered_listed_and_run(tmp_path):
    site = tmp_path / "site"
    write_distribution(site, "acme_ping", skill_source(
        "acme.ping", "return StepResult.changed('said ' + params.word, data={'said': params.word})"), "ping")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    env = {"PYTHONPATH": str(site)}

    res, listing = eagle_json("skills", config=cfg, env=env)
    assert {"name": "acme.ping", "summary": "A test skill.", "source": "entry point ping = acme_ping of acme-skills",
            "params": [{"name": "word", "type": "str", "default": "default: 'hi'", "allowed": "",
                        "description": "what to say"}]} in listing
    res = eagle("chat", "help acme.ping", config=cfg, env=env)
    assert res.returncode == 0 and "word (str, default: 'hi'): what to say" in res.stdout

    book = write_playbook(tmp_path, "ping", """
        name: ping
        steps:
          - skill: acme.ping
            with: {word: hello}
    """)
    res, out = eagle_json("run", str(book), config=cfg, env=env)
    assert res.returncode == 0, res.stderr
    assert out["steps"][0]["skill"] == "acme.ping" and out["steps"][0]["summary"] == "said hello"

    # Without the distribution on the path, the same playbook is invalid.
    res = eagle("lint", str(book), config=cfg)
    assert res.returncode == 2 and "unknown skill 'acme.ping'" in res.stderr


def test_entry_point_that_fails_to_import_names_the_entry_point(tmp_path):
    site = tmp_path / "site"
    write_distribution(site, "acme_broken", "import acme_does_not_exist\n", "broken")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res = eagle("skills", config=cfg, env={"PYTHONPATH": str(site)})
    assert res.returncode == 2
    assert res.stderr.strip() == ("eagle: skill plugin entry point broken = acme_broken of acme-skills failed to "
                                  "import: ModuleNotFoundError: No module named 'acme_does_not_exist'")


# -- clashes and broken plugins stop start-up --------------------------------------------

@pytest.mark.parametrize("argv", [("skills",), ("chat", "help"), ("run", "verify"), ("lint",)])
def test_a_plugin_named_like_a_shipped_skill_stops_start_up_with_exit_2(tmp_path, argv):
    d = tmp_path / "team_skills"
    d.mkdir()
    (d / "my_shell.py").write_text(skill_source("shell"))
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "skill_paths": ["team_skills"]})
    res = eagle(*argv, config=cfg)
    assert res.returncode == 2
    assert res.stderr.strip() == (f"eagle: skill 'shell' is defined twice, by eaglebot.skills.shell and by "
                                  f"{d / 'my_shell.py'}: rename one of them")
    assert res.stdout == ""


def test_two_plugins_with_one_name_clash(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "hello.py").write_text(skill_source("team.hello"))
    settings = load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["a", "b"]}))
    with pytest.raises(UsageError, match=r"^skill 'team.hello' is defined twice, by .*/a/hello.py and by "
                                         r".*/b/hello.py: rename one of them$"):
        SkillRegistry.from_settings(settings)


def test_broken_plugin_file_is_one_sentence_not_a_traceback(tmp_path):
    d = tmp_path / "team_skills"
    d.mkdir()
    (d / "oops.py").write_text('NAME = "team.oops"\n\nraise_here = 1 / 0\n')
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "skill_paths": ["team_skills"]})
    res = eagle("chat", "help", config=cfg)
    assert res.returncode == 2
    assert res.stderr.strip() == (f"eagle: skill plugin {d / 'oops.py'}:3 failed to import: "
                                  f"ZeroDivisionError: division by zero")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("source,why", [
    ("NAME = 'team.x'\ndef broken(:\n", r"oops.py:2 failed to import: SyntaxError: "),
    ("NAME = 'team.x'\n\nasync def run(ctx, params): ...\n",
     r"oops.py \(team.x\) needs a class Params that subclasses eaglebot.sdk.SkillParams$"),
    ("import pydantic\nNAME = 'team.x'\nclass Params(pydantic.BaseModel): ...\nasync def run(ctx, params): ...\n",
     r"oops.py \(team.x\) needs a class Params that subclasses eaglebot.sdk.SkillParams$"),
    ("from eaglebot.sdk import SkillParams\nNAME = 'team.x'\nclass Params(SkillParams): ...\n",
     r"oops.py \(team.x\) needs `async def run\(ctx, params\) -> StepResult`$"),
    ("from eaglebot.sdk import SkillParams\nNAME = 'team.x'\nclass Params(SkillParams): ...\ndef run(c, p): ...\n",
     r"oops.py \(team.x\) needs `async def run\(ctx, params\) -> StepResult`$"),
    ("from eaglebot.sdk import SkillParams\nNAME = 'team.x'\nclass Params(SkillParams): ...\n"
     "async def run(ctx): ...\n",
     r"oops.py \(team.x\) needs `async def run\(ctx, params\) -> StepResult`$"),
    ("from eaglebot.sdk import SkillParams\nNAME = 'team.x'\nREAD_ONLY = 'yes'\nclass Params(SkillParams): ...\n"
     "async def run(ctx, params): ...\n",
     r"oops.py \(team.x\): READ_ONLY must be True or False, not 'yes'$"),
    ("NAME = 7\n", r"oops.py: NAME must be a non-empty string, not 7$"),
])
def test_invalid_plugin_file_is_one_error_naming_the_file(tmp_path, source, why):
    d = tmp_path / "s"
    d.mkdir()
    (d / "oops.py").write_text(source)
    settings = load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["s"]}))
    with pytest.raises(UsageError, match=rf"^skill plugin {re.escape(str(d))}/{why}") as e:
        SkillRegistry.from_settings(settings)
    assert "\n" not in str(e.value)


def test_missing_skill_paths_folder_is_a_usage_error(tmp_path):
    settings = load_settings(write_yaml(tmp_path / "eagle.yaml", {"skill_paths": ["nope"]}))
    with pytest.raises(UsageError, match=rf"^skill_paths: folder {re.escape(str(tmp_path / 'nope'))} does not exist$"):
        SkillRegistry.from_settings(settings)


def test_every_skill_module_is_in_the_list_mypy_checks():
    """engine/shipped.py names each shipped skill's module (imported when the skill is first
    used) and holds it to the Skill protocol for mypy; a module left out would be unknown to
    the registry, or run unchecked."""
    import importlib
    import pkgutil

    from eaglebot import skills
    from eaglebot.engine import shipped as shipped_mod
    from eaglebot.engine.shipped import SHIPPED

    modules = {m.name: importlib.import_module(f"eaglebot.skills.{m.name}") for m in pkgutil.iter_modules(skills.__path__)
               if not m.ispkg and not m.name.startswith("_")}
    assert {n: m.NAME for n, m in modules.items() if hasattr(m, "NAME")} == {v: k for k, v in SHIPPED.items()}
    checked = re.findall(r"^    _(\w+): Skill\[(\w+)\.Params\] = (\w+)$", Path(shipped_mod.__file__).read_text(), re.M)
    assert sorted(checked) == sorted((m, m, m) for m in SHIPPED.values())
    assert sorted(shipped()) == sorted(SHIPPED)


def test_a_run_imports_only_the_skills_its_playbook_uses(tmp_path):
    """`eagle run hello` starts fast because the shipped skills it does not use are never imported."""
    import subprocess
    import sys

    code = ("import sys; from eaglebot.frontends.cli.main import main; rc = main(['run', 'hello', '-H', 'local']); "
            "print(sorted(m for m in sys.modules if m.startswith('eaglebot.skills.')), file=sys.stderr); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, input="",
                         env={k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"})
    assert res.returncode == 0, res.stderr
    loaded = res.stderr.strip().splitlines()[-1]
    assert loaded == "['eaglebot.skills.audit_note', 'eaglebot.skills.shell']", loaded


# -- entry points: the skills' group read without importlib.metadata (eaglebot/entry_points.py);
# pydantic's own plugins are pydantic's business --------------------------------------------

def _loaded_after_run(tmp_path, env_path: str | None = None) -> dict:
    import json
    import subprocess
    import sys
    code = ("import sys, json, contextlib, io\n"
            "from eaglebot.frontends.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    rc = main(['run', 'hello', '-H', 'local'])\n"
            "import pydantic.plugin._loader as loader\n"
            "print(json.dumps({'rc': rc, 'plugins': sorted(type(p).__name__ for p in loader.get_plugins())}))\n")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    if env_path:
        env["PYTHONPATH"] = env_path
    # once to make the audit store (its schema is sqlite-utils' work, which asks importlib.metadata
    # for sqlite-utils' own plugins), then the run measured, on the store as it is from then on
    first = subprocess.run([sys.executable, "-m", "eaglebot", "run", "hello", "-H", "local"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_declared_pydantic_plugin_is_loaded_as_pydantic_loads_it(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_pyd.py").write_text("class AcmePlugin:\n    def new_schema_validator(self, *a, **k):\n"
                                      "        return None, None, None\nplugin = AcmePlugin()\n")
    info = site / "acme_pyd-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-pyd\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nacme = acme_pyd:plugin\n")
    out = _loaded_after_run(tmp_path, str(site))
    assert out == {"rc": 0, "plugins": ["AcmePlugin"]}


def test_what_cannot_be_listed_as_folders_is_asked_of_importlib_metadata(tmp_path, monkeypatch):
    import zipfile

    from eaglebot import entry_points as ep

    zipped = tmp_path / "eggs.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("acme-1.0.dist-info/entry_points.txt", "[eaglebot.skills]\nping = acme\n")
    ep._declared.cache_clear()
    monkeypatch.setattr("sys.path", [str(zipped)])
    try:
        assert ep.may_declare("eaglebot.skills") and ep.may_declare("anything")   # a zip: not read here
    finally:
        ep._declared.cache_clear()
    monkeypatch.setattr("sys.path", [str(tmp_path / "nothing-here")])
    try:
        assert not ep.may_declare("eaglebot.skills") and ep.entry_points("eaglebot.skills") == []
    finally:
        ep._declared.cache_clear()
