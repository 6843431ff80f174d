"""gpu.health: the parsers on the real 2x H200 captures and on faulty variants derived from them,
the verdicts, and the skill through the engine on the SIMULATED nvidia-smi with injected faults."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.history.health import diff_health
from eaglebot.history.attribution import attribution
from eaglebot.history.fingerprint import apply_steps, empty_state
from eaglebot.sim import gpu_state
from eaglebot.facts.gpu import dcgm
from eaglebot.facts.gpu import health as hf
from support.gpu_helpers import playbook, sim_host

CAPTURES = Path(__file__).parent / "fixtures" / "nvidia-smi" / "health"


def capture(name: str) -> tuple[str, str]:
    """(command line, output) of a capture: the `$ ...` first line and `# exit N` last line removed."""
    lines = (CAPTURES / name).read_text().split("\n")
    assert lines[0].startswith("$ ") and lines[-2].startswith("# exit"), name
    return lines[0][2:], "\n".join(lines[1:-2]) + "\n"


def queried_fields(cmd: str) -> list[str]:
    return cmd.split("--query-gpu=")[1].split()[0].split(",")


def healthy() -> tuple[list[str], str]:
    cmd, out = capture("2xh200-query-health-nounits.csv.txt")
    return queried_fields(cmd), out


def variant(out: str, gpu: int, col: int, value: str, fields_n: int) -> str:
    """The capture with one column of one GPU's row replaced (a fault in the real format)."""
    rows = out.strip().split("\n")
    cells = rows[gpu].split(", ")
    assert len(cells) == fields_n
    cells[col] = value
    rows[gpu] = ", ".join(cells)
    return "\n".join(rows) + "\n"


T = hf.Thresholds()


# -- parsers on the real captures ----------------------------------------------------------------

def test_every_field_of_the_real_health_query_parses_with_units_and_the_deprecated_alias():
    _, out = capture("2xh200-query-health.csv.txt")
    rows = hf.parse_health(out)
    assert sorted(rows) == [0, 1]
    g0 = rows[0]
    assert g0["uuid"] == "GPU-ffadc143-7a89-09b5-b087-d16c41bf9428" and g0["pci.bus_id"] == "00000000:00:06.0"
    assert g0["persistence_mode"] == "Enabled" and g0["pstate"] == "P0"
    assert g0["clocks_event_reasons.active"] == 0x1
    assert g0["ecc.errors.uncorrected.volatile.total"] == 0 and g0["ecc.errors.corrected.volatile.total"] == 0
    assert g0["retired_pages.pending"] is None          # [N/A] on H200
    assert g0["remapped_rows.pending"] is False and g0["remapped_rows.failure"] is False
    assert g0["temperature.gpu"] == 32 and g0["power.draw"] == 81.49
    assert g0["clocks.sm"] == 345 and g0["clocks.max.sm"] == 1980
    assert (g0["pcie.link.gen.current"], g0["pcie.link.gen.max"]) == (5, 5)
    assert (g0["pcie.link.width.current"], g0["pcie.link.width.max"]) == (16, 16)
    assert rows[1]["temperature.gpu"] == 35


def test_nounits_capture_parses_with_the_queried_fields_and_the_idle_gpus_are_ok():
    fields, out = healthy()
    rows = hf.parse_health(out, fields)
    assert set(fields) <= set(rows[0])
    for g in rows.values():
        v = hf.evaluate(g, T)
        assert (v.verdict, v.reasons) == ("ok", [])
        assert "idle (low SM clock is normal)" in v.notes


def test_a_sw_power_cap_under_full_load_is_normal():
    cmd, out = capture("2xh200-busy-query-health-nounits.csv.txt")
    rows = hf.parse_health(out, queried_fields(cmd))
    assert rows[0]["clocks_event_reasons.active"] == 0x4 and rows[0]["utilization.gpu"] == 100
    assert rows[1]["power.draw"] == 692.29 and rows[1]["clocks.sm"] == 1455
    assert [hf.evaluate(g, T).verdict for g in rows.values()] == ["ok", "ok"]
    assert hf.decode_event_reasons(0x4) == ["SW power cap"]


def test_per_reason_columns_print_active_or_not_active():
    _, out = capture("2xh200-busy-query-event-reasons.csv.txt")
    rows = hf.parse_health(out)
    assert rows[0]["clocks_event_reasons.sw_power_cap"] == "Active"
    assert rows[0]["clocks_event_reasons.hw_thermal_slowdown"] == "Not Active"
    assert rows[1]["power.limit"] == 700.0 and rows[1]["temperature.memory"] == 50


def test_unknown_field_message_names_the_field():
    _, out = capture("2xh200-bad-field.txt")
    assert hf.bad_field(out) == "not.a.field"
    assert hf.bad_field("0, 1\n") is None


def test_nvlink_status_and_error_counters_of_the_real_host():
    _, status = capture("2xh200-nvlink-status.txt")
    links = hf.parse_nvlink_status(status)
    assert sorted(links) == [0, 1] and all(len(v) == 18 for v in links.values())
    assert set(links[1].values()) == {26.562}
    _, errors = capture("2xh200-nvlink-errors.txt")
    assert hf.parse_nvlink_errors(errors) == {0: {"replay": 0, "recovery": 0, "crc": 0},
                                             1: {"replay": 0, "recovery": 0, "crc": 0}}


def test_the_real_kernel_log_has_nvrm_lines_but_no_xid():
    _, out = capture("2xh200-dmesg-xid.txt")
    assert "NVRM" in out and hf.parse_xids(out) == []


# -- faulty variants derived from the captures ------------------------------------------------------

@pytest.mark.parametrize("field,value,verdict,reason", [
    ("clocks_event_reasons.active", "0x0000000000000040", "fail", "HW thermal slowdown"),
    ("clocks_event_reasons.active", "0x0000000000000008", "fail", "HW slowdown"),
    ("clocks_event_reasons.active", "0x0000000000000080", "fail", "HW power brake slowdown"),
    ("clocks_event_reasons.active", "0x0000000000000020", "warn", "SW thermal slowdown"),
    ("ecc.errors.uncorrected.volatile.total", "3", "fail", "3 uncorrected ECC errors"),
    ("ecc.errors.corrected.volatile.total", "1500", "warn", "1500 corrected ECC errors (>= 1000)"),
    ("remapped_rows.pending", "Yes", "warn", "row remap pending (reset the GPU)"),
    ("remapped_rows.failure", "Yes", "fail", "row remapping failed"),
    ("temperature.gpu", "88", "warn", "temperature 88 C (>= 85 C)"),
    ("temperature.gpu", "97", "fail", "temperature 97 C (>= 95 C)"),
    ("pcie.link.width.current", "8", "fail", "PCIe link x8 of x16"),
    ("persistence_mode", "Disabled", "warn", "persistence mode off"),
])
def test_a_fault_in_the_real_format_gets_its_verdict_and_reason(field, value, verdict, reason):
    fields, out = healthy()
    rows = hf.parse_health(variant(out, 1, fields.index(field), value, len(fields)), fields)
    v = hf.evaluate(rows[1], T)
    assert (v.verdict, v.reasons) == (verdict, [reason])
    assert hf.evaluate(rows[0], T).verdict == "ok"


def test_pcie_gen_below_max_is_a_note_at_idle_and_a_warning_under_load():
    cmd, busy = capture("2xh200-busy-query-health-nounits.csv.txt")
    fields = queried_fields(cmd)
    rows = hf.parse_health(variant(busy, 0, fields.index("pcie.link.gen.current"), "3", len(fields)), fields)
    assert hf.evaluate(rows[0], T).reasons == ["PCIe gen 3 of 5 under load"]
    fields, idle = healthy()
    rows = hf.parse_health(variant(idle, 0, fields.index("pcie.link.gen.current"), "1", len(fields)), fields)
    v = hf.evaluate(rows[0], T)
    assert v.verdict == "ok" and "PCIe gen 1 of 5 at idle" in v.notes


def test_thresholds_come_from_the_caller():
    fields, out = healthy()
    rows = hf.parse_health(variant(out, 0, fields.index("pcie.link.width.current"), "8", len(fields)), fields)
    assert hf.evaluate(rows[0], hf.Thresholds(pcie_width_below_max="warn")).verdict == "warn"
    assert hf.evaluate(rows[1], hf.Thresholds(temp_warn_c=30)).reasons == ["temperature 35 C (>= 30 C)"]


def test_an_inactive_nvlink_and_crc_errors_are_named():
    _, status = capture("2xh200-nvlink-status.txt")
    broken = status.replace("GPU 1:", "GPU 1:", 1)
    head, _, tail = broken.partition("GPU 1:")
    tail = tail.replace("Link 3: 26.562 GB/s", "Link 3: <inactive>", 1)
    links = hf.parse_nvlink_status(head + "GPU 1:" + tail)
    assert links[1][3] is None and links[0][3] == 26.562
    _, errors = capture("2xh200-nvlink-errors.txt")
    head, _, tail = errors.partition("GPU 1:")
    errs = hf.parse_nvlink_errors(head + "GPU 1:" + tail.replace("Link 2: CRC Errors: 0", "Link 2: CRC Errors: 5", 1))
    assert errs[1] == {"replay": 0, "recovery": 0, "crc": 5}
    fields, out = healthy()
    g1 = hf.parse_health(out, fields)[1]
    v = hf.evaluate(g1, T, nvlink=links[1], nvlink_errors=errs[1])
    assert v.verdict == "fail" and v.reasons == ["NVLink 3 inactive", "NVLink errors: crc 5"]
    assert hf.evaluate(g1, T, nvlink_errors=errs[1]).verdict == "warn"


XID_79 = "[ 8812.114151] NVRM: Xid (PCI:0000:00:07): 79, pid=2211, name=python3, GPU has fallen off the bus."


def test_an_xid_line_is_named_and_mapped_to_its_gpu_by_bus_id():
    _, log = capture("2xh200-dmesg-xid.txt")
    xids = hf.parse_xids(log + XID_79 + "\n")
    assert [(x.code, x.meaning, x.severity) for x in xids] == [(79, "GPU has fallen off the bus", "fail")]
    fields, out = healthy()
    rows = hf.parse_health(out, fields)
    bus = {i: r["pci.bus_id"] for i, r in rows.items()}
    assert hf.xid_gpu(xids[0], bus) == 1
    v = hf.evaluate(rows[1], T, xids=xids)
    assert (v.verdict, v.reasons) == ("fail", ["Xid 79 (GPU has fallen off the bus)"])


def test_every_common_xid_has_a_one_line_meaning():
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95):
        meaning, severity = hf.XID_MEANINGS[code]
        assert meaning and "\n" not in meaning and severity in ("warn", "fail")


def test_event_reason_bits_decode_and_idle_alone_is_not_a_fault():
    assert hf.decode_event_reasons(0x1) == ["idle"]
    assert hf.decode_event_reasons(0x45) == ["idle", "SW power cap", "HW thermal slowdown"]
    assert hf.decode_event_reasons(0x1000) == ["unknown reason bits 0x1000"]


DCGM = Path(__file__).parent / "fixtures" / "dcgm"


@pytest.mark.parametrize("name,status,why", [
    ("diag-r1-pass.json", "ok", "dcgmi diag -r 1 passed (3 tests)"),
    ("diag-r1-fail-pcie.json", "fail", "dcgmi diag failed: pcie GPU 1: Fail: GPU 1 PCIe replay count of 1203"),
    ("diag-r1-warn.json", "warn", "dcgmi diag warned: memory GPU 1: Warn: Clocks are being throttled"),
    ("diag-runtime-error.json", "warn", "could not read dcgmi's result: Error connecting to the host engine"),
    ("diag-no-results.json", "warn", "could not read dcgmi's result: zero test results"),
])
def test_dcgm_json_verdicts_on_the_documented_format(name, status, why):
    text = (DCGM / name).read_text()
    r = dcgm.parse_diag_json(text, 0, 1)
    assert r.status == status and r.why.startswith(why), r.why


def test_dcgm_fixtures_hold_the_schemas_required_keys():
    """NVIDIA/DCGM testing/python3/dcgm_diag_schema.json: the keys it marks required."""
    for f in DCGM.glob("*.json"):
        doc = json.loads(f.read_text())
        diag = doc["DCGM Diagnostic"]
        for cat in diag.get("test_categories", []):
            assert {"category", "tests"} <= set(cat)
            for t in cat["tests"]:
                assert {"name", "results", "test_summary"} <= set(t) and "status" in t["test_summary"]
                for r in t["results"]:
                    assert {"entity_group", "entity_group_id", "entity_id", "status"} <= set(r)
                    for w in r.get("warnings", []):
                        assert {"error_category", "error_id", "error_severity", "warning"} <= set(w)
        assert "version" in doc["metadata"]


@pytest.mark.parametrize("text,exit_status", [("", 0), ("garbage", 0), ("[1, 2]", 0), ('{"x": 1}', 0),
                                              ('{"DCGM Diagnostic": {"test_categories": [{"category": "D", '
                                               '"tests": [{"name": "pcie", "results": [{"status": "Maybe"}]}]}]}}', 0),
                                              ((DCGM / "diag-r1-pass.json").read_text(), 226)])
def test_dcgm_garbage_an_unknown_status_or_a_failing_exit_warns_never_ok(text, exit_status):
    r = dcgm.parse_diag_json(text, exit_status, 1)
    assert r.status == "warn" and r.why.startswith("could not read dcgmi's result: ")


# -- history ----------------------------------------------------------------------------------------

def test_health_goes_into_the_fingerprint_and_attribution_names_the_change():
    ok = {"0": {"verdict": "ok", "reasons": []}, "1": {"verdict": "ok", "reasons": []}}
    hot = {"0": {"verdict": "ok", "reasons": []}, "1": {"verdict": "fail", "reasons": ["HW thermal slowdown"]}}
    assert empty_state()["health"] == {}
    good = apply_steps(empty_state(), [{"skill": "gpu.health", "data": json.dumps({"health": ok})}], [])
    now = apply_steps(good, [{"skill": "gpu.health", "data": json.dumps({"health": hot})}], [])
    assert good["health"] == ok and now["health"] == hot
    assert diff_health(ok, hot) == ["GPU 1: HW thermal slowdown (was ok)"]
    assert diff_health(hot, ok) == ["GPU 1: ok again (was fail: HW thermal slowdown)"]
    assert diff_health(ok, ok) == [] and diff_health(ok, None) == []
    assert attribution(good, now, [], []) == ["health GPU 1: HW thermal slowdown (was ok)"]


# -- the skill on the simulated nvidia-smi -----------------------------------------------------------

def one(with_: dict | None = None) -> str:
    return json.dumps({"name": "h", "steps": [{"skill": "gpu.health", "with": with_ or {}}]})


async def run_health(services, tmp_path, setup=None, with_=None, pb: str | None = None, gpus: int = 2, **vars_):
    host, state, bin_dir = sim_host(tmp_path, gpus, dmesg=str(tmp_path / "bin" / "dmesg"), **vars_)
    if setup:
        setup(state)
    svc = await services({"gpu": host}, state_dir=str(tmp_path / "botstate"))
    out = await svc.engine.run(RunRequest(playbook=pb or playbook(one(with_), "h"), hosts=["gpu"]))
    rows = svc.store.sync.steps(out.run_id)
    return out, rows, state


async def test_healthy_simulated_gpus_are_ok_with_every_field_and_the_skipped_dcgm_said(services, tmp_path):
    out, rows, _ = await run_health(services, tmp_path)
    assert out.status == "succeeded" and rows[0]["status"] == "ok", rows[0]["summary"]
    assert rows[0]["summary"] == "2 GPUs ok on gpu"
    data = json.loads(rows[0]["data"])
    assert data["health"] == {"0": {"verdict": "ok", "reasons": []}, "1": {"verdict": "ok", "reasons": []}}
    assert set(data["gpus"]["0"]) == set(hf.HEALTH_FIELDS) and None not in data["gpus"]["0"].values()
    assert data["nvlink"]["1"] == {str(k): 26.562 for k in range(18)}
    assert data["dropped_fields"] == [] and data["xids"] == []
    assert data["dcgm"]["status"] == "skipped" and "dcgmi is not installed" in data["dcgm"]["why"]
    assert "DCGM diagnostics skipped" in rows[0]["output"]


async def test_a_hw_thermal_slowdown_fails_the_step_with_the_gpu_and_reason(services, tmp_path):
    out, rows, _ = await run_health(services, tmp_path,
                                    setup=lambda s: gpu_state.set_health(s, 1, event_reasons=0x40, sm_clock=1005))
    assert out.status == "failed" and rows[0]["status"] == "failed"
    assert rows[0]["summary"] == "GPU health fail on gpu: GPU 1: HW thermal slowdown"
    data = json.loads(rows[0]["data"])
    assert data["health"]["1"] == {"verdict": "fail", "reasons": ["HW thermal slowdown"]}
    assert data["health"]["0"]["verdict"] == "ok" and data["gpus"]["1"]["clocks.sm"] == 1005


async def test_warnings_keep_the_step_ok_unless_fail_on_warn(services, tmp_path):
    def hot(s):
        gpu_state.set_health(s, 0, temp_c=88, remap_pending=True)
    out, rows, _ = await run_health(services, tmp_path, setup=hot)
    assert rows[0]["status"] == "ok" and rows[0]["summary"] == "2 GPUs warn on gpu (2 warnings)"
    assert sorted(out.warnings) == ["gpu: GPU 0: row remap pending (reset the GPU)",
                                    "gpu: GPU 0: temperature 88 C (>= 85 C)"]
    out2, rows2, _ = await run_health(services, tmp_path / "b", setup=hot, with_={"fail_on_warn": True})
    assert rows2[0]["status"] == "failed" and "GPU health warn on gpu: GPU 0:" in rows2[0]["summary"]


async def test_fields_an_older_driver_lacks_are_dropped_not_fatal(services, tmp_path):
    out, rows, _ = await run_health(
        services, tmp_path, setup=lambda s: gpu_state.set_unknown_fields(s, ["power.limit", "remapped_rows.failure"]))
    assert rows[0]["status"] == "ok", rows[0]["summary"]
    data = json.loads(rows[0]["data"])
    assert data["dropped_fields"] == ["remapped_rows.failure", "power.limit"]   # in the order asked
    assert "power.limit" not in data["gpus"]["0"] and data["gpus"]["0"]["clocks.max.sm"] == 1980
    assert "this driver does not know remapped_rows.failure, power.limit" in rows[0]["output"]


async def test_an_xid_in_the_kernel_log_and_a_down_nvlink_fail_their_gpu(services, tmp_path):
    def faults(s):
        gpu_state.set_kernel_log(s, [*gpu_state.KERNEL_LOG, XID_79.replace("00:07", "00:06")])
        gpu_state.set_health(s, 1, nvlink_inactive=[5, 6], pcie_width=8)
    out, rows, _ = await run_health(services, tmp_path, setup=faults)
    data = json.loads(rows[0]["data"])
    assert data["health"]["0"] == {"verdict": "fail", "reasons": ["Xid 79 (GPU has fallen off the bus)"]}
    assert data["health"]["1"] == {"verdict": "fail", "reasons": ["PCIe link x8 of x16", "NVLink 5, 6 inactive"]}
    assert data["xids"][0]["code"] == 79


async def test_an_unreadable_kernel_log_is_said_not_fatal(services, tmp_path):
    bad = tmp_path / "nodmesg"
    bad.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    os.chmod(bad, 0o755)
    host, state, _ = sim_host(tmp_path, 1, dmesg=str(bad))
    svc = await services({"gpu": host}, state_dir=str(tmp_path / "botstate"))
    out = await svc.engine.run(RunRequest(playbook=playbook(one()), hosts=["gpu"]))
    row = svc.store.sync.steps(out.run_id)[0]
    assert row["status"] == "ok"
    assert ("kernel log not readable, Xids not checked: dmesg: read kernel buffer failed: Operation not permitted"
            in row["output"])


def _fake_dcgmi(tmp_path, fixture: str | None, exit_status: int = 0) -> str:
    """A dcgmi on the host's PATH printing a documented-format JSON fixture for `diag -r 1 -j`."""
    fake = tmp_path / "dcgmi"
    body = f"cat {DCGM / fixture}" if fixture else "echo 'Error: unable to establish a connection'"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'diag -r 1 -j' ] || exit 9\n{body}\nexit {exit_status}\n")
    os.chmod(fake, 0o755)
    return str(fake)


async def test_dcgmi_diag_json_runs_where_installed_and_its_failure_fails(services, tmp_path):
    out, rows, _ = await run_health(services, tmp_path, gpus=1,
                                    dcgmi=_fake_dcgmi(tmp_path, "diag-r1-fail-pcie.json", 226))
    data = json.loads(rows[0]["data"])
    assert data["dcgm"]["status"] == "fail" and data["dcgm"]["tests"] == {
        "software": "pass", "pcie": "fail", "memory": "pass"}
    assert rows[0]["status"] == "failed" and "dcgmi diag failed: pcie GPU 1" in rows[0]["summary"]


@pytest.mark.parametrize("fixture,exit_status", [("diag-r1-pass.json", 0), ("diag-no-results.json", 0), (None, 1)])
async def test_dcgmi_passing_is_ok_and_nothing_readable_is_a_warning(services, tmp_path, fixture, exit_status):
    out, rows, _ = await run_health(services, tmp_path, gpus=1, dcgmi=_fake_dcgmi(tmp_path, fixture, exit_status))
    data = json.loads(rows[0]["data"])
    assert rows[0]["status"] == "ok"
    if fixture == "diag-r1-pass.json":
        assert data["dcgm"]["status"] == "ok" and data["health"]["0"]["verdict"] == "ok"
    else:
        assert data["dcgm"]["status"] == "warn" and "could not read dcgmi's result" in data["dcgm"]["why"]
        assert data["health"]["0"]["verdict"] == "warn"


async def test_a_fail_verdict_before_the_nightly_bench_fails_the_run_before_any_number(services, tmp_path):
    out, rows, _ = await run_health(services, tmp_path, pb="bench",
                                    setup=lambda s: gpu_state.set_health(s, 0, ecc_uncorrected=2))
    assert out.status == "failed"
    assert rows[0]["skill"] == "gpu.health" and rows[0]["status"] == "failed"
    assert "GPU 0: 2 uncorrected ECC errors" in rows[0]["summary"]
    assert all(r["status"] != "ok" for r in rows[1:]) and out.metrics == []
