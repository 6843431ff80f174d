"""nvidia-smi / fuser parsers on the real captured outputs, and the simulator's formats against them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eaglebot.sim import gpu_state
from eaglebot.facts.gpu import nvsmi

FIX = Path(__file__).parent / "fixtures" / "nvidia-smi"
SIM = Path(gpu_state.__file__).parent


def fx(name: str) -> str:
    return (FIX / name).read_bytes().decode()


# -- parsers ------------------------------------------------------------------------------

def test_memory_used_nounits_single_and_dual():
    assert nvsmi.parse_memory_used(fx("h200-query-memory-busy-nounits.csv")) == {0: 19601}
    assert nvsmi.parse_memory_used(fx("h200-query-memory-idle-nounits.csv")) == {0: 0}
    assert nvsmi.parse_memory_used(fx("2xh200-query-memory-busy-nounits.csv")) == {0: 11543, 1: 15359}


def test_memory_used_with_units():
    assert nvsmi.parse_memory_used(fx("h200-query-memory-idle.csv")) == {0: 0}
    assert nvsmi.parse_memory_used(fx("2xh200-query-memory-busy.csv")) == {0: 11543, 1: 15359}


def test_memory_used_residual_is_reported_as_is():
    assert nvsmi.parse_memory_used(fx("2xh200-query-memory-residual-nounits.csv")) == {0: 4343, 1: 4}


def test_full_query_with_header_strips_units():
    rows = nvsmi.parse_query(fx("h200-query-gpu-full.csv"))
    assert rows == [{
        "index": "0", "uuid": "GPU-c637b75d-bccc-0cab-3f64-9c4fb3bf5eaf", "name": "NVIDIA H200",
        "memory.total": "143771", "memory.used": "0", "memory.free": "143156", "utilization.gpu": "0",
        "temperature.gpu": "39", "power.draw": "108.32"}]


def test_header_must_match_the_fields_asked_for():
    with pytest.raises(nvsmi.ParseError):
        nvsmi.parse_query(fx("h200-query-gpu-full.csv"), ["index", "memory.used"])


def test_gpu_table_the_skills_read():
    [row] = nvsmi.parse_gpus(fx("h200-query-gpu-full.csv"))
    assert row == nvsmi.GpuRow(0, "GPU-c637b75d-bccc-0cab-3f64-9c4fb3bf5eaf", "NVIDIA H200", 0, 143771, "0")
    [app] = nvsmi.parse_compute_apps(fx("h200-query-compute-apps-busy.csv"))
    assert app.gpu_uuid == row.uuid   # the join gpu.snapshot makes


def test_compute_apps_four_columns_process_on_two_gpus_listed_twice():
    apps = nvsmi.parse_compute_apps(fx("2xh200-query-compute-apps-busy-nounits.csv"))
    assert [(a.pid, a.process_name, a.used_mib) for a in apps] == [
        (566, "python3", 3380), (564, "python3", 8148), (566, "python3", 3380), (565, "python3", 11964)]
    uuids = {r["uuid"]: int(r["index"]) for r in nvsmi.parse_query(fx("2xh200-query-gpu-uuid.csv"), ["index", "uuid"])}
    assert [uuids[a.gpu_uuid] for a in apps] == [0, 0, 1, 1]


def test_compute_apps_three_columns_and_units():
    [a] = nvsmi.parse_compute_apps(fx("h200-query-compute-apps-busy-nounits.csv"))
    assert (a.pid, a.process_name, a.used_mib, a.gpu_uuid) == (450, "python3", 19592, None)
    [b] = nvsmi.parse_compute_apps(fx("h200-query-compute-apps-busy.csv"))
    assert (b.pid, b.used_mib, b.gpu_uuid) == (450, 19592, "GPU-c637b75d-bccc-0cab-3f64-9c4fb3bf5eaf")


def test_compute_apps_empty_output_means_no_process():
    assert fx("h200-query-compute-apps-idle.csv") == ""
    assert nvsmi.parse_compute_apps(fx("h200-query-compute-apps-idle.csv")) == []


def test_compute_apps_name_with_comma_and_not_available_memory():
    [a] = nvsmi.parse_compute_apps("77, my, odd name, [N/A], GPU-x\n")
    assert (a.pid, a.process_name, a.used_mib, a.gpu_uuid) == (77, "my, odd name", None, "GPU-x")


def test_fuser_output_names_pids_per_device():
    entries = nvsmi.parse_fuser(fx("h200-fuser-busy.txt"))
    assert [(e.device, e.user, e.pid, e.access, e.command, e.gpu) for e in entries] == [
        ("/dev/nvidia0", "root", 450, "F...m", "python3", 0),
        ("/dev/nvidiactl", "root", 450, "F...m", "python3", None),
        ("/dev/nvidia-uvm", "root", 450, "F...m", "python3", None)]


def test_fuser_continuation_lines_and_noise():
    text = ("Cannot stat file /proc/1/fd/3: Permission denied\n"
            "                     USER        PID ACCESS COMMAND\n"
            "/dev/nvidia1:        root        451 F...m python3\n"
            "                     eagletest   452 F.... sleep\n"
            "/dev/nvidiactl:      root     kernel mount /dev/nvidiactl\n"
            "Specified filename /dev/nvidia* does not exist.\n")
    entries = nvsmi.parse_fuser(text)
    assert [(e.device, e.user, e.pid, e.gpu) for e in entries] == [
        ("/dev/nvidia1", "root", 451, 1), ("/dev/nvidia1", "eagletest", 452, 1)]


def test_unexpected_output_is_a_parse_error_not_a_crash():
    with pytest.raises(nvsmi.ParseError):
        nvsmi.parse_memory_used("No devices were found\n")


@pytest.mark.parametrize("value,expected", [
    (None, None), ("", None), ("all", None), ("0,1", [0, 1]), ("1 3", [1, 3]), ([2, 0], [2, 0]), (3, [3]),
    ("[0, 1]", [0, 1]), ("0,0", [0]),
])
def test_gpu_selection(value, expected):
    assert nvsmi.parse_gpu_selection(value) == expected


def test_gpu_selection_rejects_garbage():
    with pytest.raises(ValueError):
        nvsmi.parse_gpu_selection("0,x")
    with pytest.raises(ValueError):
        nvsmi.parse_gpu_selection(True)


@pytest.mark.parametrize("rc,needle", [
    (127, "nvidia-smi not found on gpu-01"), (9, "driver is not loaded"), (14, "InfoROM is corrupted"),
    (15, "fallen off the bus"), (2, "exit status 2: bad"),
])
def test_exit_codes_become_one_sentence(rc, needle):
    msg = nvsmi.explain_exit("gpu-01", "nvidia-smi", rc, "", "bad\n")
    assert needle in msg and "\n" not in msg


# -- the simulator prints the fixtures' formats ------------------------------------------------

def _sim(state_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SIM / "nvidia_smi.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "EAGLE_SIM_STATE": str(state_dir)}, timeout=30)


def _fixture_state(tmp_path: Path, n: int, power: list[int], temps: list[int]) -> dict:
    gpu_state.init_state(tmp_path, n)
    st = gpu_state.load_state(tmp_path)
    for g, p, t in zip(st["gpus"], power, temps):
        g["power_w"], g["temp_c"] = p, t
    gpu_state.save_state(tmp_path, st)
    return st


BUSY_2X = [{"pid": 564, "gpu": 0, "mib": 8148, "name": "python3"}, {"pid": 566, "gpu": 0, "mib": 3380, "name": "python3"},
           {"pid": 565, "gpu": 1, "mib": 11964, "name": "python3"}, {"pid": 566, "gpu": 1, "mib": 3380, "name": "python3"}]


def _body(text: str) -> list[str]:
    return text.splitlines(keepends=True)[1:]       # the first line is the clock


def test_sim_table_matches_idle_fixtures_byte_for_byte(tmp_path):
    from eaglebot.sim import nvidia_smi

    st = _fixture_state(tmp_path / "a", 2, [120, 118], [32, 33])
    assert _body(nvidia_smi.table(st)) == _body(fx("2xh200-idle.txt"))
    st1 = _fixture_state(tmp_path / "b", 1, [115], [39])
    assert _body(nvidia_smi.table(st1)) == _body(fx("h200-idle.txt"))


def test_sim_table_matches_busy_fixtures_byte_for_byte(tmp_path):
    from eaglebot.sim import nvidia_smi

    st = _fixture_state(tmp_path / "a", 2, [113, 114], [32, 33])
    st["gpus"][0]["residual_mib"] = 11543 - 8148 - 3380
    st["gpus"][1]["residual_mib"] = 15359 - 11964 - 3380
    assert _body(nvidia_smi.table(st, holders=BUSY_2X)) == _body(fx("2xh200-busy.txt"))
    st1 = _fixture_state(tmp_path / "b", 1, [101], [40])
    st1["gpus"][0]["residual_mib"] = 19601 - 19592
    busy = [{"pid": 450, "gpu": 0, "mib": 19592, "name": "python3"}]
    assert _body(nvidia_smi.table(st1, holders=busy)) == _body(fx("h200-busy.txt"))
    first = nvidia_smi.table(st1).splitlines()[0]
    assert len(first) == 31 and first.endswith("       ")


def test_sim_queries_match_fixtures_byte_for_byte(tmp_path):
    from eaglebot.sim import nvidia_smi

    st = _fixture_state(tmp_path, 2, [113, 114], [32, 33])
    st["gpus"][0]["residual_mib"] = 11543 - 8148 - 3380
    st["gpus"][1]["residual_mib"] = 15359 - 11964 - 3380
    order = [BUSY_2X[1], BUSY_2X[0], BUSY_2X[3], BUSY_2X[2]]     # nvidia-smi's own order in the capture
    q = nvidia_smi.query
    assert q("gpu", ["index", "memory.used"], {"csv", "noheader", "nounits"}, st, holders=order) == \
        fx("2xh200-query-memory-busy-nounits.csv")
    assert q("gpu", ["index", "memory.used"], {"csv", "noheader"}, st, holders=order) == \
        fx("2xh200-query-memory-busy.csv")
    assert q("gpu", ["index", "uuid"], {"csv", "noheader"}, st, holders=order) == fx("2xh200-query-gpu-uuid.csv")
    assert q("apps", ["pid", "process_name", "used_memory", "gpu_uuid"], {"csv", "noheader", "nounits"}, st,
             holders=order) == fx("2xh200-query-compute-apps-busy-nounits.csv")


def test_sim_single_gpu_queries_match_fixtures(tmp_path):
    from eaglebot.sim import nvidia_smi

    st = _fixture_state(tmp_path, 1, [108.32], [39])
    q = nvidia_smi.query
    full = ["index", "uuid", "name", "memory.total", "memory.used", "memory.free", "utilization.gpu",
            "temperature.gpu", "power.draw"]
    assert q("gpu", full, {"csv"}, st, holders=[]) == fx("h200-query-gpu-full.csv")
    assert q("gpu", ["index", "memory.used"], {"csv", "noheader"}, st, holders=[]) == fx("h200-query-memory-idle.csv")
    assert q("apps", ["pid", "process_name", "used_memory", "gpu_uuid"], {"csv", "noheader"}, st,
             holders=[]) == fx("h200-query-compute-apps-idle.csv")
    busy = [{"pid": 450, "gpu": 0, "mib": 19592, "name": "python3"}]
    assert q("apps", ["pid", "process_name", "used_memory", "gpu_uuid"], {"csv", "noheader"}, st,
             holders=busy) == fx("h200-query-compute-apps-busy.csv")
    assert q("apps", ["pid", "process_name", "used_memory"], {"csv", "noheader", "nounits"}, st,
             holders=busy) == fx("h200-query-compute-apps-busy-nounits.csv")


def test_sim_fuser_matches_fixture_layout(tmp_path):
    from eaglebot.sim import fuser

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        gpu_state.init_state(tmp_path, 1)
        gpu_state.add_holder(tmp_path, sleeper.pid, 0, 100, hidden=True)
        text = fuser.render(gpu_state.load_state(tmp_path))
        expected = fx("h200-fuser-busy.txt").replace("root        450 F...m python3",
                                                     f"root{sleeper.pid:>11} F...m sleep")
        if os.geteuid() == 0:
            assert text == expected
        assert [(e.pid, e.gpu) for e in nvsmi.parse_fuser(text)] == [(sleeper.pid, 0), (sleeper.pid, None),
                                                                      (sleeper.pid, None)]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_sim_lists_a_holder_only_while_its_real_process_lives(tmp_path):
    gpu_state.init_state(tmp_path, 2, residual_mib=[0, 4])
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r = _sim(tmp_path, "--sim-add-holder", str(sleeper.pid), "1", "2048")
        assert r.returncode == 0, r.stderr
        assert _sim(tmp_path, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").stdout == "0, 0\n1, 2052\n"
        apps = _sim(tmp_path, "--query-compute-apps=pid,used_memory", "--format=csv,noheader").stdout
        assert apps == f"{sleeper.pid}, 2048 MiB\n"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _sim(tmp_path, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").stdout == "0, 0\n1, 4\n"
    assert _sim(tmp_path, "--query-compute-apps=pid,used_memory", "--format=csv,noheader").stdout == ""


def test_sim_exit_codes_and_unknown_field(tmp_path):
    gpu_state.init_state(tmp_path, 1, exit_code=9)
    r = _sim(tmp_path, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout
    gpu_state.set_exit_code(tmp_path, None)
    r = _sim(tmp_path, "--query-gpu=index,bogus", "--format=csv")
    assert r.returncode == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout
    r = _sim(tmp_path)
    assert r.returncode == 0 and "SIMULATED" in r.stderr and "No running processes found" in r.stdout
