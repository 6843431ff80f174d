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


def run_watch(cmd: str, gpus: list[int], max_mib: int, *, kill_when_free: bool = True,
              kill_after_rounds: int | None = None):
    """Run a watch command the way gpu.verify does: read rows as they stream, stop the watcher when
    free (or, for a watch that is not to end free, once it has read `kill_after_rounds` rounds)."""
    import os
    import signal
    import subprocess

    from eaglebot.facts.gpu import nvsmi_watch

    w = nvsmi_watch.Watch(gpus, max_mib)
    p = subprocess.Popen(["sh", "-c", cmd], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in p.stdout:
            if w.feed(line) and w.pid and kill_when_free:
                os.kill(w.pid, signal.SIGTERM)
                kill_when_free = False
            elif kill_after_rounds is not None and w.pid and w.rounds >= kill_after_rounds:
                os.kill(w.pid, signal.SIGTERM)
                kill_after_rounds = None
        assert p.wait(60) is not None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return w


def test_the_watch_stops_at_the_first_free_round_of_the_simulated_nvidia_smi(tmp_path):
    from eaglebot.sim import gpu_state, install_sim_bin
    from eaglebot.facts.gpu import nvsmi_watch

    state = tmp_path / "state"
    smi = install_sim_bin(tmp_path / "bin", state)["nvidia_smi"]
    gpu_state.init_state(state, 2, residual_mib=[3, 5000])
    # Still held: ended by the test after its first full round, however long a busy machine takes to
    # read it (a 0.6 s window was a race: a loaded machine ended it with no round read).
    held = run_watch(nvsmi_watch.watch_command(smi, [0, 1], 600), [0, 1], 64, kill_after_rounds=1)
    assert not held.freed and held.last == {0: 3, 1: 5000} and held.rounds >= 1 and held.pid
    gpu_state.set_residual(state, 1, 0)
    # A window of 600 s: only the kill (of the pid the command printed) ends it before the 60 s guard.
    free = run_watch(nvsmi_watch.watch_command(smi, [0, 1], 600), [0, 1], 64)
    assert free.freed and free.last == {0: 3, 1: 0} and free.rounds == 1


def test_parse_watch_keeps_the_last_complete_round():
    from eaglebot.facts.gpu.nvsmi_watch import Watch

    def parse_watch(text: str, gpus: list[int], max_used_mib: int) -> Watch:
        w = Watch(gpus, max_used_mib)
        for line in text.splitlines():
            w.feed(line)
        return w

    w = parse_watch("EAGLE-WATCH-PID 42\n0, 900\n1, 800\n0, 100\n1, 20\n0, 5\n", [0, 1], 64)
    assert (w.pid, w.freed, w.last, w.rounds) == (42, False, {0: 100, 1: 20}, 2)
    w = parse_watch("0, 10\n1, 20\n", [0, 1], 64)
    assert (w.freed, w.last, w.rounds) == (True, {0: 10, 1: 20}, 1)
    w = parse_watch("Invalid combination of input arguments.\n", [0], 64)
    assert (w.freed, w.last, w.rounds) == (False, {}, 0)
