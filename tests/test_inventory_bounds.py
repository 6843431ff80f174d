"""The inventory in bounded time and memory (issue 35 item 6 and its LOW items): a range is
counted before it is listed, groups resolve without recursion to a depth limit, selection and
`-H` parsing are linear. The numbers are in tests/bench/bench_inventory.py; these tests assert
behaviour: the sentence, and bounds that count what was done (allocations, comparisons), not
how long it took, so they hold on a busy machine."""
from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml
from support.helpers import eagle, write_yaml

from eaglebot import inventory
from eaglebot.config import Settings, load_settings
from eaglebot.errors import UsageError

HUGE = "n-[0:99999999]"
REFUSAL = f"{HUGE} names 100000000 hosts (at most 100000)"


def _peak_mib(fn) -> tuple[float, str]:
    """The memory `fn` allocated at its peak (tracemalloc: what Python allocated, whatever the
    machine's load), and the sentence it refused with."""
    tracemalloc.start()
    try:
        fn()
        said = ""
    except UsageError as e:
        said = str(e)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak / 2**20, said


@pytest.mark.parametrize("where,data", [
    ("hosts", {"hosts": {HUGE: {}}}),
    ("a group", {"hosts": {"n-1": {}}, "groups": {"g": ["n-1", HUGE]}}),
    ("health_watch.hosts", {"hosts": {"n-1": {}}, "health_watch": {"hosts": [HUGE]}}),
    ("a schedule's hosts", {"hosts": {"n-1": {}}, "schedules": [
        {"name": "s", "playbook": "hello", "hosts": [HUGE], "every": "1h"}]}),
])
def test_a_huge_range_is_refused_before_any_list_is_built(tmp_path, where, data):
    cfg = write_yaml(tmp_path / "eagle.yaml", data)
    if where == "a schedule's hosts":   # schedules are checked by lint and doctor, not by loading
        s = load_settings(cfg)
        mib, said = _peak_mib(lambda: s.resolve_hosts(s.schedules[0].hosts))
    else:
        mib, said = _peak_mib(lambda: load_settings(cfg))
    assert REFUSAL in said, said
    # 100,000,000 names listed would be gigabytes; counting them is a few numbers
    assert mib < 50, f"{mib:.1f} MiB allocated to refuse {HUGE} in {where}"


def test_a_huge_range_in_h_is_one_sentence_and_exit_2(tmp_path):
    mib, said = _peak_mib(lambda: Settings().resolve_hosts([HUGE]))
    assert said == REFUSAL and mib < 50
    res = eagle("run", "hello", "-H", HUGE, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr == f"eagle: {REFUSAL}\n"


def test_ranges_together_count_toward_the_limit_and_long_bounds_are_named(tmp_path):
    with pytest.raises(UsageError, match=r"hosts: the ranges up to b-\[1:60000\] name 120000 hosts in all "
                                         r"\(at most 100000\)"):
        Settings.model_validate({"hosts": {"a-[1:60000]": {}, "b-[1:60000]": {}}})
    with pytest.raises(ValueError, match=r"has a bound of more than 12 digits"):
        inventory.count("n-[1:" + "9" * 5000 + "]")
    assert inventory.count("gpu-[0001:0128]-[a:d]") == 512


def test_a_1500_deep_group_chain_is_one_sentence_in_any_order(tmp_path):
    chain = {f"g{i}": [f"g{i + 1}"] for i in range(1500)} | {"g1500": ["h"]}
    for groups in (chain, dict(reversed(list(chain.items())))):   # resolved first from the root or the leaf
        cfg = write_yaml(tmp_path / "eagle.yaml", {"hosts": {"h": {}}, "groups": groups})
        with pytest.raises(UsageError) as e:
            load_settings(cfg)
        msg = str(e.value)
        assert msg.startswith(f"{cfg}:") and "groups" in msg and " deep" in msg, msg
        assert str(inventory.MAX_GROUP_DEPTH) in msg and "\n" not in msg and len(msg) < 300, msg
    res = eagle("hosts", config=cfg)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    # as deep as the limit is fine, and keeps the order
    ok = {f"g{i}": [f"g{i + 1}", f"h{i}"] for i in range(inventory.MAX_GROUP_DEPTH - 1)}
    ok[f"g{inventory.MAX_GROUP_DEPTH - 1}"] = ["h"]
    hosts = {f"h{i}": {} for i in range(inventory.MAX_GROUP_DEPTH - 1)} | {"h": {}}
    s = Settings.model_validate({"hosts": hosts, "groups": ok})
    assert s.groups["g0"][0] == "h" and s.groups["g0"][-1] == "h0" and len(s.groups["g0"]) == len(hosts)


async def test_a_deep_group_chain_on_sighup_is_a_refused_reload_not_a_traceback(services, tmp_path):
    from eaglebot.frontends.service.reload import Reloader

    svc = await services({"h": {"transport": "local"}})
    cfg = tmp_path / "eagle.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["groups"] = {f"g{i}": [f"g{i + 1}"] for i in range(1500)} | {"g1500": ["h"]}
    cfg.write_text(yaml.safe_dump(data))
    done, msg = await Reloader(svc, config=cfg).reload("SIGHUP")
    assert not done and msg.startswith("reload refused, the running configuration stays: ") and "deep" in msg, msg
    data["groups"] = {"g": ["n-1", HUGE]}
    cfg.write_text(yaml.safe_dump(data))
    done, msg = await Reloader(svc, config=cfg).reload("SIGHUP")
    assert not done and REFUSAL in msg, msg


class Counted(str):
    """A host name that counts how often it is compared for equality: a list membership test
    compares against every element (quadratic selection); a dict or set lookup hardly ever."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_selection_and_groups_are_linear_in_the_hosts():
    n = 3000
    names = [Counted(f"gpu-{i:05d}") for i in range(n)]
    Counted.compared = 0
    # the inventory as a list, as a caller may pass it: membership in it must not be a scan
    groups = inventory.expand_groups({"half": [Counted(x) for x in names[: n // 2]], "all2": ["half", *names]},
                                     list(names))
    assert len(groups["all2"]) == n
    after_groups = Counted.compared
    chosen = inventory.select(["all2", ",".join(names), *names, "half:!gpu-00000", "&all2"], list(names), groups,
                              names)
    assert len(chosen) == n - 1 and chosen[0] == "gpu-00001"
    # quadratic code compares about n*n/2 = 4.5 million times; linear code a few times n at most
    assert after_groups < 10 * n, after_groups
    assert Counted.compared - after_groups < 10 * n, Counted.compared - after_groups


def test_twenty_thousand_hosts_load_and_select_in_linear_cpu_time():
    n = 20_000
    names = [f"gpu-{i:05d}" for i in range(1, n + 1)]
    cpu = time.process_time()
    s = Settings.model_validate({"hosts": {"gpu-[00001:20000]": {}},
                                 "groups": {"first": names[: n // 2], "second": ["gpu-[00001:20000]"],
                                            "both": ["first", "second"]}})
    for pattern in (["all"], ["both"], [",".join(names)], names, ["all:!gpu-00001:&first"]):
        assert s.resolve_hosts(pattern)
    # main took 37 s of CPU for this (its groups and selection were quadratic); linear code
    # takes ~0.5 s. CPU time and a bound 30 times that: a busy machine cannot fail it.
    assert time.process_time() - cpu < 15


def test_h_parsing_is_linear():
    s = Settings()
    cpu = time.process_time()
    with pytest.raises(UsageError, match="no host given"):
        s.resolve_hosts([":" * 120_000])
    # the regex look-ahead it replaced took 19.6 s of CPU here; linear parsing takes ~0.04 s. CPU
    # time (not wall time) and a bound 100 times the linear cost: a busy machine cannot fail it.
    assert time.process_time() - cpu < 5
    assert inventory.split_patterns("a:b,gpu-[01:03]:!c,&d") == ["a", "b", "gpu-[01:03]", "!c", "&d"]
    assert inventory.split_patterns("x-[1:2],y-[a:b]") == ["x-[1:2]", "y-[a:b]"]


def test_unknown_names_in_a_long_h_are_shown_short():
    s = Settings()
    with pytest.raises(UsageError) as e:
        s.resolve_hosts(["x" * 10_000])
    assert len(str(e.value)) < 300
