"""Shared fixtures: a real sshd on loopback, settings and services on temp files."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.slack_harness import open_harness, start_foreign_gpu_holder  # noqa: E402
from support.sshd import SSHServer, chown_to, start_sshd  # noqa: E402

from eaglebot.config import Settings, load_settings  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _no_user_config(tmp_path_factory):
    """A developer's ~/.config/eaglebot/eagle.yaml must not leak into tests that run `eagle`
    without --config (config discovery, issue 24): the user config folder is an empty one."""
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    yield
    if old is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = old


def _cgroup2_mount() -> Path | None:
    try:
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return Path(left.split()[4])
    except OSError:
        pass
    return None


@pytest.fixture(scope="session", autouse=True)
def _own_cgroup():
    """Each test process (an xdist worker) in a cgroup of its own, as systemd gives every
    service and login session one: the processes it starts (its sshd's sessions, the bot's
    commands) and their orphans are then told apart from another worker's by the sweep
    (transport/leftovers.py), which spares orphans of another cgroup. Root only, where cgroup2 is
    mounted writable; elsewhere the workers share one cgroup (as on a host without systemd)."""
    mount = _cgroup2_mount()
    mine = None
    if os.geteuid() == 0 and mount is not None:
        try:
            old = next(line[3:].strip() for line in open("/proc/self/cgroup") if line.startswith("0::"))
            mine = mount / f"eagle-test-{os.getpid()}"
            mine.mkdir(exist_ok=True)
            (mine / "cgroup.procs").write_text(str(os.getpid()))
        except (OSError, StopIteration):
            mine = None
    yield
    if mine is not None:
        try:
            (mount / old.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))
            mine.rmdir()
        except OSError:  # something of the session still runs in it: the folder stays, empty later
            pass


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SSHServer:
    root = Path("/tmp") / f"eagle-sshd-{os.getpid()}"
    server = start_sshd(root)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def root_sshd() -> SSHServer:
    """An sshd on 127.0.0.1 that lets root in with the generated key alone: the claims about
    root SSH (docs/reliability.md) are tested over it."""
    if os.geteuid() != 0:
        pytest.fail("the root SSH tests need root to start an sshd that lets root in (CI runs as root)")
    server = start_sshd(Path("/tmp") / f"eagle-root-sshd-{os.getpid()}", user="root")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL of this session (tests/support/pg.py), with the migrated template database."""
    from support.pg import make_template, start_pg

    server = start_pg()
    try:
        make_template(server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real one-node Slurm cluster of this session (tests/support/slurm.py): node gpu-01, idle. Where
    Slurm cannot be installed or started the tests that use it FAIL with the reason."""
    from support.slurm import SlurmUnavailable, start_slurm

    try:
        cluster = start_slurm()
    except SlurmUnavailable as e:
        pytest.fail(str(e))
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster):
    """The session's Slurm cluster with its node reset: no job, not drained, idle."""
    slurm_cluster.reset()
    return slurm_cluster


@pytest.fixture
def pg_url(pg_server) -> str:
    """`postgresql://eagle@127.0.0.1:PORT/DB`: a fresh database, migrated, for this test only."""
    return pg_server.fresh_db()


@pytest.fixture
def remote_dir(sshd, tmp_path_factory) -> Path:
    """A folder the SSH test user owns (pytest's own tmp folders are root-only)."""
    d = Path("/tmp") / f"eagle-remote-{os.getpid()}-{os.urandom(4).hex()}"
    d.mkdir()
    os.chmod(d, 0o755)
    chown_to(d)
    yield d


def write_config(dir_: Path, data: dict) -> Path:
    p = dir_ / "eagle.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def make_settings(tmp_path):
    def make(hosts: dict | None = None, **extra) -> Settings:
        data = {"audit_db": str(tmp_path / "eagle.db"), "hosts": dict(hosts or {})}
        data.update(extra)
        return load_settings(write_config(tmp_path, data))
    return make


@pytest.fixture
async def services(make_settings):
    opened = []

    async def open_(hosts: dict | None = None, **extra) -> Services:
        svc = await Services.open(make_settings(hosts, **extra))
        opened.append(svc)
        return svc

    yield open_
    for svc in opened:
        await svc.close()


@pytest.fixture
async def fake():
    """The fake Slack Web API on loopback (tests/support/fakes/slack_api.py)."""
    f = await FakeSlackAPI().start()
    yield f
    await f.stop()


@pytest.fixture
async def harness(tmp_path, fake):
    """Open Bolt app harnesses (tests/support/slack_harness.py) on the fake Web API; all closed after."""
    opened = []

    async def open_(**kw):
        h = await open_harness(tmp_path, fake, **kw)
        opened.append(h)
        return h

    yield open_
    for h in opened:
        await h.close()


@pytest.fixture
def stranger(tmp_path):
    """A real process holding the SIMULATED GPU that the bot did not start."""
    p = start_foreign_gpu_holder(tmp_path / "sim-state")
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


def _processes_naming(path: str) -> list[int]:
    """Processes (not this one) whose command line names `path`: what a test started under its tmp_path."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmd:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _nothing_outlives_its_test(request):
    """A server a test had the bot start under its tmp_path (a simulated SGLang from a relaunch the
    test never stopped) would outlive the run: stopped here, and said as a warning naming the test,
    so a later test (or the next session) never meets it on its port."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    root = str(request.getfixturevalue("tmp_path")) + os.sep
    yield
    left = _processes_naming(root)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if left:
        import warnings
        warnings.warn(f"{request.node.nodeid} left {len(left)} process(es) running under its tmp_path; killed: {left}",
                      stacklevel=1)


# The longest tests first, so that xdist's workers finish together (measured with `pytest
# --durations`; the e2e step's first, then the default run's). xdist hands each worker two tests
# to start with: a short one sits between two long ones. Tests not named keep their order after.
LONGEST_FIRST = [
    "tests/test_shipped_playbooks.py::test_every_shipped_playbook_reaches_its_outcome_with_the_default_config",
    "tests/test_demo.py::test_demo_runs_the_relaunch_story_and_leaves_nothing_running",
    "tests/test_real_sglang_rehearsal.py::test_the_real_sglang_sequence_passes_in_rehearsal_and_records_what_it_measured",
    "tests/test_skill_style.py::test_mypy_strict_catches_a_misspelt_result_keyword_in_a_plugin",
    "tests/test_tune_sim.py::test_tune_reports_each_batch_size_measured_and_predicted_in_a_fifth_of_the_grid",
    "tests/test_tune_sim.py::test_the_flap_test_rejects_a_config_that_flaps_and_names_the_phase",
    "tests/test_tune_sim.py::test_tune_deploys_adaptive_steps_that_pass_the_flap_test_after_an_approval",
    "tests/test_tuning_sim.py::test_a_3x2x2_sweep_ranks_the_planted_optimum_first_skips_rewrites_and_resumes",
    "tests/test_replicas.py::test_ha_soak_two_replicas_every_5s_survive_two_leader_kills",
    "tests/test_tune_schedule.py::test_a_fire_proposes_a_better_config_and_leaves_the_deployed_one_running",
    "tests/test_tune_sshd.py::test_apply_waits_for_the_approval_then_relaunches_with_the_choice",
    "tests/test_draft_gate.py::test_a_wrong_capture_patch_is_refused_the_old_server_keeps_serving_and_the_probe_names_it",
    "tests/test_dry_run_host.py::test_a_dry_run_of_every_shipped_playbook_changes_nothing_on_the_host",
    "tests/test_tuning_sim.py::test_bisect_names_the_one_planted_culprit_among_6_changes_within_the_bound",
    "tests/test_slack_tune.py::test_slash_tune_posts_the_table_and_plot_and_apply_waits_for_an_approver",
    "tests/test_slurm_real.py::test_the_shipped_drain_and_resume_playbooks_through_the_real_cli",
    "tests/test_backup.py::test_backup_while_another_process_writes_gives_copies_that_verify",
    "tests/test_store_one_text.py::test_the_mixins_statements_reach_postgresql_as_written",
    "tests/test_draft_contract.py::test_the_probe_reading_the_source_agrees_with_sglangs_own_imported_classes",
    # the default run's
    "tests/test_correctness_sim.py::test_the_reference_is_recorded_once_a_faithful_draft_passes_and_a_lossy_one_fails",
    "tests/test_dry_run_host.py::test_a_stale_pid_file_is_left_by_a_dry_run_and_removed_by_the_stop",
    "tests/test_tune_sshd.py::test_a_no_changes_nothing_and_is_recorded",
    "tests/test_plugins.py::test_plugin_skill_is_linted_listed_and_documented_like_a_shipped_one",
    "tests/test_server_skills.py::test_relaunch_over_ssh_patches_warns_benchmarks_and_revert_restores_the_bytes",
    "tests/test_preflight.py::test_each_refusal_comes_before_server_stop_and_the_running_server_keeps_answering",
    "tests/test_regress_corpus.py::test_the_product_detector_on_one_series_of_each_kind",
    "tests/test_health_watch.py::test_a_hung_nvidia_smi_is_probe_hung_while_the_others_keep_their_interval",
    "tests/test_terminal_output.py::test_bash_completion_offers_the_configs_playbooks_hosts_and_schedules",
    "tests/test_preflight.py::test_bind_sets_where_the_server_listens_and_the_probes_follow_it",
    "tests/test_ops_serve.py::test_sighup_adds_a_host_while_a_run_goes_on_and_a_bad_config_is_refused_with_its_line",
    "tests/test_serve.py::test_eagle_serve_http_binds_loopback_answers_signed_commands_and_stops_cleanly",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("[", 1)[0], len(rank)))
