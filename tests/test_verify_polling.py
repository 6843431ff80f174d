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
