"""gpu.verify polls fast while a killed holder's memory is being freed, then backs off."""
from __future__ import annotations

from eaglebot.skills.gpu_verify import Params, _interval


def test_verify_polls_every_50ms_in_the_first_second_then_backs_off_to_the_cap():
    p = Params()
    assert p.poll_s == 0.05
    assert [_interval(p, t, 0) for t in (0.0, 0.5, 0.99)] == [0.05, 0.05, 0.05]
    later = [_interval(p, 1.0 + 0.1 * n, n + 1) for n in range(12)]
    assert later[0] == 0.05 * 1.5 and all(b >= a for a, b in zip(later, later[1:]))
    assert later[-1] == p.poll_max_s == 1.0


def test_a_slow_poll_setting_is_never_sped_up():
    p = Params(poll_s=2.0, poll_max_s=1.0)
    assert _interval(p, 0.1, 1) == 2.0 and _interval(p, 5.0, 3) == 2.0


def test_the_watch_pipeline_stops_at_the_first_free_round_of_the_simulated_nvidia_smi(tmp_path):
    import subprocess

    from eaglebot.sim import gpu_state, install_sim_bin
    from eaglebot.skills.facts import nvsmi_watch

    state = tmp_path / "state"
    smi = install_sim_bin(tmp_path / "bin", state)["nvidia_smi"]
    gpu_state.init_state(state, 2, residual_mib=[3, 5000])
    held = subprocess.run(["sh", "-c", nvsmi_watch.watch_command(smi, [0, 1], 64, 0.6)], capture_output=True,
                          text=True, timeout=60).stdout
    freed, last, rounds = nvsmi_watch.parse_watch(held, [0, 1])
    assert not freed and last == {0: 3, 1: 5000} and rounds >= 1
    gpu_state.set_residual(state, 1, 0)
    out = subprocess.run(["sh", "-c", nvsmi_watch.watch_command(smi, [0, 1], 64, 30)], capture_output=True,
                         text=True, timeout=60).stdout
    assert nvsmi_watch.parse_watch(out, [0, 1]) == (True, {0: 3, 1: 0}, 1)


def test_parse_watch_keeps_the_last_complete_round():
    from eaglebot.skills.facts.nvsmi_watch import parse_watch

    assert parse_watch("0, 900\n1, 800\n0, 10\n1, 20\n0, 5\n", [0, 1]) == (False, {0: 10, 1: 20}, 2)
    assert parse_watch("0, 10\n1, 20\nEAGLE-FREE\n", [0, 1]) == (True, {0: 10, 1: 20}, 1)
    assert parse_watch("Invalid combination of input arguments.\n", [0]) == (False, {}, 0)
