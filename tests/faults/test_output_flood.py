"""A step that floods its output (issue 17: 150 MB cost 1.45 GB of bot memory and +298 MB of
audit DB): ~20 MB through the real sshd. The bot's memory and the DB stay
bounded, and the whole output comes back byte for byte (`tests/bench/bench_output.py` does
the 150 MB of the issue)."""
from __future__ import annotations

import pytest

from bench.bench_output import measure_flood


@pytest.mark.e2e  # 20 MB through sshd: a soak
def test_a_20_mb_step_over_ssh_grows_the_db_by_at_most_2_mib_and_comes_back_byte_for_byte(
        sshd, tmp_path):
    f = measure_flood(sshd, tmp_path, 20_000_000)
    assert f.exact, "eagle show --output did not give back what the step printed"
    assert f.db_growth <= 2 * 1024 * 1024, f.table()
    assert f.rss_growth_mib <= 64, f.table()
